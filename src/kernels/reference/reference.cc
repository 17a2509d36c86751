#include "kernels/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"
#include "tensor/dtype.h"

namespace kvserve::reference {

std::vector<float> RopeInvFreqs(const RopeOptions& options) {
  int64_t rotary_dim = options.rotary_dim > 0 ? options.rotary_dim : options.head_dim;
  KV_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0) << "rotary_dim=" << rotary_dim;
  int64_t num_pairs = rotary_dim / 2;
  std::vector<float> inv_freqs(num_pairs);
  for (int64_t i = 0; i < num_pairs; ++i) {
    double inv = 1.0 / std::pow(static_cast<double>(options.theta),
                                static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
    switch (options.scaling) {
      case RopeScalingType::kNone:
        break;
      case RopeScalingType::kLinear:
        inv /= options.scaling_factor;
        break;
      case RopeScalingType::kYarn: {
        // HF yarn_find_correction_range / yarn_linear_ramp_mask (ggml rope_yarn_corr_dims).
        const double dim = static_cast<double>(rotary_dim);
        const double orig = static_cast<double>(options.yarn_original_max_positions);
        auto correction_dim = [&](double rotations) {
          return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) /
                 (2.0 * std::log(static_cast<double>(options.theta)));
        };
        const double low = std::max(0.0, std::floor(correction_dim(options.yarn_beta_fast)));
        const double high =
            std::min(dim - 1.0, std::ceil(correction_dim(options.yarn_beta_slow)));
        const double span = std::max(0.001, high - low);
        const double ramp = std::clamp((static_cast<double>(i) - low) / span, 0.0, 1.0);
        // ramp 0: extrapolate (the trained frequency); 1: interpolate (divided by factor).
        inv = inv * (1.0 - ramp) + inv / options.scaling_factor * ramp;
        break;
      }
      case RopeScalingType::kLlama3: {
        // HF transformers _compute_llama3_parameters.
        double factor = options.scaling_factor;
        double low = options.llama3_low_freq_factor;
        double high = options.llama3_high_freq_factor;
        double old_len = static_cast<double>(options.llama3_original_max_positions);
        double low_freq_wavelen = old_len / low;
        double high_freq_wavelen = old_len / high;
        double wavelen = 2.0 * std::numbers::pi / inv;
        if (wavelen > low_freq_wavelen) {
          inv = inv / factor;
        } else if (wavelen >= high_freq_wavelen) {  // medium: smooth interpolation
          double smooth = (old_len / wavelen - low) / (high - low);
          inv = (1.0 - smooth) * inv / factor + smooth * inv;
        }
        break;
      }
    }
    inv_freqs[i] = static_cast<float>(inv);
  }
  return inv_freqs;
}

void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* /*pool*/) {
  KV_CHECK(w.shape.size() == 2) << "Matmul weight must be 2-D, got " << w.ShapeString();
  int64_t n = w.shape[0];
  int64_t k = w.shape[1];
  std::vector<float> row(k);
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(w.dtype, w.row(j), row.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      double acc = 0.0;
      for (int64_t c = 0; c < k; ++c) acc += static_cast<double>(xi[c]) * row[c];
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(xr[i] * inv * weight[i]);
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows,
               int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>((xr[i] - mean) * inv * weight[i] + bias[i]);
  }
}

void Gelu(const float* x, int64_t n, float* out) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))));
  }
}

