#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_test_util.h"
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/reference/reference.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

using kernels::PagedAttentionShape;
using kernels::PagedKv;
using kernels::PagedSeq;
using kernels::internal::SimdLevel;
using namespace paged_attention_test;  // NOLINT(build/namespaces): the shared test helpers

// Dense attention on the original float K/V (what quantization approximates).
std::vector<float> RunDenseOnOriginal(const Batch& b) {
  std::vector<float> out = b.NewOutput();
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    kernels::AttentionShape dense;
    dense.num_queries = b.seqs[s].num_queries;
    dense.num_keys = b.seqs[s].num_keys;
    dense.first_pos = dense.num_keys - dense.num_queries;
    dense.num_heads = b.geo.num_heads;
    dense.num_kv_heads = b.geo.num_kv_heads;
    dense.head_dim = b.geo.head_dim;
    dense.scale = b.shape.scale;
    const int64_t off = b.seqs[s].query_offset * b.row_floats();
    reference::DenseAttention(b.q.data() + off, b.k[s].data(), b.v[s].data(), dense,
                              out.data() + off, nullptr);
  }
  return out;
}

TEST(PagedAttentionReferenceTest, GatherReturnsTheStoredValues) {
  std::mt19937 rng(5);
  for (DType dtype : kAllDtypes) {
    Geometry geo;
    geo.dtype = dtype;
    geo.block_size = 8;
    geo.head_dim = 24;
    Batch b = MakeBatch(geo, {{37, 1}, {9, 9}}, rng);
    const PagedKv kv = b.pool->view();
    const int64_t hd = geo.head_dim, kvh = geo.num_kv_heads;
    for (size_t s = 0; s < b.seqs.size(); ++s) {
      std::vector<float> k(b.k[s].size()), v(b.v[s].size());
      reference::GatherPagedKv(kv, b.seqs[s], k.data(), v.data());
      // Each value is within half a step of the format of the original.
      for (const auto& [got, want, head_scales] :
           {std::tuple(&k, &b.k[s], kv.k_head_scales), std::tuple(&v, &b.v[s], kv.v_head_scales)}) {
        for (size_t row = 0; row < got->size() / hd; ++row) {
          const float* g = got->data() + row * hd;
          const float* w = want->data() + row * hd;
          const int64_t h = static_cast<int64_t>(row) % kvh;
          float absmax = 0.0f;
          for (int64_t d = 0; d < hd; ++d) absmax = std::max(absmax, std::fabs(w[d]));
          for (int64_t d = 0; d < hd; ++d) {
            double bound = 0.0;  // f32: exact
            switch (dtype) {
              case DType::kF16: bound = std::ldexp(std::fabs(w[d]), -11); break;
              case DType::kBF16: bound = std::ldexp(std::fabs(w[d]), -8); break;
              // Normals: 3 (2) mantissa bits; subnormals: a fixed step of 2^-9 (2^-16) scales.
              case DType::kFp8E4M3:
                bound = std::max(std::ldexp(std::fabs(static_cast<double>(w[d])), -4),
                                 std::ldexp(static_cast<double>(head_scales[h]), -10));
                break;
              case DType::kFp8E5M2:
                bound = std::max(std::ldexp(std::fabs(static_cast<double>(w[d])), -3),
                                 std::ldexp(static_cast<double>(head_scales[h]), -17));
                break;
              case DType::kI8: bound = absmax / 254.0; break;
              default: break;
            }
            ASSERT_NEAR(g[d], w[d], bound * (1 + 1e-5)) << DTypeName(dtype) << " row " << row;
          }
        }
      }
    }
    if (dtype == DType::kF32) {
      // The oracle on f32 pages is exactly dense attention on the original rows.
      std::vector<float> paged = RunReference(b), dense = RunDenseOnOriginal(b);
      EXPECT_EQ(paged, dense);
    }
  }
}

class PagedAttentionTest : public SimdLevelTest {
 protected:
  std::mt19937 rng_{1234};
};

TEST_P(PagedAttentionTest, BlockSizesAndRandomPlacement) {
  ErrorLog log("block sizes");
  for (DType dtype : kAllDtypes) {
    for (int64_t block_size : {1, 8, 16, 32, 256}) {
      Geometry geo;
      geo.dtype = dtype;
      geo.block_size = block_size;
      // A full prompt, a chunk over cached context, decodes across a partition boundary.
      Batch b = MakeBatch(geo, {{70, 70}, {300, 37}, {1, 1}, {257, 1}, {513, 1}}, rng_);
      ExpectMatchesReference(b, nullptr, "block sizes", log);
    }
  }
}

