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
  // The GGML 4- to 6-bit types other than q4_0 / q5_0 (matmul_quant_test) have no packed layout.
  EXPECT_EQ(kernels::PackMatmulWeights(Tensor::Allocate(DType::kQ4_1, {16, 64})), nullptr);
}

// Float weights (f32, f16, bf16) packed in panels (32 rows with VNNI, 16 at AVX2; bf16 in
// column pairs, k padded to even) run one microkernel at every row count: sweep row counts
// around the microkernel groups (6 / 8 rows) and the 256-row chunk, n around the panel size,
// and k past the k-tiles (2048 to 8192 columns by level and type), odd k included; each against
// the reference.
TEST_P(MatmulTest, FloatPanelsMatchReferenceAcrossShapes) {
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const bool expect_packed = GetParam() != SimdLevel::kScalar;
  const int64_t panel_rows = GetParam() == SimdLevel::kAvx512Vnni ? 32 : 16;
  struct Nk {
    int64_t n, k;
  };
  struct Case {
    DType dtype;
    bool bf16_dot;     // bf16 panels through vdpbf16ps (where the level and CPU have it)
    bool f16_as_bf16;  // f16 weights packed as bf16 panels (KVSERVE_F16_AS_BF16)
  };
  std::vector<Case> cases = {
      {DType::kF32, false, false}, {DType::kF16, false, false}, {DType::kBF16, false, false}};
  const bool prior_dot = kernels::internal::SetAvx512Bf16DotForTesting(true);
  const bool prior_f16 = kernels::internal::SetF16AsBf16ForTesting(true);
  if (kernels::internal::UseAvx512Bf16Dot()) cases.push_back({DType::kBF16, true, false});
  if (kernels::internal::PackF16AsBf16()) cases.push_back({DType::kF16, true, true});
  for (const auto& [dtype, bf16_dot, f16_as_bf16] : cases) {
    kernels::internal::SetAvx512Bf16DotForTesting(bf16_dot);
    kernels::internal::SetF16AsBf16ForTesting(f16_as_bf16);
    for (const Nk& s : {Nk{1, 1}, Nk{17, 7}, Nk{33, 255}, Nk{45, 257}, Nk{70, 576}, Nk{16, 513},
                          Nk{17, 8195}}) {  // 8195: past every level's k-tile, odd
      const Tensor w = RandomWeights(dtype, s.n, s.k, rng);
      Tensor packed = w;
      packed.packed = kernels::PackMatmulWeights(w);
      ASSERT_EQ(packed.packed != nullptr, expect_packed) << DTypeName(dtype);
      // f16 packed as bf16 multiplies the weights rounded to bf16 (nearest even): the reference
      // runs on those.
      Tensor w_used = w;
      if (f16_as_bf16) {
        w_used = Tensor::Allocate(DType::kBF16, {s.n, s.k});
        std::vector<float> row(s.k);
        for (int64_t j = 0; j < s.n; ++j) {
          DequantizeRow(DType::kF16, w.row(j), row.data(), s.k);
          QuantizeRow(DType::kBF16, row.data(),
                      static_cast<char*>(w_used.mutable_data()) + j * w_used.row_bytes(), s.k);
        }
      }
      const bool pairs = dtype == DType::kBF16 || f16_as_bf16;
      const int64_t cols = pairs ? (s.k + 1) / 2 * 2 : s.k;
      EXPECT_EQ(kernels::PackedMatmulWeightsBytes(w),
                expect_packed ? (s.n + panel_rows - 1) / panel_rows * panel_rows * cols *
                                    static_cast<int64_t>(DTypeBlockBytes(dtype))
                              : 0);
      for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 13, 40, 300}) {
        std::vector<float> x(m * s.k);
        for (auto& v : x) v = dist(rng);
        // vdpbf16ps multiplies the activations rounded to bf16 (nearest even): exactly the
        // reference's products on those activations, summed in another order.
        std::vector<float> x_used = x;
        if (bf16_dot) {
          for (auto& v : x_used) v = Bf16ToFp32(Fp32ToBf16(v));
        }
        std::vector<float> expected(m * s.n);
        reference::Matmul(x_used.data(), m, w_used, expected.data(), nullptr);
        const std::vector<double> bound = ErrorBounds(x_used, m, w_used);
        // The precision given up, against the f16 weights and f32 activations: rounding an
        // operand to bf16 (8 significant bits, nearest even) moves it by at most 2^-8 of
        // itself, so each product by at most (2^-8 + 2^-8 + 2^-16) of |x w|; that times
        // sum |x w|, plus the float bound.
        std::vector<float> exact(m * s.n);
        std::vector<double> rounding(m * s.n);
        if (f16_as_bf16) {
          reference::Matmul(x.data(), m, w, exact.data(), nullptr);
          std::vector<float> row(s.k);
          for (int64_t j = 0; j < s.n; ++j) {
            DequantizeRow(DType::kF16, w.row(j), row.data(), s.k);
            for (int64_t i = 0; i < m; ++i) {
              double abs_sum = 0.0;
              for (int64_t c = 0; c < s.k; ++c) abs_sum += std::fabs(double(x[i * s.k + c]) * row[c]);
              rounding[i * s.n + j] = (2.0 / 256 + 1.0 / 65536) * abs_sum;
            }
          }
        }
        for (ThreadPool* pool : pools) {
          std::vector<float> y(m * s.n, NAN);
          kernels::Matmul(x.data(), m, packed, y.data(), pool);
          for (int64_t i = 0; i < m * s.n; ++i) {
            ASSERT_LE(std::fabs(y[i] - expected[i]), bound[i])
                << DTypeName(dtype) << (bf16_dot ? " (vdpbf16ps)" : "")
                << (f16_as_bf16 ? " (packed as bf16)" : "") << " m=" << m << " n=" << s.n
                << " k=" << s.k << " i=" << i << " threads=" << (pool ? pool->num_threads() : 1);
            if (f16_as_bf16) {
              ASSERT_LE(std::fabs(y[i] - exact[i]), rounding[i] + bound[i])
                  << "f16 packed as bf16 against the f16 reference, m=" << m << " i=" << i;
            }
          }
        }
      }
    }
  }
  kernels::internal::SetAvx512Bf16DotForTesting(prior_dot);
  kernels::internal::SetF16AsBf16ForTesting(prior_f16);
  // The panels are what runs: given another matrix's panels, the product is that matrix's.
  if (expect_packed) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor w1 = RandomWeights(dtype, 33, 96, rng);
      const Tensor w2 = RandomWeights(dtype, 33, 96, rng);
      Tensor mixed = w1;
      mixed.packed = kernels::PackMatmulWeights(w2);
      for (const int64_t m : {int64_t{1}, int64_t{12}}) {
        std::vector<float> x(m * 96), want(m * 33), got(m * 33);
        for (auto& v : x) v = dist(rng);
        std::vector<float> x_used = x;  // as the kernel multiplies them (see above)
        if (dtype == DType::kBF16 && kernels::internal::UseAvx512Bf16Dot()) {
          for (auto& v : x_used) v = Bf16ToFp32(Fp32ToBf16(v));
        }
        reference::Matmul(x_used.data(), m, w2, want.data(), nullptr);
        kernels::Matmul(x.data(), m, mixed, got.data(), nullptr);
        for (int64_t i = 0; i < m * 33; ++i) {
          EXPECT_NEAR(got[i], want[i], 1e-3 * (1.0 + std::fabs(want[i]))) << DTypeName(dtype);
        }
      }
    }
  }
}

