#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

using kernels::internal::SimdLevel;

Tensor RandomWeights(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(k);
  Tensor w = Tensor::Allocate(dtype, {n, k});
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(dtype, row.data(), static_cast<char*>(w.mutable_data()) + j * w.row_bytes(), k);
  }
  return w;
}

// Per-output error bound: float accumulation error, plus for Q8_0 the activation quantization
// error (each activation moves by at most half a step, amax / 254 of its block).
std::vector<double> ErrorBounds(const std::vector<float>& x, int64_t m, const Tensor& w) {
  const int64_t n = w.shape[0];
  const int64_t k = w.shape[1];
  std::vector<double> bound(m * n);
  std::vector<float> row(k);
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(w.dtype, w.row(j), row.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x.data() + i * k;
      double abs_sum = 0.0;
      double quant = 0.0;
      for (int64_t c = 0; c < k; ++c) abs_sum += std::fabs(static_cast<double>(xi[c]) * row[c]);
      if (w.dtype == DType::kQ8_0) {
        for (int64_t b = 0; b < k / 32; ++b) {
          double amax = 0.0, wsum = 0.0;
          for (int c = 0; c < 32; ++c) {
            amax = std::max(amax, std::fabs(static_cast<double>(xi[b * 32 + c])));
            wsum += std::fabs(row[b * 32 + c]);
          }
          quant += amax / 254.0 * wsum;
        }
      }
      bound[i * n + j] = 1.01 * quant + 2e-6 * std::sqrt(static_cast<double>(k)) * abs_sum + 1e-6;
    }
  }
  return bound;
}

class MatmulTest : public SimdLevelTest {};

TEST_P(MatmulTest, MatchesReferenceAcrossShapesDtypesAndThreads) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes = {{1, 37, 32},   {2, 5, 96},    {3, 67, 64},   {5, 33, 4128},
                               {17, 41, 288}, {64, 35, 544}, {130, 67, 1056}, {4, 129, 4128},
                               {1, 1, 4096 + 32}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    std::vector<Shape> all = shapes;
    if (dtype != DType::kQ8_0) {
      all.push_back({3, 9, 7});
      all.push_back({6, 11, 100});
      all.push_back({1, 5, 1});
    }
    for (const Shape& s : all) {
      Tensor w = RandomWeights(dtype, s.n, s.k, rng);
      std::vector<float> x(s.m * s.k);
      for (auto& v : x) v = dist(rng);
      std::vector<float> expected(s.m * s.n);
      reference::Matmul(x.data(), s.m, w, expected.data(), nullptr);
      std::vector<double> bound = ErrorBounds(x, s.m, w);
      for (ThreadPool* pool : pools) {
        std::vector<float> y(s.m * s.n, NAN);
        kernels::Matmul(x.data(), s.m, w, y.data(), pool);
        int num_bad = 0;
        for (int64_t i = 0; i < s.m * s.n && num_bad < 5; ++i) {
          if (!(std::fabs(y[i] - expected[i]) <= bound[i])) {
            ++num_bad;
            ADD_FAILURE() << DTypeName(dtype) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                          << " threads=" << (pool ? pool->num_threads() : 1) << " index " << i
                          << ": got " << y[i] << " want " << expected[i] << " bound " << bound[i];
          }
        }
      }
    }
  }
}

// The Q8_0 kernels switch on m (a decode kernel for 1 row; from 2, packed panels of 16 rows
// (VNNI) or 8 (AVX2), split into microkernel groups of up to 8 or 4 rows) and handle partial
// panels: sweep the row counts around each boundary with n not a multiple of 16 or 8 and
// several block counts (odd included).
TEST_P(MatmulTest, Q8MatchesReferenceAcrossRowCounts) {
  std::mt19937 rng(99);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 32, 33, 64, 100, 257};
  struct Nk {
    int64_t n, k;
  };
  const Nk nks[] = {{1, 32}, {15, 96}, {17, 576}, {49, 160}, {37, 1536}};
  for (const Nk& s : nks) {
    Tensor w = RandomWeights(DType::kQ8_0, s.n, s.k, rng);
    for (int64_t m : ms) {
      std::vector<float> x(m * s.k);
      for (auto& v : x) v = dist(rng);
      std::vector<float> expected(m * s.n);
      reference::Matmul(x.data(), m, w, expected.data(), nullptr);
      std::vector<double> bound = ErrorBounds(x, m, w);
      for (ThreadPool* pool : pools) {
        std::vector<float> y(m * s.n, NAN);
        kernels::Matmul(x.data(), m, w, y.data(), pool);
        int num_bad = 0;
        for (int64_t i = 0; i < m * s.n && num_bad < 5; ++i) {
          if (!(std::fabs(y[i] - expected[i]) <= bound[i])) {
            ++num_bad;
            ADD_FAILURE() << "m=" << m << " n=" << s.n << " k=" << s.k
                          << " threads=" << (pool ? pool->num_threads() : 1) << " index " << i
                          << ": got " << y[i] << " want " << expected[i] << " bound " << bound[i];
          }
        }
      }
    }
  }
}