TEST_P(PagedAttentionTest, GroupSizesHeadDimsAndDtypes) {
  ErrorLog log("group sizes / head dims");
  for (DType dtype : kAllDtypes) {
    for (int64_t group : {1, 2, 4, 8}) {
      for (int64_t head_dim : {40, 64, 128, 36}) {
        Geometry geo;
        geo.dtype = dtype;
        geo.num_kv_heads = 2;
        geo.num_heads = 2 * group;
        geo.head_dim = head_dim;
        Batch b = MakeBatch(geo, {{150, 40}, {290, 1}}, rng_);
        ExpectMatchesReference(b, nullptr, "group/head_dim", log);
      }
    }
  }
}

TEST_P(PagedAttentionTest, DecodeBatchWithLongSequenceWithAndWithoutPool) {
  ErrorLog log("decode batch");
  ThreadPool pool(3);
  for (DType dtype : kAllDtypes) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 8;
    geo.num_kv_heads = 2;
    Batch b = MakeBatch(geo, {{1, 1}, {7, 1}, {256, 1}, {257, 1}, {1000, 1}, {3000, 1}}, rng_);
    const std::vector<float> want = RunReference(b);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> got = b.NewOutput();
      kernels::PagedDecodeAttention(b.q.data(), b.pool->view(), b.seqs.data(),
                                    static_cast<int64_t>(b.seqs.size()), b.shape, got.data(), p);
      const Error e = Compare(got, want);
      EXPECT_LE(e.relative(), kSameDataTolerance)
          << Describe(geo) << (p ? " pool" : " no pool") << ": " << e.max_abs << " of "
          << e.want_max;
      log.Record(dtype, e);
    }
  }
}

// One short sequence leaves too few (sequence, partition) items for the pool: KV heads are then
// split over items.
TEST_P(PagedAttentionTest, FewItemsSplitKvHeadsOverThreads) {
  ThreadPool pool(3);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 8;
    geo.num_kv_heads = 4;
    for (const SeqSpec& spec : {SeqSpec{200, 1}, SeqSpec{700, 1}, SeqSpec{90, 7}}) {
      Batch b = MakeBatch(geo, {spec}, rng_);
      const Error e = Compare(RunKernel(b, &pool), RunReference(b));
      EXPECT_LE(e.relative(), kSameDataTolerance) << Describe(geo) << " keys " << spec.num_keys;
      EXPECT_EQ(RunKernel(b, &pool), RunKernel(b, nullptr)) << Describe(geo);
    }
  }
}

TEST_P(PagedAttentionTest, PrefillWithPoolMatchesReference) {
  ErrorLog log("prefill 600 with pool");
  ThreadPool pool(2);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kFp8E4M3, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 6;
    geo.num_kv_heads = 2;
    Batch b = MakeBatch(geo, {{600, 600}}, rng_);
    std::vector<float> got = b.NewOutput();
    kernels::PagedPrefillAttention(b.q.data(), b.pool->view(), b.seqs[0], b.shape, got.data(),
                                   &pool);
    const Error e = Compare(got, RunReference(b));
    EXPECT_LE(e.relative(), kSameDataTolerance) << Describe(geo) << ": " << e.max_abs;
    log.Record(dtype, e);
  }
}

