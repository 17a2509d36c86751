// Test-only: a GoogleTest fixture that runs each test once per SIMD level (scalar, AVX2,
// AVX-512 VNNI), skipping levels this CPU lacks and restoring the detected level afterwards.
#pragma once

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"

namespace kvserve {

class SimdLevelTest : public ::testing::TestWithParam<kernels::internal::SimdLevel> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(kernels::internal::DetectedSimdLevel())) {
      GTEST_SKIP() << "CPU lacks this SIMD level";
    }
    previous_ = kernels::internal::SetSimdLevelForTesting(GetParam());
  }
  void TearDown() override { kernels::internal::SetSimdLevelForTesting(previous_); }

 private:
  kernels::internal::SimdLevel previous_ = kernels::internal::SimdLevel::kScalar;
};

}  // namespace kvserve
