// kernels::Matmul on the GGML 2- to 6-bit weight types (Q4_0 ... Q6_K) at every SIMD level
// this CPU has, against a double-precision product of DequantizeRow'd weights.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_weights_test_util.h"
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

using kernels::internal::SimdLevel;

constexpr DType kLegacyTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1};
constexpr DType kKTypes[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                             DType::kQ6_K};

// The exact product (in double) and a per-output error bound for the SIMD kernels: they
// quantize activations to int8 in blocks of `act_block` values (each moves by at most half a
// step, amax / 254 of its block) and compute in float. The float error is bounded relative to
// sum |x| * (|w - o| + |o|), o the weight's offset term (its value with the q bits zeroed),
// since the kernels add the scaled and offset parts separately.
struct Expected {
  std::vector<double> value;
  std::vector<double> bound;
};

Expected Expect(const std::vector<float>& x, int64_t m, const Tensor& w, int64_t act_block) {
  const int64_t n = w.shape[0];
  const int64_t k = w.shape[1];
  const Tensor offsets = ZeroQuantBits(w);
  Expected e;
  e.value.resize(m * n);
  e.bound.resize(m * n);
  std::vector<float> row(k), off(k);
  std::vector<double> amax(m * (k / act_block));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k / act_block; ++b) {
      double a = 0.0;
      for (int64_t c = 0; c < act_block; ++c) {
        a = std::max(a, std::fabs(static_cast<double>(x[i * k + b * act_block + c])));
      }
      amax[i * (k / act_block) + b] = a;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(w.dtype, w.row(j), row.data(), k);
    DequantizeRow(w.dtype, offsets.row(j), off.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x.data() + i * k;
      double sum = 0.0, mag = 0.0, quant = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double wc = row[c], oc = off[c], xc = xi[c];
        sum += xc * wc;
        mag += std::fabs(xc) * (std::fabs(wc - oc) + std::fabs(oc));
        quant += amax[i * (k / act_block) + c / act_block] / 254.0 * std::fabs(wc);
      }
      e.value[i * n + j] = sum;
      e.bound[i * n + j] = 1.01 * quant + 4e-6 * std::sqrt(static_cast<double>(k)) * mag + 1e-30;
    }
  }
  return e;
}

class MatmulQuantTest : public SimdLevelTest {
 protected:
  // Whether the level under test packs weights (every type with panels, at every SIMD level).
  bool HasPanels() const { return GetParam() != SimdLevel::kScalar; }
  // Checks every odd shape for `dtype` over the given k values, with and without threads, and
  // that all thread counts give the same bits.
  // packed: the weights packed at load (PackMatmulWeights: q4_0 / q5_0 into 4- / 5-bit panels).
  void CheckShapes(DType dtype, const std::vector<int64_t>& ks, const RandomGgmlOptions& options,
                   uint32_t seed, bool packed = false) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    ThreadPool pool2(2), pool3(3);
    ThreadPool* pools[] = {nullptr, &pool2, &pool3};
    const int64_t act_block = DTypeBlockElems(dtype) == 256 ? 256 : 32;
    for (int64_t k : ks) {
      for (int64_t n : {1, 3, 17, 33, 70}) {
        Tensor w = RandomGgmlWeights(dtype, n, k, rng, options);
        if (packed) {
          w.packed = kernels::PackMatmulWeights(w);
          ASSERT_EQ(w.packed != nullptr, HasPanels()) << DTypeName(dtype);
        }
        for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 33}) {
          std::vector<float> x(m * k);
          for (auto& v : x) v = dist(rng);
          // Some rows scaled far up or down: activation scales are per block and row. The Q8_0
          // kernels (the packed path) keep them in fp16, as GGML's Q8_0 activations do, so
          // their small row stays where the scale (amax / 127) is a normal fp16 (>= 6.1e-5).
          if (m > 2) {
            const float small = packed ? 1e-2f : 1e-4f;
            for (int64_t c = 0; c < k; ++c) x[k + c] *= small;
            for (int64_t c = 0; c < k; ++c) x[2 * k + c] *= 1e4f;
          }
          const Expected e = Expect(x, m, w, act_block);
          std::vector<float> first;
          for (ThreadPool* pool : pools) {
            std::vector<float> y(m * n, NAN);
            kernels::Matmul(x.data(), m, w, y.data(), pool);
            int num_bad = 0;
            for (int64_t i = 0; i < m * n && num_bad < 5; ++i) {
              if (!(std::fabs(y[i] - e.value[i]) <= e.bound[i])) {
                ++num_bad;
                ADD_FAILURE() << DTypeName(dtype) << " m=" << m << " n=" << n << " k=" << k
                              << " threads=" << (pool ? pool->num_threads() : 1) << " index "
                              << i << ": got " << y[i] << " want " << e.value[i] << " bound "
                              << e.bound[i];
              }
            }
            if (first.empty()) {
              first = y;
            } else {
              for (int64_t i = 0; i < m * n; ++i) {
                ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(first[i]))
                    << DTypeName(dtype) << " m=" << m << " n=" << n << " k=" << k
                    << " differs across thread counts at " << i;
              }
            }
          }
        }
      }
    }
  }
};

TEST_P(MatmulQuantTest, LegacyTypesMatchReference) {
  for (DType dtype : kLegacyTypes) CheckShapes(dtype, {32, 96, 160}, {}, 11);
}