// Outputs are bit-identical with or without a pool, alone or batched, and whether a position
// is computed in a prefill (any chunking) or as a decode step: partitions are fixed.
TEST_P(PagedAttentionTest, ResultsIndependentOfThreadsBatchAndChunking) {
  ThreadPool pool(2);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kFp8E5M2, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 6;
    geo.num_kv_heads = 3;
    Batch b = MakeBatch(geo, {{700, 700}, {530, 1}, {40, 12}}, rng_);
    const std::vector<float> batched = RunKernel(b, nullptr);
    EXPECT_EQ(RunKernel(b, &pool), batched) << Describe(geo);

    const int64_t rf = b.row_floats();
    const PagedKv kv = b.pool->view();
    // Alone: the decode sequence by itself.
    std::vector<float> alone(rf);
    PagedSeq seq1 = b.seqs[1];
    const int64_t off1 = seq1.query_offset;
    seq1.query_offset = 0;
    kernels::PagedDecodeAttention(b.q.data() + off1 * rf, kv, &seq1, 1, b.shape, alone.data(),
                                  &pool);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + off1 * rf))
        << Describe(geo);

    // Positions of the 700-token prompt as decode steps and as a chunk of a chunked prefill.
    const PagedSeq& full = b.seqs[0];
    const float* q0 = b.q.data() + full.query_offset * rf;
    const float* out0 = batched.data() + full.query_offset * rf;
    for (int64_t pos : {0, 1, 31, 32, 255, 256, 257, 511, 600, 699}) {
      PagedSeq step = full;
      step.num_keys = pos + 1;
      step.num_queries = 1;
      step.query_offset = 0;
      std::vector<float> got(rf);
      kernels::PagedDecodeAttention(q0 + pos * rf, kv, &step, 1, b.shape, got.data(), nullptr);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), out0 + pos * rf))
          << Describe(geo) << " decode at " << pos;
    }
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 100}, {100, 357}, {357, 700}}) {
      PagedSeq chunk = full;
      chunk.num_keys = end;
      chunk.num_queries = end - begin;
      chunk.query_offset = 0;
      std::vector<float> got((end - begin) * rf);
      kernels::PagedPrefillAttention(q0 + begin * rf, kv, chunk, b.shape, got.data(), &pool);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), out0 + begin * rf))
          << Describe(geo) << " chunk " << begin << ".." << end;
    }
  }
}