// A group of products of the same activations gives each weight exactly Matmul's bits: Q8_0,
// packed Q4_0, Q5_0, Q4_K, Q6_K and float weights share one quantization and one parallel section;
// mixed dtypes (and unpacked floats) take one Matmul each.
TEST_P(MatmulTest, MatmulGroupGivesEachMatmulsBits) {
  std::mt19937 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ThreadPool pool2(2);
  ThreadPool* pools[] = {nullptr, &pool2};
  auto packed = [&](DType dtype, int64_t n, int64_t k = 320) {
    Tensor w = RandomWeights(dtype, n, k, rng);
    w.packed = kernels::PackMatmulWeights(w);
    return w;
  };
  struct Group {
    std::vector<Tensor> w;
  };
  std::vector<Group> groups;
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kF16, DType::kBF16, DType::kF32}) {
    groups.push_back({{packed(dtype, 96), packed(dtype, 33), packed(dtype, 33)}});
  }
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {  // k-quant panels
    groups.push_back({{packed(dtype, 96, 512), packed(dtype, 33, 512), packed(dtype, 33, 512)}});
  }
  groups.push_back({{packed(DType::kQ8_0, 40), packed(DType::kF16, 17)}});  // mixed
  // An unpacked F16 weight beside a packed one:
  groups.push_back({{RandomWeights(DType::kF16, 40, 320, rng), packed(DType::kF16, 9)}});
  for (const Group& g : groups) {
    const int64_t k = g.w[0].shape[1];
    for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{33}}) {
      std::vector<float> x(m * k);
      for (auto& v : x) v = dist(rng);
      for (ThreadPool* pool : pools) {
        std::vector<std::vector<float>> want(g.w.size()), got(g.w.size());
        for (size_t i = 0; i < g.w.size(); ++i) {
          want[i].assign(m * g.w[i].shape[0], NAN);
          got[i].assign(m * g.w[i].shape[0], NAN);
          kernels::Matmul(x.data(), m, g.w[i], want[i].data(), pool);
        }
        if (g.w.size() == 3) {
          kernels::MatmulGroup(x.data(), m, {{&g.w[0], got[0].data()}, {&g.w[1], got[1].data()},
                                             {&g.w[2], got[2].data()}}, pool);
        } else {
          kernels::MatmulGroup(x.data(), m, {{&g.w[0], got[0].data()}, {&g.w[1], got[1].data()}},
                               pool);
        }
        for (size_t i = 0; i < g.w.size(); ++i) {
          EXPECT_EQ(got[i], want[i]) << DTypeName(g.w[i].dtype) << " weight " << i << " m=" << m;
        }
      }
    }
  }
}

