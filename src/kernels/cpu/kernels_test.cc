#include "kernels/kernels.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/reference/reference.h"

namespace kvserve {
namespace {

using kernels::internal::SimdLevel;

std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float rel,
                 float abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << what << " index " << i;
  }
}

class KernelsTest : public SimdLevelTest {
 protected:
  std::mt19937 rng_{99};
};

TEST_P(KernelsTest, RmsNormMatchesReference) {
  for (int64_t n : {1, 7, 8, 64, 576, 2051}) {
    for (int64_t rows : {1, 3}) {
      auto x = RandomVector(rows * n, rng_, 3.0f);
      auto w = RandomVector(n, rng_);
      std::vector<float> got(rows * n), want(rows * n);
      kernels::RmsNorm(x.data(), w.data(), rows, n, 1e-5f, got.data());
      reference::RmsNorm(x.data(), w.data(), rows, n, 1e-5f, want.data());
      ExpectClose(got, want, 1e-5f, 1e-6f, "rmsnorm n=" + std::to_string(n));
    }
  }
}

TEST_P(KernelsTest, LayerNormMatchesReference) {
  for (int64_t n : {1, 7, 8, 32, 384, 1000, 2051}) {
    for (int64_t rows : {1, 3}) {
      auto x = RandomVector(rows * n, rng_, 3.0f);
      for (int64_t i = 0; i < rows * n; ++i) x[i] += 5.0f;  // an offset the mean must remove
      auto w = RandomVector(n, rng_);
      auto b = RandomVector(n, rng_);
      std::vector<float> got(rows * n), want(rows * n);
      kernels::LayerNorm(x.data(), w.data(), b.data(), rows, n, 1e-12f, got.data());
      reference::LayerNorm(x.data(), w.data(), b.data(), rows, n, 1e-12f, want.data());
      ExpectClose(got, want, 1e-4f, 1e-5f, "layernorm n=" + std::to_string(n));
      // In place.
      kernels::LayerNorm(x.data(), w.data(), b.data(), rows, n, 1e-12f, x.data());
      ExpectClose(x, want, 1e-4f, 1e-5f, "layernorm in place n=" + std::to_string(n));
    }
  }
  // A constant row normalises to the bias (and stays finite with a tiny eps).
  std::vector<float> x(384, 2.5f), w(384, 3.0f), b(384), out(384);
  for (int i = 0; i < 384; ++i) b[i] = 0.01f * static_cast<float>(i);
  kernels::LayerNorm(x.data(), w.data(), b.data(), 1, 384, 1e-12f, out.data());
  for (int i = 0; i < 384; ++i) ASSERT_FLOAT_EQ(out[i], b[i]) << i;
}

TEST_P(KernelsTest, GeluMatchesReference) {
  for (int64_t n : {1, 7, 8, 64, 1536, 2051}) {
    auto x = RandomVector(n, rng_, 6.0f);
    std::vector<float> got(n), want(n);
    kernels::Gelu(x.data(), n, got.data());
    reference::Gelu(x.data(), n, want.data());
    ExpectClose(got, want, 2e-6f, 1e-5f, "gelu n=" + std::to_string(n));
  }
  // The edges: 0, tiny, saturated (x and 0), in place.
  std::vector<float> x = {0.0f, 1e-8f, -1e-8f, 3.0f, -3.0f, 10.0f, -10.0f, 30.0f, -30.0f, 1e4f, -1e4f};
  std::vector<float> want(x.size());
  reference::Gelu(x.data(), static_cast<int64_t>(x.size()), want.data());
  kernels::Gelu(x.data(), static_cast<int64_t>(x.size()), x.data());
  ExpectClose(x, want, 2e-6f, 1e-5f, "gelu edges");
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[7], 30.0f);
  EXPECT_EQ(x[8], 0.0f);
}

TEST_P(KernelsTest, RopeMatchesReferenceBothLayoutsAndPartialRotary) {
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int64_t head_dim : {8, 64, 128}) {
      for (int64_t rotary_dim : {head_dim, head_dim / 2}) {
        RopeOptions opt;
        opt.head_dim = head_dim;
        opt.rotary_dim = rotary_dim;
        opt.theta = 10000.0f;
        auto inv = RopeInvFreqs(opt);
        ASSERT_EQ(static_cast<int64_t>(inv.size()), rotary_dim / 2);
        for (int64_t pos : {0, 1, 17, 4095}) {
          auto x = RandomVector(3 * head_dim, rng_);
          auto want = x;
          kernels::Rope(x.data(), 3, head_dim, pos, inv, layout);
          reference::Rope(want.data(), 3, head_dim, pos, inv, layout);
          ExpectClose(x, want, 1e-5f, 1e-5f, "rope pos=" + std::to_string(pos));
        }
      }
    }
  }
}