TEST_P(PagedAttentionTest, LargeScoresStayFinite) {
  ErrorLog log("large scores");
  for (DType dtype : {DType::kF32, DType::kFp8E4M3, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.q_stddev = 60.0f;  // scores in the hundreds: softmax is nearly one-hot
    Batch b = MakeBatch(geo, {{333, 33}, {900, 1}}, rng_);
    const Error e = Compare(RunKernel(b, nullptr), RunReference(b));
    // exp of large differences amplifies the float rounding of the scores themselves.
    EXPECT_LE(e.relative(), 1e-3) << Describe(geo) << ": " << e.max_abs;
    log.Record(dtype, e);
  }
}

// Quantized storage against dense attention on the original f32 K/V: bounds on the error the
// format itself causes. Measured (this data: K channels of 1x..5x magnitude, scores of
// standard deviation ~1.7, head dims 64 and 128, 8 seeds, all SIMD levels), worst case:
//   dtype      ||err|| / ||out||   max |err| / max |out|
//   f32        7.7e-7              1.1e-6   (float rounding; scalar level)
//   f16        4.5e-4              1.1e-3
//   bf16       3.6e-3              9.9e-3
//   fp8_e4m3   5.7e-2              1.2e-1
//   fp8_e5m2   1.1e-1              2.0e-1
//   int8       1.5e-2              2.2e-2
// The bounds leave about 1.5x of margin on the relative RMS and 2x on the maximum.
TEST_P(PagedAttentionTest, QuantizedKvCloseToF32) {
  struct Bound {
    DType dtype;
    double rms;
    double max;
  };
  const Bound bounds[] = {
      {DType::kF32, 3e-6, 5e-6},     {DType::kF16, 7e-4, 2e-3},
      {DType::kBF16, 6e-3, 2e-2},    {DType::kFp8E4M3, 9e-2, 0.25},
      {DType::kFp8E5M2, 0.17, 0.4},  {DType::kI8, 2.5e-2, 5e-2},
  };
  ThreadPool pool(2);
  for (const Bound& bound : bounds) {
    for (int64_t head_dim : {64, 128}) {
      Geometry geo;
      geo.dtype = bound.dtype;
      geo.num_heads = 8;
      geo.num_kv_heads = 2;
      geo.head_dim = head_dim;
      Batch b = MakeBatch(geo, {{1500, 1}, {400, 64}, {90, 1}}, rng_);
      const Error e = Compare(RunKernel(b, &pool), RunDenseOnOriginal(b));
      EXPECT_LE(e.relative_rms(), bound.rms) << Describe(geo);
      EXPECT_LE(e.relative(), bound.max) << Describe(geo);
      std::printf("quantized %s hd%lld vs f32: rms %.2g, max %.3g of %.3g = %.2g\n",
                  DTypeName(bound.dtype), static_cast<long long>(head_dim), e.relative_rms(),
                  e.max_abs, e.want_max, e.relative());
    }
  }
}

// key_begin inside a partition (chunk-aligned or not), exactly at a partition boundary, at
// the first query's position, and with whole partitions skipped; decode items whose one
// partition starts at key_begin. Keys below key_begin are poisoned (SetKeyBegin).
TEST_P(PagedAttentionTest, KeyBeginMatchesReference) {
  ErrorLog log("key_begin");
  ThreadPool pool(3);
  struct Case {
    SeqSpec spec;
    int64_t key_begin;
  };
  const Case cases[] = {
      {{900, 300}, 300},  // inside partition 1: partition 0 skipped
      {{700, 100}, 512},  // at a partition boundary: partitions 0 and 1 skipped
      {{600, 40}, 37},    // inside partition 0, not chunk-aligned
      {{520, 20}, 500},   // the first query's position: it sees one key
      {{1000, 1}, 999},   // decode seeing one key
      {{300, 1}, 256},    // decode: one partition, starting at key_begin
      {{257, 1}, 5},      {{3000, 1}, 1234}, {{64, 1}, 0}, {{90, 7}, 83},
  };
  std::vector<SeqSpec> specs;
  for (const Case& c : cases) specs.push_back(c.spec);
  for (DType dtype : kAllDtypes) {
    for (auto [group, block_size] :
         {std::pair<int64_t, int64_t>{1, 16}, {2, 1}, {4, 32}, {2, 16}}) {
      Geometry geo;
      geo.dtype = dtype;
      geo.num_kv_heads = 2;
      geo.num_heads = 2 * group;
      geo.block_size = block_size;
      geo.head_dim = block_size == 1 ? 128 : 64;
      Batch b = MakeBatch(geo, specs, rng_);
      for (size_t s = 0; s < specs.size(); ++s) SetKeyBegin(b, s, cases[s].key_begin);
      const std::vector<float> want = RunReference(b);
      const std::vector<float> alone = RunKernel(b, nullptr);
      const Error e = Compare(alone, want);
      EXPECT_LE(e.relative(), kSameDataTolerance)
          << Describe(geo) << ": max error " << e.max_abs << " of " << e.want_max;
      log.Record(dtype, e);
      EXPECT_EQ(RunKernel(b, &pool), alone) << Describe(geo);
    }
  }
}

// With key_begin, a position's result is still the same bit for bit as a decode step or as a
// row of any chunk, with or without a pool.
TEST_P(PagedAttentionTest, KeyBeginResultsIndependentOfChunking) {
  ThreadPool pool(2);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kFp8E4M3, DType::kI8}) {
    Geometry geo;
    geo.dtype = dtype;
    geo.num_heads = 6;
    geo.num_kv_heads = 3;
    Batch b = MakeBatch(geo, {{700, 500}}, rng_);
    SetKeyBegin(b, 0, 150);
    const std::vector<float> full = RunKernel(b, &pool);
    EXPECT_LE(Compare(full, RunReference(b)).relative(), kSameDataTolerance) << Describe(geo);
    const int64_t rf = b.row_floats();
    const PagedKv kv = b.pool->view();
    const int64_t first_pos = 200;
    for (int64_t pos : {200, 201, 255, 256, 300, 511, 512, 699}) {
      PagedSeq step = b.seqs[0];
      step.num_keys = pos + 1;
      step.num_queries = 1;
      std::vector<float> got(rf);
      kernels::PagedDecodeAttention(b.q.data() + (pos - first_pos) * rf, kv, &step, 1, b.shape,
                                    got.data(), nullptr);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin() + (pos - first_pos) * rf))
          << Describe(geo) << " decode at " << pos;
    }
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{200, 260}, {260, 513}, {513, 700}}) {
      PagedSeq chunk = b.seqs[0];
      chunk.num_keys = end;
      chunk.num_queries = end - begin;
      std::vector<float> got((end - begin) * rf);
      kernels::PagedPrefillAttention(b.q.data() + (begin - first_pos) * rf, kv, chunk, b.shape,
                                     got.data(), &pool);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin() + (begin - first_pos) * rf))
          << Describe(geo) << " chunk " << begin << ".." << end;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, PagedAttentionTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

}  // namespace
}  // namespace kvserve
