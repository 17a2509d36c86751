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
#include "kernels/cpu/simd_level_test_util.h"
#include "kernels/reference/reference.h"
#include "tensor/dtype.h"

namespace kvserve {
namespace {

using kernels::PagedAttentionShape;
using kernels::PagedKv;
using kernels::PagedSeq;
using kernels::internal::SimdLevel;

const DType kAllDtypes[] = {DType::kF32,     DType::kF16,     DType::kBF16,
                            DType::kFp8E4M3, DType::kFp8E5M2, DType::kI8};

// A pool of KV blocks [num_blocks, block_size, num_kv_heads, head_dim] filled by quantizing
// float rows the way the KV storage is expected to: f16/bf16 round to nearest even; fp8 with
// one scale per KV head (absmax over everything written / the format's max, set up front);
// int8 with one scale per slot and head (absmax / 127), values rounded to nearest.
class TestKvPool {
 public:
  TestKvPool(DType dtype, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
             int64_t head_dim)
      : dtype_(dtype),
        block_size_(block_size),
        num_kv_heads_(num_kv_heads),
        head_dim_(head_dim),
        k_(num_blocks * block_size * num_kv_heads * head_dim * DTypeBlockBytes(dtype)),
        v_(k_.size()),
        k_head_scales_(num_kv_heads, 1.0f),
        v_head_scales_(num_kv_heads, 1.0f),
        k_token_scales_(num_blocks * block_size * num_kv_heads, 0.0f),
        v_token_scales_(k_token_scales_.size(), 0.0f) {}

  // fp8 only: per-head absmax of everything that will be written ([num_kv_heads] each).
  void SetHeadAbsMax(const std::vector<float>& k_absmax, const std::vector<float>& v_absmax) {
    const float fmt_max = dtype_ == DType::kFp8E4M3 ? kFp8E4M3Max : kFp8E5M2Max;
    for (int64_t h = 0; h < num_kv_heads_; ++h) {
      k_head_scales_[h] = k_absmax[h] > 0 ? k_absmax[h] / fmt_max : 1.0f;
      v_head_scales_[h] = v_absmax[h] > 0 ? v_absmax[h] / fmt_max : 1.0f;
    }
  }

  // k, v: [num_kv_heads, head_dim] floats of one token, stored at `slot`.
  void Write(int64_t slot, const float* k, const float* v) {
    WriteOne(slot, k, k_.data(), k_head_scales_.data(), k_token_scales_.data());
    WriteOne(slot, v, v_.data(), v_head_scales_.data(), v_token_scales_.data());
  }

  PagedKv view() const {
    PagedKv kv;
    kv.dtype = dtype_;
    kv.block_size = block_size_;
    kv.num_kv_heads = num_kv_heads_;
    kv.head_dim = head_dim_;
    kv.k = k_.data();
    kv.v = v_.data();
    if (dtype_ == DType::kFp8E4M3 || dtype_ == DType::kFp8E5M2) {
      kv.k_head_scales = k_head_scales_.data();
      kv.v_head_scales = v_head_scales_.data();
    }
    if (dtype_ == DType::kI8) {
      kv.k_token_scales = k_token_scales_.data();
      kv.v_token_scales = v_token_scales_.data();
    }
    return kv;
  }