TEST_P(MatmulTest, Q8ExactForIntegerInputs) {
  // Activation blocks whose absmax is 127 quantize exactly; weights with scale 1/2 and small
  // integers keep every partial sum exactly representable, so the result is exact.
  const int64_t m = 20, n = 37, k = 256;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> xi(-127, 127), wi(-20, 20);
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = static_cast<float>(i % 32 == 5 ? 127 : xi(rng));
  Tensor w = Tensor::Allocate(DType::kQ8_0, {n, k});
  auto* blocks = static_cast<BlockQ8_0*>(w.mutable_data());
  for (int64_t b = 0; b < n * k / 32; ++b) {
    blocks[b].d = Fp32ToFp16(0.5f);
    for (auto& q : blocks[b].qs) q = static_cast<int8_t>(wi(rng));
  }
  std::vector<float> expected(m * n), y(m * n);
  reference::Matmul(x.data(), m, w, expected.data(), nullptr);
  ThreadPool pool(2);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{5}, m}) {
    kernels::Matmul(x.data(), rows, w, y.data(), &pool);
    for (int64_t i = 0; i < rows * n; ++i) ASSERT_EQ(y[i], expected[i]) << "rows=" << rows << " i=" << i;
  }
}

// Weights packed once (w.packed) give the same bits as the layout built on every call, for
// every row count and partial panel; levels without a packed layout return null and ignore it.
TEST_P(MatmulTest, PackedWeightsMatchUnpackedBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2);
  ThreadPool* pools[] = {nullptr, &pool2};
  struct Nk {
    int64_t n, k;
  };
  for (const Nk& s : {Nk{1, 32}, Nk{17, 576}, Nk{49, 160}, Nk{64, 1536}}) {
    const Tensor w = RandomWeights(DType::kQ8_0, s.n, s.k, rng);
    Tensor packed = w;
    packed.packed = kernels::PackMatmulWeights(w);
    const bool expect_packed = GetParam() != SimdLevel::kScalar;
    ASSERT_EQ(packed.packed != nullptr, expect_packed);
    // Panels of 16 rows x 576-byte blocks (VNNI) or 8 rows x 288-byte blocks (AVX2).
    const int64_t panel_rows = GetParam() == SimdLevel::kAvx512Vnni ? 16 : 8;
    EXPECT_EQ(kernels::PackedMatmulWeightsBytes(w),
              expect_packed ? (s.n + panel_rows - 1) / panel_rows * s.k / 32 * 36 * panel_rows
                            : 0);
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 32, 33, 300}) {
      std::vector<float> x(m * s.k);
      for (auto& v : x) v = dist(rng);
      for (ThreadPool* pool : pools) {
        std::vector<float> want(m * s.n, NAN), got(m * s.n, NAN);
        kernels::Matmul(x.data(), m, w, want.data(), pool);
        kernels::Matmul(x.data(), m, packed, got.data(), pool);
        for (int64_t i = 0; i < m * s.n; ++i) {
          ASSERT_EQ(got[i], want[i]) << "m=" << m << " n=" << s.n << " k=" << s.k << " i=" << i;
        }
      }
    }
  }
  // The packed layout is what runs for m >= 2 at that level: given another matrix's panels,
  // the product is that matrix's.
  if (GetParam() != SimdLevel::kScalar) {
    const Tensor w1 = RandomWeights(DType::kQ8_0, 33, 96, rng);
    const Tensor w2 = RandomWeights(DType::kQ8_0, 33, 96, rng);
    Tensor mixed = w1;
    mixed.packed = kernels::PackMatmulWeights(w2);
    for (const int64_t m : {int64_t{2}, int64_t{12}}) {
      std::vector<float> x(m * 96), want(m * 33), got(m * 33);
      for (auto& v : x) v = dist(rng);
      kernels::Matmul(x.data(), m, w2, want.data(), nullptr);
      kernels::Matmul(x.data(), m, mixed, got.data(), nullptr);
      EXPECT_EQ(got, want) << "m=" << m;
    }
  }
  // Other weight types have no packed layout.
  EXPECT_EQ(kernels::PackMatmulWeights(RandomWeights(DType::kF16, 16, 64, rng)), nullptr);
}

// The AVX2 and VNNI panels compute every block's exact int32 dot product and the same float
// arithmetic after it: from 2 rows on the two levels give the same bits.
TEST(MatmulLevels, Avx2AndVnniPanelsGiveTheSameBits) {
  if (kernels::internal::DetectedSimdLevel() != SimdLevel::kAvx512Vnni) {
    GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2);
  const Tensor w = RandomWeights(DType::kQ8_0, 45, 320, rng);
  for (const int64_t m : {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{40}}) {
    std::vector<float> x(m * 320), avx2(m * 45), vnni(m * 45);
    for (auto& v : x) v = dist(rng);
    const SimdLevel previous = kernels::internal::SetSimdLevelForTesting(SimdLevel::kAvx2);
    kernels::Matmul(x.data(), m, w, avx2.data(), &pool2);
    kernels::internal::SetSimdLevelForTesting(SimdLevel::kAvx512Vnni);
    kernels::Matmul(x.data(), m, w, vnni.data(), &pool2);
    kernels::internal::SetSimdLevelForTesting(previous);
    EXPECT_EQ(avx2, vnni) << "m=" << m;
  }
}

TEST_P(MatmulTest, ZeroActivationsGiveZero) {
  std::mt19937 rng(3);
  Tensor w = RandomWeights(DType::kQ8_0, 9, 64, rng);
  std::vector<float> x(2 * 64, 0.0f), y(2 * 9, 1.0f);
  kernels::Matmul(x.data(), 2, w, y.data(), nullptr);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Levels, MatmulTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

}  // namespace
}  // namespace kvserve