// The AVX2 and VNNI panels compute every block's exact int32 dot product and the same float
// arithmetic after it: from 2 rows on (Q4_0's and Q5_0's 4- and 5-bit panels, Q4_K and Q6_K:
// from 1) the two levels give the same bits.
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
  // Q4_0 and Q5_0 packed at each level (4- and 5-bit panels; 6 rows: one group at VNNI, two
  // at AVX2), Q4_K and Q6_K.
  for (const DType dtype : {DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t k = dtype == DType::kQ4_K || dtype == DType::kQ6_K ? 512 : 320;
    const Tensor w4 = RandomWeights(dtype, 45, k, rng);
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{9}}) {
      std::vector<float> x(m * k);
      for (auto& v : x) v = dist(rng);
      std::vector<float> y[2];
      const SimdLevel levels[2] = {SimdLevel::kAvx2, SimdLevel::kAvx512Vnni};
      for (int l = 0; l < 2; ++l) {
        const SimdLevel previous = kernels::internal::SetSimdLevelForTesting(levels[l]);
        Tensor packed = w4;
        packed.packed = kernels::PackMatmulWeights(w4);
        y[l].assign(m * 45, NAN);
        kernels::Matmul(x.data(), m, packed, y[l].data(), &pool2);
        kernels::internal::SetSimdLevelForTesting(previous);
      }
      EXPECT_EQ(y[0], y[1]) << DTypeName(dtype) << " m=" << m;
    }
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