 private:
  void WriteOne(int64_t slot, const float* src, uint8_t* base, const float* head_scales,
                float* token_scales) {
    const int64_t n = num_kv_heads_ * head_dim_;
    uint8_t* dst = base + slot * n * DTypeBlockBytes(dtype_);
    switch (dtype_) {
      case DType::kF32: case DType::kF16: case DType::kBF16:
        QuantizeRow(dtype_, src, dst, n);
        return;
      case DType::kFp8E4M3: case DType::kFp8E5M2:
        for (int64_t h = 0; h < num_kv_heads_; ++h) {
          for (int64_t d = 0; d < head_dim_; ++d) {
            const float x = src[h * head_dim_ + d] / head_scales[h];
            dst[h * head_dim_ + d] =
                dtype_ == DType::kFp8E4M3 ? Fp32ToFp8E4M3(x) : Fp32ToFp8E5M2(x);
          }
        }
        return;
      case DType::kI8:
        for (int64_t h = 0; h < num_kv_heads_; ++h) {
          float absmax = 0.0f;
          for (int64_t d = 0; d < head_dim_; ++d) {
            absmax = std::max(absmax, std::fabs(src[h * head_dim_ + d]));
          }
          const float scale = absmax / 127.0f;
          token_scales[slot * num_kv_heads_ + h] = scale;
          for (int64_t d = 0; d < head_dim_; ++d) {
            const float q = scale > 0 ? std::nearbyint(src[h * head_dim_ + d] / scale) : 0.0f;
            dst[h * head_dim_ + d] = static_cast<uint8_t>(
                static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
          }
        }
        return;
      default:
        FAIL() << "dtype " << DTypeName(dtype_);
    }
  }

  DType dtype_;
  int64_t block_size_, num_kv_heads_, head_dim_;
  std::vector<uint8_t> k_, v_;
  std::vector<float> k_head_scales_, v_head_scales_, k_token_scales_, v_token_scales_;
};

struct SeqSpec {
  int64_t num_keys;
  int64_t num_queries;
};

struct Geometry {
  DType dtype = DType::kF32;
  int64_t block_size = 16;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 64;
  float q_stddev = 1.5f;  // scores have about this standard deviation
};

std::string Describe(const Geometry& g) {
  return std::string(DTypeName(g.dtype)) + " bs=" + std::to_string(g.block_size) +
         " heads=" + std::to_string(g.num_heads) + "/" + std::to_string(g.num_kv_heads) +
         " hd=" + std::to_string(g.head_dim);
}

// A batch of sequences in paged storage: original float K/V per sequence, blocks placed at
// shuffled ids of a pool twice the needed size, query rows of the sequences in shuffled order.
struct Batch {
  Geometry geo;
  std::vector<float> q;                          // [total_rows, num_heads, head_dim]
  std::vector<std::vector<float>> k, v;          // per sequence [num_keys, num_kv_heads, hd]
  std::vector<std::vector<int32_t>> block_tables;
  std::vector<PagedSeq> seqs;
  std::unique_ptr<TestKvPool> pool;
  PagedAttentionShape shape;
  int64_t total_rows = 0;