// The forward pass computes each row's angles once (RopeCosSin) for all layers; that must not
// change a single bit against Rope computing them itself, at every SIMD level.
TEST_P(KernelsTest, RopeWithPrecomputedAnglesIsBitIdentical) {
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int64_t head_dim : {8, 64, 128}) {
      RopeOptions opt;
      opt.head_dim = head_dim;
      opt.rotary_dim = head_dim;
      opt.theta = 500000.0f;
      auto inv = RopeInvFreqs(opt);
      for (int64_t pos : {0, 3, 1000, 131071}) {
        const auto x = RandomVector(5 * head_dim, rng_);
        auto plain = x;
        auto tabled = x;
        std::vector<float> cos_sin(inv.size() * 2);
        kernels::RopeCosSin(pos, inv, cos_sin.data());
        kernels::Rope(plain.data(), 5, head_dim, pos, inv, layout);
        kernels::Rope(tabled.data(), 5, head_dim, pos, inv, cos_sin.data(), layout);
        ASSERT_EQ(plain, tabled) << "pos=" << pos << " head_dim=" << head_dim;
        if (pos != 0) {  // position 0 is the identity
          EXPECT_NE(plain, x) << "pos=" << pos;
        }
      }
    }
  }
}

TEST_P(KernelsTest, RopePositionZeroIsIdentityAndNeoxPairsHalves) {
  RopeOptions opt;
  opt.head_dim = 4;
  auto inv = RopeInvFreqs(opt);  // {1, 0.01}
  std::vector<float> x = {1, 2, 3, 4};
  kernels::Rope(x.data(), 1, 4, 0, inv, RopeLayout::kNeox);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  // Neox pairs (x0, x2) with inv_freq 1: position 1 rotates by 1 radian.
  kernels::Rope(x.data(), 1, 4, 1, inv, RopeLayout::kNeox);
  EXPECT_NEAR(x[0], std::cos(1.0) * 1 - std::sin(1.0) * 3, 1e-6);
  EXPECT_NEAR(x[2], std::sin(1.0) * 1 + std::cos(1.0) * 3, 1e-6);
}

TEST(SimdLevelSelectionTest, NamesParseBackAndTheLevelInUseIsNeverAboveTheCpus) {
  using kernels::internal::ParseSimdLevel;
  using kernels::internal::SimdLevel;
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vnni}) {
    EXPECT_EQ(ParseSimdLevel(kernels::internal::SimdLevelName(level)), level);
  }
  EXPECT_EQ(ParseSimdLevel("avx512vnni"), SimdLevel::kAvx512Vnni);
  EXPECT_FALSE(ParseSimdLevel("AVX2").has_value());
  EXPECT_FALSE(ParseSimdLevel("sse4").has_value());
  EXPECT_FALSE(ParseSimdLevel("").has_value());
  EXPECT_LE(static_cast<int>(kernels::internal::CurrentSimdLevel()),
            static_cast<int>(kernels::internal::DetectedSimdLevel()));
  EXPECT_EQ(std::string(kernels::CpuSimdLevelName()),
            kernels::internal::SimdLevelName(kernels::internal::DetectedSimdLevel()));
}

TEST(RopeInvFreqsTest, PlainAndLinear) {
  RopeOptions opt;
  opt.head_dim = 8;
  opt.theta = 10000.0f;
  auto inv = RopeInvFreqs(opt);
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(inv[i], std::pow(10000.0, -2.0 * i / 8));
  opt.scaling = RopeScalingType::kLinear;
  opt.scaling_factor = 4.0f;
  auto lin = RopeInvFreqs(opt);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(lin[i], inv[i] / 4.0f);
}

TEST(RopeInvFreqsTest, Llama3ScalingMatchesHfFormula) {
  // Llama 3.2 1B: theta 500000, head_dim 64, factor 32, low 1, high 4, original 8192.
  // Expected values computed independently with HF's _compute_llama3_parameters formula.
  RopeOptions opt;
  opt.head_dim = 64;
  opt.theta = 500000.0f;
  opt.scaling = RopeScalingType::kLlama3;
  opt.scaling_factor = 32.0f;
  opt.llama3_low_freq_factor = 1.0f;
  opt.llama3_high_freq_factor = 4.0f;
  opt.llama3_original_max_positions = 8192;
  auto inv = RopeInvFreqs(opt);
  ASSERT_EQ(inv.size(), 32u);
  const std::pair<int, double> expected[] = {
      {0, 1.0},  // high frequency: unchanged
      {10, 0.016560440080994446},
      {15, 0.001290547928209264},  // medium: smoothed
      {16, 0.00042955679655936815},
      {17, 9.70828780262767e-05},  // low frequency: divided by 32
      {20, 8.570255489881478e-06},
      {31, 9.418306725434909e-08},
  };
  for (auto [i, want] : expected) EXPECT_NEAR(inv[i], want, want * 1e-5) << "i=" << i;
}