// Q4_0 and Q5_0 packed at load into their 4- and 5-bit panels, which run every row count
// (groups of up to 8 rows at VNNI and 4 or 3 at AVX2; 9 rows makes an uneven split).
TEST_P(MatmulQuantTest, LegacyTypesPackedMatchReference) {
  for (DType dtype : {DType::kQ4_0, DType::kQ5_0}) {
    CheckShapes(dtype, {32, 96, 160}, {}, 17, /*packed=*/true);
    RandomGgmlOptions extreme;
    extreme.extreme = true;
    CheckShapes(dtype, {96}, extreme, 18, /*packed=*/true);
  }
  EXPECT_EQ(kernels::PackMatmulWeights(Tensor::Allocate(DType::kQ4_1, {16, 64})), nullptr);
  // The panels are what runs: given another matrix's panels, the product is that matrix's at
  // every row count.
  if (GetParam() == SimdLevel::kScalar) return;
  std::mt19937 rng(19);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DType dtype : {DType::kQ4_0, DType::kQ5_0}) {
    const int64_t n = 33, k = 128;
    const Tensor w1 = RandomGgmlWeights(dtype, n, k, rng);
    const Tensor w2 = RandomGgmlWeights(dtype, n, k, rng);
    Tensor mixed = w1;
    mixed.packed = kernels::PackMatmulWeights(w2);
    EXPECT_TRUE(kernels::PackedReplacesWeights(mixed)) << DTypeName(dtype);
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{9}}) {
      std::vector<float> x(m * k);
      for (auto& v : x) v = dist(rng);
      const Expected e = Expect(x, m, w2, 32);
      std::vector<float> y(m * n, NAN);
      kernels::Matmul(x.data(), m, mixed, y.data(), nullptr);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_LE(std::fabs(y[i] - e.value[i]), e.bound[i]) << DTypeName(dtype) << " m=" << m;
      }
    }
  }
}

TEST_P(MatmulQuantTest, KQuantTypesMatchReference) {
  for (DType dtype : kKTypes) CheckShapes(dtype, {256, 512, 768, 2304}, {}, 12);
}

// Q4_K and Q6_K packed at load into their panels (matmul_k4_panels.inc, matmul_k6_panels.inc),
// which run every row count.
TEST_P(MatmulQuantTest, KQuantPanelsMatchReference) {
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {
    CheckShapes(dtype, {256, 512, 2304}, {}, 21, /*packed=*/true);
    RandomGgmlOptions extreme;
    extreme.extreme = true;
    CheckShapes(dtype, {512}, extreme, 22, /*packed=*/true);
  }
  EXPECT_EQ(kernels::PackMatmulWeights(Tensor::Allocate(DType::kQ5_K, {16, 256})), nullptr);
  // Given another matrix's panels, the product is that matrix's at every row count.
  if (!HasPanels()) return;
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n = 33, k = 512;
    const Tensor w1 = RandomGgmlWeights(dtype, n, k, rng);
    const Tensor w2 = RandomGgmlWeights(dtype, n, k, rng);
    Tensor mixed = w1;
    mixed.packed = kernels::PackMatmulWeights(w2);
    EXPECT_TRUE(kernels::PackedReplacesWeights(mixed));
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{9}}) {
      std::vector<float> x(m * k);
      for (auto& v : x) v = dist(rng);
      const Expected e = Expect(x, m, w2, 256);
      std::vector<float> y(m * n, NAN);
      kernels::Matmul(x.data(), m, mixed, y.data(), nullptr);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_LE(std::fabs(y[i] - e.value[i]), e.bound[i]) << DTypeName(dtype) << " m=" << m;
      }
    }
  }
}

TEST_P(MatmulQuantTest, ExtremeScalesMatchReference) {
  RandomGgmlOptions extreme;
  extreme.extreme = true;
  for (DType dtype : kLegacyTypes) CheckShapes(dtype, {96}, extreme, 13);
  for (DType dtype : kKTypes) CheckShapes(dtype, {512}, extreme, 14);
}

// Larger shapes than the sweep: several prefill tiles of rows and of k, many threads.
TEST_P(MatmulQuantTest, LargeShapes) {
  std::mt19937 rng(15);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool(4);
  for (DType dtype : {DType::kQ4_0, DType::kQ5_1, DType::kQ3_K, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n = 131, k = 4096 + 1024, m = 37;
    const Tensor w = RandomGgmlWeights(dtype, n, k, rng);
    std::vector<float> x(m * k);
    for (auto& v : x) v = dist(rng);
    const Expected e = Expect(x, m, w, DTypeBlockElems(dtype) == 256 ? 256 : 32);
    Tensor packed = w;  // and the packed layout, where the level has one
    packed.packed = kernels::PackMatmulWeights(w);
    for (const Tensor* weights : std::initializer_list<const Tensor*>{&w, &packed}) {
      for (int64_t rows : {int64_t{1}, int64_t{4}, m}) {
        std::vector<float> y(rows * n, NAN);
        kernels::Matmul(x.data(), rows, *weights, y.data(), &pool);
        for (int64_t i = 0; i < rows * n; ++i) {
          ASSERT_LE(std::fabs(y[i] - e.value[i]), e.bound[i])
              << DTypeName(dtype) << " rows=" << rows << " i=" << i
              << (weights == &packed ? " packed" : "");
        }
      }
    }
  }
}

TEST_P(MatmulQuantTest, ZeroActivationsGiveZero) {
  std::mt19937 rng(16);
  for (DType dtype : {DType::kQ4_1, DType::kQ2_K, DType::kQ6_K}) {
    const int64_t k = 512;
    const Tensor w = RandomGgmlWeights(dtype, 9, k, rng);
    for (int64_t m : {int64_t{2}, int64_t{6}}) {
      std::vector<float> x(m * k, 0.0f), y(m * 9, 1.0f);
      kernels::Matmul(x.data(), m, w, y.data(), nullptr);
      for (float v : y) EXPECT_EQ(v, 0.0f) << DTypeName(dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, MatmulQuantTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) {
                           return std::to_string(static_cast<int>(info.param));
                         });

}  // namespace
}  // namespace kvserve
