// Test-only helpers of the paged attention tests (paged_attention_test.cc,
// paged_attention_stats_test.cc): quantized KV pools, random batches in paged storage, and
// comparisons against the scalar oracle (kernels/reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/paged_attention.h"
#include "kernels/reference/reference.h"
#include "tensor/dtype.h"

namespace kvserve::paged_attention_test {

using kernels::PagedAttentionShape;
using kernels::PagedKv;
using kernels::PagedSeq;

inline const DType kAllDtypes[] = {DType::kF32,     DType::kF16,     DType::kBF16,
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

  // Stores a value at `slot` that makes any read of it visible: NaN in K and V (int8: NaN
  // slot scales).
  void Poison(int64_t slot) {
    const int64_t n = num_kv_heads_ * head_dim_;
    const int64_t bytes = DTypeBlockBytes(dtype_);
    for (std::vector<uint8_t>* data : {&k_, &v_}) {
      uint8_t* dst = data->data() + slot * n * bytes;
      for (int64_t i = 0; i < n; ++i) {
        switch (dtype_) {
          case DType::kF32: {
            const float nan = NAN;
            std::memcpy(dst + 4 * i, &nan, 4);
            break;
          }
          case DType::kF16: case DType::kBF16: {
            const uint16_t nan = dtype_ == DType::kF16 ? 0x7E00 : 0x7FC0;
            std::memcpy(dst + 2 * i, &nan, 2);
            break;
          }
          case DType::kFp8E4M3: case DType::kFp8E5M2: dst[i] = 0x7F; break;  // NaN in both
          default: break;
        }
      }
    }
    if (dtype_ == DType::kI8) {
      for (int64_t h = 0; h < num_kv_heads_; ++h) {
        k_token_scales_[slot * num_kv_heads_ + h] = NAN;
        v_token_scales_[slot * num_kv_heads_ + h] = NAN;
      }
    }
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

inline std::string Describe(const Geometry& g) {
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

inline Batch MakeBatch(const Geometry& geo, const std::vector<SeqSpec>& specs, std::mt19937& rng) {
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

// Sets sequence s's key_begin and makes what the kernels must not read poisonous: the slots
// of positions below it in its partly attended block hold NaN, the block table entries of
// blocks wholly below it are -1.
inline void SetKeyBegin(Batch& b, size_t s, int64_t key_begin) {
  const int64_t bs = b.geo.block_size;
  b.seqs[s].key_begin = key_begin;
  for (int64_t t = key_begin / bs * bs; t < key_begin; ++t) {
    b.pool->Poison(b.block_tables[s][t / bs] * bs + t % bs);
  }
  for (int64_t block = 0; block < key_begin / bs; ++block) b.block_tables[s][block] = -1;
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

inline Error Compare(const std::vector<float>& got, const std::vector<float>& want) {
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
inline constexpr double kSameDataTolerance = 1e-5;

inline std::vector<float> RunKernel(const Batch& b, ThreadPool* pool) {
  std::vector<float> out = b.NewOutput();
  PagedKv kv = b.pool->view();
  kernels::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(b.seqs.size()),
                          b.shape, out.data(), pool);
  return out;
}

inline std::vector<float> RunReference(const Batch& b) {
  std::vector<float> out = b.NewOutput();
  PagedKv kv = b.pool->view();
  reference::PagedAttention(b.q.data(), kv, b.seqs.data(), static_cast<int64_t>(b.seqs.size()),
                            b.shape, out.data(), nullptr);
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

inline void ExpectMatchesReference(const Batch& b, ThreadPool* pool, const std::string& what,
                            ErrorLog& log) {
  const Error e = Compare(RunKernel(b, pool), RunReference(b));
  EXPECT_LE(e.relative(), kSameDataTolerance)
      << what << " " << Describe(b.geo) << ": max error " << e.max_abs << " of " << e.want_max;
  log.Record(b.geo.dtype, e);
}

}  // namespace kvserve::paged_attention_test