TEST_P(KernelsTest, SwiGluMatchesReference) {
  for (int64_t n : {1, 5, 8, 1536, 1539}) {
    auto g = RandomVector(n, rng_, 4.0f);
    auto u = RandomVector(n, rng_);
    if (n > 3) g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f;
    std::vector<float> got(n), want(n);
    kernels::SwiGlu(g.data(), u.data(), n, got.data());
    reference::SwiGlu(g.data(), u.data(), n, want.data());
    ExpectClose(got, want, 2e-6f, 1e-30f, "swiglu");
    kernels::SwiGlu(g.data(), u.data(), n, g.data());  // aliasing out == gate
    ExpectClose(g, want, 2e-6f, 1e-30f, "swiglu aliased");
  }
}

TEST_P(KernelsTest, SoftmaxMatchesReference) {
  for (int64_t n : {1, 3, 8, 9, 1000, 49152}) {
    auto x = RandomVector(n, rng_, 5.0f);
    if (n > 4) {
      x[1] = -std::numeric_limits<float>::infinity();
      x[2] = 80.0f;
      x[3] = -80.0f;
    }
    auto want = x;
    kernels::Softmax(x.data(), n);
    reference::Softmax(want.data(), n);
    ExpectClose(x, want, 1e-5f, 1e-12f, "softmax n=" + std::to_string(n));
    if (n > 4) {
      EXPECT_EQ(x[1], 0.0f);
    }
  }
}

TEST_P(KernelsTest, DotMatchesADoubleReference) {
  for (int64_t n : {0, 1, 7, 8, 17, 384, 1000}) {
    auto a = RandomVector(n, rng_), b = RandomVector(n, rng_);
    double want = 0.0, magnitude = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      want += static_cast<double>(a[i]) * b[i];
      magnitude += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(kernels::Dot(a.data(), b.data(), n), want, 1e-6 * (magnitude + 1.0)) << "n=" << n;
  }
}

TEST(VectorMathTest, ExpApproximationAgainstStdExp) {
  if (kernels::internal::DetectedSimdLevel() == SimdLevel::kScalar) GTEST_SKIP() << "no AVX2";
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  x.push_back(0.0f);
  std::vector<float> got(x.size());
  kernels::internal::simd::Exp(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(got[i], want, want * 3e-7) << "x=" << x[i];
  }
  float special[8] = {-std::numeric_limits<float>::infinity(), -100.0f, -1000.0f, 0, 0, 0, 0, 0};
  float out[8];
  kernels::internal::simd::Exp(special, 8, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 1.0f);
}

TEST_P(KernelsTest, DenseAttentionMatchesReference) {
  struct Case {
    int64_t num_queries, num_keys, first_pos, num_heads, num_kv_heads, head_dim;
  };
  ThreadPool pool(3);
  for (const Case& c : {Case{1, 1, 0, 2, 1, 8}, Case{1, 37, 36, 9, 3, 64},
                        Case{5, 5, 0, 4, 4, 17}, Case{4, 20, 16, 8, 2, 32},
                        Case{3, 10, 2, 6, 2, 64}, Case{2, 30, 28, 4, 2, 128},
                        Case{2, 9, 7, 2, 1, 100}, Case{1, 13, 12, 3, 1, 72}}) {
    kernels::AttentionShape s{c.num_queries, c.num_keys, c.first_pos, c.num_heads,
                              c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    auto q = RandomVector(c.num_queries * c.num_heads * c.head_dim, rng_);
    auto k = RandomVector(c.num_keys * c.num_kv_heads * c.head_dim, rng_);
    auto v = RandomVector(c.num_keys * c.num_kv_heads * c.head_dim, rng_);
    std::vector<float> want(q.size()), got(q.size());
    reference::DenseAttention(q.data(), k.data(), v.data(), s, want.data(), nullptr);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      kernels::DenseAttention(q.data(), k.data(), v.data(), s, got.data(), p);
      ExpectClose(got, want, 1e-4f, 1e-5f, "attention");
    }
  }
}

TEST(ReferenceAttentionTest, SingleKeyReturnsItsValue) {
  kernels::AttentionShape s{1, 1, 0, 2, 1, 2, 1.0f};
  std::vector<float> q = {1, 2, 3, 4}, k = {5, 6}, v = {7, 8}, out(4);
  reference::DenseAttention(q.data(), k.data(), v.data(), s, out.data(), nullptr);
  EXPECT_EQ(out, (std::vector<float>{7, 8, 7, 8}));
}

TEST_P(KernelsTest, EmbeddingLookupMatchesDequantizedRow) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const int64_t vocab = 7, dim = 64;
    auto table_values = RandomVector(vocab * dim, rng_);
    Tensor table = Tensor::Allocate(dtype, {vocab, dim});
    for (int64_t r = 0; r < vocab; ++r) {
      QuantizeRow(dtype, table_values.data() + r * dim,
                  static_cast<char*>(table.mutable_data()) + r * table.row_bytes(), dim);
    }
    std::vector<float> got(dim), want(dim);
    kernels::EmbeddingLookup(table, 5, got.data());
    DequantizeRow(dtype, table.row(5), want.data(), dim);
    EXPECT_EQ(got, want);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(got[i], table_values[5 * dim + i], dtype == DType::kF32 ? 0.0f : 0.05f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, KernelsTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

}  // namespace
}  // namespace kvserve
