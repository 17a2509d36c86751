// The ceilings are positive at every level the CPU has (int8 is 0 at the scalar level, where
// no int8 kernel exists), and a repeated measurement reports its repetitions.
#include "kernels/ceiling.h"

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd_level_test_util.h"

namespace kvserve::kernels {
namespace {

using internal::SimdLevel;

class CeilingTest : public SimdLevelTest {};

TEST_P(CeilingTest, PositiveAtEveryLevel) {
  ThreadPool pool(2);
  const CeilingMeasurement bw = MeasureReadBandwidth(&pool, 8 << 20, 2);
  EXPECT_EQ(bw.repetitions, 2);
  EXPECT_GT(bw.best, 1e8);
  EXPECT_GE(bw.best, bw.median);
  double per_cpu = 0;
  EXPECT_GT(MeasureFmaPeak(&pool, 1, &per_cpu).best, 1e8);
  EXPECT_GT(per_cpu, 0.0);
  const CeilingMeasurement int8 = MeasureInt8DotPeak(&pool, 1);
  if (GetParam() == SimdLevel::kScalar) {
    EXPECT_EQ(int8.best, 0.0);
  } else {
    EXPECT_GT(int8.best, 1e9);
  }
  // vdpbf16ps only where the bf16 kernels use it.
  const CeilingMeasurement bf16 = MeasureBf16DotPeak(&pool, 1);
  if (internal::UseAvx512Bf16Dot()) {
    EXPECT_GT(bf16.best, 1e9);
  } else {
    EXPECT_EQ(bf16.best, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CeilingTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

}  // namespace
}  // namespace kvserve::kernels