  int64_t row_floats() const { return geo.num_heads * geo.head_dim; }
  std::vector<float> NewOutput() const {
    return std::vector<float>(total_rows * row_floats(), NAN);
  }
};

Batch MakeBatch(const Geometry& geo, const std::vector<SeqSpec>& specs, std::mt19937& rng) {
  Batch b;
  b.geo = geo;
  const int64_t hd = geo.head_dim, kvh = geo.num_kv_heads;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t needed_blocks = 0;
  for (const SeqSpec& s : specs) {
    needed_blocks += (s.num_keys + geo.block_size - 1) / geo.block_size;
  }
  const int64_t num_blocks = 2 * needed_blocks + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int64_t> order(specs.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);

  b.pool = std::make_unique<TestKvPool>(geo.dtype, num_blocks, geo.block_size, kvh, hd);
  b.seqs.resize(specs.size());
  b.k.resize(specs.size());
  b.v.resize(specs.size());
  b.block_tables.resize(specs.size());
  int64_t next_id = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const int64_t nb = (specs[s].num_keys + geo.block_size - 1) / geo.block_size;
    b.block_tables[s].assign(ids.begin() + next_id, ids.begin() + next_id + nb);
    next_id += nb;
    b.k[s].resize(specs[s].num_keys * kvh * hd);
    b.v[s].resize(b.k[s].size());
    // Channels of K get different magnitudes (as real keys do), V is plain normal.
    for (int64_t t = 0; t < specs[s].num_keys; ++t) {
      for (int64_t c = 0; c < kvh * hd; ++c) {
        b.k[s][t * kvh * hd + c] = normal(rng) * (1.0f + static_cast<float>(c % 5));
        b.v[s][t * kvh * hd + c] = normal(rng);
      }
    }
  }
  if (geo.dtype == DType::kFp8E4M3 || geo.dtype == DType::kFp8E5M2) {
    std::vector<float> k_absmax(kvh, 0.0f), v_absmax(kvh, 0.0f);
    for (size_t s = 0; s < specs.size(); ++s) {
      for (size_t i = 0; i < b.k[s].size(); ++i) {
        const int64_t h = static_cast<int64_t>(i) / hd % kvh;
        k_absmax[h] = std::max(k_absmax[h], std::fabs(b.k[s][i]));
        v_absmax[h] = std::max(v_absmax[h], std::fabs(b.v[s][i]));
      }
    }
    b.pool->SetHeadAbsMax(k_absmax, v_absmax);
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    for (int64_t t = 0; t < specs[s].num_keys; ++t) {
      const int64_t slot =
          b.block_tables[s][t / geo.block_size] * geo.block_size + t % geo.block_size;
      b.pool->Write(slot, b.k[s].data() + t * kvh * hd, b.v[s].data() + t * kvh * hd);
    }
  }
  int64_t offset = 0;
  for (int64_t s : order) {
    PagedSeq& seq = b.seqs[s];
    seq.block_table = b.block_tables[s].data();
    seq.num_keys = specs[s].num_keys;
    seq.num_queries = specs[s].num_queries;
    seq.query_offset = offset;
    offset += specs[s].num_queries;
  }
  b.total_rows = offset;
  b.q.resize(b.total_rows * b.row_floats());
  for (auto& x : b.q) x = normal(rng) * geo.q_stddev;
  // K channels have standard deviations 1..5 (rms 3.3), so scores q.k * scale have a standard
  // deviation of about 1.1 q_stddev.
  b.shape.num_heads = geo.num_heads;
  b.shape.scale = 1.0f / (3.0f * std::sqrt(static_cast<float>(hd)));
  return b;
}

// Largest |got - want| over the largest |want| of the same tensor, and the relative RMS.
struct Error {
  double max_abs = 0.0;
  double want_max = 0.0;
  double sum_sq_err = 0.0, sum_sq_want = 0.0;
  double relative() const { return want_max > 0 ? max_abs / want_max : max_abs; }
  // ||got - want||_2 / ||want||_2
  double relative_rms() const {
    return sum_sq_want > 0 ? std::sqrt(sum_sq_err / sum_sq_want) : 0.0;
  }
};

Error Compare(const std::vector<float>& got, const std::vector<float>& want) {
  Error e;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      e.max_abs = INFINITY;
      continue;
    }
    const double diff = static_cast<double>(got[i]) - want[i];
    e.max_abs = std::max(e.max_abs, std::fabs(diff));
    e.sum_sq_err += diff * diff;
    e.sum_sq_want += static_cast<double>(want[i]) * want[i];
    e.want_max = std::max(e.want_max, static_cast<double>(std::fabs(want[i])));
  }
  return e;
}

// Float rounding only: the kernels and the oracle read the same quantized values.
constexpr double kSameDataTolerance = 1e-5;

std::vector<float> RunKernel(const Batch& b, ThreadPool* pool) {
  std::vector<float> out = b.NewOutput();
  PagedKv kv = b.pool->view();
  kernels::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(b.seqs.size()),
                          b.shape, out.data(), pool);
  return out;
}

std::vector<float> RunReference(const Batch& b) {
  std::vector<float> out = b.NewOutput();
  PagedKv kv = b.pool->view();
  reference::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(b.seqs.size()),
                            b.shape, out.data(), nullptr);
  return out;
}

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

// Largest relative error per dtype over a test, printed at its end.
class ErrorLog {
 public:
  explicit ErrorLog(std::string name) : name_(std::move(name)) {}
  ~ErrorLog() {
    std::string line = name_ + ": max |error| / max |output| vs the oracle:";
    for (const auto& [dtype, e] : worst_) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), " %s %.2g", DTypeName(dtype), e);
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
  void Record(DType dtype, const Error& e) {
    worst_[dtype] = std::max(worst_[dtype], e.relative());
  }

 private:
  std::string name_;
  std::map<DType, double> worst_;
};

void ExpectMatchesReference(const Batch& b, ThreadPool* pool, const std::string& what,
                            ErrorLog& log) {
  const Error e = Compare(RunKernel(b, pool), RunReference(b));
  EXPECT_LE(e.relative(), kSameDataTolerance)
      << what << " " << Describe(b.geo) << ": max error " << e.max_abs << " of " << e.want_max;
  log.Record(b.geo.dtype, e);
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

INSTANTIATE_TEST_SUITE_P(Levels, PagedAttentionTest,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512Vnni),
                         [](const auto& info) { return std::to_string(static_cast<int>(info.param)); });

}  // namespace
}  // namespace kvserve