void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, RopeLayout layout) {
  int64_t num_pairs = static_cast<int64_t>(inv_freqs.size());
  KV_CHECK(2 * num_pairs <= head_dim) << "rotary_dim " << 2 * num_pairs << " > " << head_dim;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < num_pairs; ++i) {
      double angle = static_cast<double>(position) * static_cast<double>(inv_freqs[i]);
      double c = std::cos(angle);
      double s = std::sin(angle);
      int64_t a = layout == RopeLayout::kInterleaved ? 2 * i : i;
      int64_t b = layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + num_pairs;
      double x0 = xh[a];
      double x1 = xh[b];
      xh[a] = static_cast<float>(x0 * c - x1 * s);
      xh[b] = static_cast<float>(x0 * s + x1 * c);
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max_value = *std::max_element(x, x + n);
  double sum = 0.0;
  std::vector<double> e(n);
  for (int64_t i = 0; i < n; ++i) {
    e[i] = std::exp(static_cast<double>(x[i]) - max_value);
    sum += e[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[i] / sum);
}

void EmbeddingLookup(const Tensor& table, int64_t token, float* out) {
  KV_CHECK(token >= 0 && token < table.rows()) << "token " << token << " of " << table.rows();
  DequantizeRow(table.dtype, table.row(token), out, table.cols());
}

void DenseAttention(const float* q, const float* k, const float* v,
                    const kernels::AttentionShape& shape, float* out, ThreadPool* /*pool*/) {
  const int64_t hd = shape.head_dim;
  KV_CHECK(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0);
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  std::vector<double> scores;
  for (int64_t i = 0; i < shape.num_queries; ++i) {
    int64_t num_visible = std::min(shape.num_keys, shape.first_pos + i + 1);
    for (int64_t h = 0; h < shape.num_heads; ++h) {
      const float* qh = q + (i * shape.num_heads + h) * hd;
      int64_t kvh = h / group;
      float* o = out + (i * shape.num_heads + h) * hd;
      if (num_visible <= 0) {
        std::fill(o, o + hd, 0.0f);
        continue;
      }
      scores.assign(num_visible, 0.0);
      double max_score = -INFINITY;
      for (int64_t t = 0; t < num_visible; ++t) {
        const float* kt = k + (t * shape.num_kv_heads + kvh) * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kt[d];
        scores[t] = dot * shape.scale;
        max_score = std::max(max_score, scores[t]);
      }
      double sum = 0.0;
      for (auto& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (int64_t t = 0; t < num_visible; ++t) {
          acc += scores[t] * v[(t * shape.num_kv_heads + kvh) * hd + d];
        }
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

namespace {

// Value `index` (an element offset into K or V) of paged storage, as float, before scales.
float StoredValue(DType dtype, const void* data, int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kF16: return Fp16ToFp32(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16: return Bf16ToFp32(static_cast<const uint16_t*>(data)[index]);
    case DType::kFp8E4M3: return Fp8E4M3ToFp32(static_cast<const uint8_t*>(data)[index]);
    case DType::kFp8E5M2: return Fp8E5M2ToFp32(static_cast<const uint8_t*>(data)[index]);
    case DType::kI8: return static_cast<float>(static_cast<const int8_t*>(data)[index]);
    default: KV_CHECK(false) << "paged KV dtype " << DTypeName(dtype);
  }
  return 0.0f;
}

}  // namespace

void GatherPagedKv(const kernels::PagedKv& kv, const kernels::PagedSeq& seq, float* k_out,
                   float* v_out) {
  KV_CHECK(kv.block_size > 0 && kv.num_kv_heads > 0 && kv.head_dim > 0);
  const bool fp8 = kv.dtype == DType::kFp8E4M3 || kv.dtype == DType::kFp8E5M2;
  const bool int8 = kv.dtype == DType::kI8;
  KV_CHECK(!fp8 || (kv.k_head_scales != nullptr && kv.v_head_scales != nullptr));
  KV_CHECK(!int8 || (kv.k_token_scales != nullptr && kv.v_token_scales != nullptr));
  const int64_t hd = kv.head_dim;
  std::fill(k_out, k_out + seq.key_begin * kv.num_kv_heads * hd, 0.0f);
  std::fill(v_out, v_out + seq.key_begin * kv.num_kv_heads * hd, 0.0f);
  for (int64_t t = seq.key_begin; t < seq.num_keys; ++t) {
    const int64_t slot = static_cast<int64_t>(seq.block_table[t / kv.block_size]) * kv.block_size +
                         t % kv.block_size;
    for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
      float k_scale = 1.0f, v_scale = 1.0f;
      if (fp8) {
        k_scale = kv.k_head_scales[h];
        v_scale = kv.v_head_scales[h];
      } else if (int8) {
        k_scale = kv.k_token_scales[slot * kv.num_kv_heads + h];
        v_scale = kv.v_token_scales[slot * kv.num_kv_heads + h];
      }
      const int64_t src = (slot * kv.num_kv_heads + h) * hd;
      const int64_t dst = (t * kv.num_kv_heads + h) * hd;
      for (int64_t d = 0; d < hd; ++d) {
        k_out[dst + d] = StoredValue(kv.dtype, kv.k, src + d) * k_scale;
        v_out[dst + d] = StoredValue(kv.dtype, kv.v, src + d) * v_scale;
      }
    }
  }
}

namespace {

// The statistics of one sequence (see PagedSeq::stats_scores) from its gathered K.
void PagedAttentionStats(const float* q, const kernels::PagedKv& kv, const kernels::PagedSeq& seq,
                         const kernels::PagedAttentionShape& shape, const float* k) {
  const int64_t hd = kv.head_dim;
  const int64_t group = shape.num_heads / kv.num_kv_heads;
  const int64_t first_pos = seq.num_keys - seq.num_queries;
  std::vector<double> logits;
  for (int64_t i = seq.stats_query_begin; i < seq.num_queries; ++i) {
    const int64_t last = first_pos + i;
    for (int64_t h = 0; h < shape.num_heads; ++h) {
      const float* qh = q + ((seq.query_offset + i) * shape.num_heads + h) * hd;
      const int64_t kvh = h / group;
      const int64_t row = (i - seq.stats_query_begin) * shape.num_heads + h;
      logits.assign(last + 1, 0.0);
      double max_logit = -INFINITY;
      for (int64_t t = seq.key_begin; t <= last; ++t) {
        const float* kt = k + (t * kv.num_kv_heads + kvh) * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * kt[d];
        logits[t] = dot * shape.scale;
        max_logit = std::max(max_logit, logits[t]);
        if (seq.stats_scores != nullptr) {
          seq.stats_scores[row * seq.num_keys + t] = static_cast<float>(logits[t]);
        }
      }
      double sum = 0.0;
      for (int64_t t = seq.key_begin; t <= last; ++t) sum += std::exp(logits[t] - max_logit);
      if (seq.stats_lse != nullptr) {
        seq.stats_lse[row] = static_cast<float>(max_logit + std::log(sum));
      }
    }
  }
}

}  // namespace

void PagedAttention(const float* q, const kernels::PagedKv& kv, const kernels::PagedSeq* seqs,
                    int64_t num_seqs, const kernels::PagedAttentionShape& shape, float* out,
                    ThreadPool* pool) {
  const int64_t row_floats = shape.num_heads * kv.head_dim;
  const int64_t key_floats = kv.num_kv_heads * kv.head_dim;
  std::vector<float> k, v;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const kernels::PagedSeq& seq = seqs[s];
    KV_CHECK(seq.num_queries >= 1 && seq.num_keys >= seq.num_queries)
        << "num_queries=" << seq.num_queries << " num_keys=" << seq.num_keys;
    KV_CHECK(seq.key_begin >= 0 && seq.key_begin <= seq.num_keys - seq.num_queries)
        << "key_begin=" << seq.key_begin;
    KV_CHECK(seq.stats_query_begin >= 0 && seq.stats_query_begin <= seq.num_queries)
        << "stats_query_begin=" << seq.stats_query_begin;
    k.resize(seq.num_keys * key_floats);
    v.resize(k.size());
    GatherPagedKv(kv, seq, k.data(), v.data());
    kernels::AttentionShape dense;
    dense.num_queries = seq.num_queries;
    dense.num_keys = seq.num_keys - seq.key_begin;
    dense.first_pos = seq.num_keys - seq.num_queries - seq.key_begin;
    dense.num_heads = shape.num_heads;
    dense.num_kv_heads = kv.num_kv_heads;
    dense.head_dim = kv.head_dim;
    dense.scale = shape.scale;
    reference::DenseAttention(q + seq.query_offset * row_floats,
                              k.data() + seq.key_begin * key_floats,
                              v.data() + seq.key_begin * key_floats, dense,
                              out + seq.query_offset * row_floats, pool);
    if (seq.stats_scores != nullptr || seq.stats_lse != nullptr) {
      PagedAttentionStats(q, kv, seq, shape, k.data());
    }
  }
}

void AccumulateAttentionMass(const float* scores, const float* lse, int64_t num_rows,
                             int64_t num_heads, int64_t num_kv_heads, int64_t num_keys,
                             int64_t key_begin, int64_t row0_last_key, float* mass,
                             int64_t mass_stride) {
  KV_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t key_end = row0_last_key + num_rows;  // one past the last row's last key
  std::vector<double> sum(key_end > 0 ? key_end : 0);
  for (int64_t kvh = 0; kvh < num_kv_heads; ++kvh) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t i = 0; i < num_rows; ++i) {
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* s = scores + (i * num_heads + h) * num_keys;
        for (int64_t t = key_begin; t <= row0_last_key + i; ++t) {
          sum[t] += std::exp(static_cast<double>(s[t]) - lse[i * num_heads + h]);
        }
      }
    }
    for (int64_t t = key_begin; t < key_end; ++t) {
      mass[kvh * mass_stride + t] = static_cast<float>(mass[kvh * mass_stride + t] + sum[t]);
    }
  }
}

}  // namespace kvserve::reference
