#include "model/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"
#include "kernels/kernels.h"
#include "model/model_tensors.h"

namespace kvserve {
namespace {


std::vector<float> ToF32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  const int64_t rows = t.rows(), cols = t.cols();
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(t.dtype, t.row(r), out.data() + r * cols, cols);
  return out;
}

// Rows [first, first + rows) of a 2-D tensor as a view sharing its owner.
Tensor RowSlice(const Tensor& t, int64_t first, int64_t rows) {
  Tensor s;
  s.dtype = t.dtype;
  s.shape = {rows, t.cols()};
  s.data = t.row(first);
  s.owner = t.owner;
  return s;
}

Tensor PackedView(Tensor t, int64_t* packed_bytes) {
  t.packed = kernels::PackMatmulWeights(t);
  if (t.packed != nullptr) *packed_bytes += kernels::PackedMatmulWeightsBytes(t);
  return t;
}

}  // namespace

Status MlaLayer::Load(const ModelConfig& c, LoadedModel& model, int64_t layer,
                      int64_t* packed_bytes, bool expansion) {
  hidden_ = c.hidden_dim;
  heads_ = c.num_heads;
  nope_ = c.mla.qk_nope_head_dim;
  rope_ = c.mla.qk_rope_head_dim;
  v_dim_ = c.mla.v_head_dim;
  kv_lora_ = c.mla.kv_lora_rank;
  q_lora_ = c.mla.q_lora_rank;
  norm_eps_ = c.norm_eps;
  double mscale = 1.0;
  if (c.mla.yarn_log_multiplier > 0.0f && c.rope.scaling_factor > 1.0f) {
    mscale = 1.0 + 0.1 * c.mla.yarn_log_multiplier * std::log(c.rope.scaling_factor);
  }
  softmax_scale_ = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(nope_ + rope_)));
  const int64_t D = hidden_, qk = nope_ + rope_;
  const std::string p = "blk." + std::to_string(layer) + ".";
  if (q_lora_ > 0) {
    KV_ASSIGN_OR_RETURN(wq_a_, FindShapedTensor(model, p + "attn_q_a.weight", {q_lora_, D}));
    KV_ASSIGN_OR_RETURN(const Tensor* norm, FindShapedTensor(model, p + "attn_q_a_norm.weight", {q_lora_}));
    q_a_norm_ = ToF32(*norm);
    KV_ASSIGN_OR_RETURN(wq_b_, FindShapedTensor(model, p + "attn_q_b.weight", {heads_ * qk, q_lora_}));
  } else {
    KV_ASSIGN_OR_RETURN(wq_, FindShapedTensor(model, p + "attn_q.weight", {heads_ * qk, D}));
  }
  KV_ASSIGN_OR_RETURN(wkv_a_, FindShapedTensor(model, p + "attn_kv_a_mqa.weight", {kv_lora_ + rope_, D}));
  KV_ASSIGN_OR_RETURN(const Tensor* kv_norm,
                      FindShapedTensor(model, p + "attn_kv_a_norm.weight", {kv_lora_}));
  kv_a_norm_ = ToF32(*kv_norm);

  k_absorb_.clear();
  v_up_.clear();
  if (model.tensors.count(p + "attn_kv_b.weight")) {
    KV_ASSIGN_OR_RETURN(const Tensor* kv_b,
                        FindShapedTensor(model, p + "attn_kv_b.weight", {heads_ * (nope_ + v_dim_), kv_lora_}));
    // W_UK[h]^T, transposed once into f32 (the file stores W_UK[h] as nope rows of kv_lora).
    for (int64_t h = 0; h < heads_; ++h) {
      const Tensor w_uk = RowSlice(*kv_b, h * (nope_ + v_dim_), nope_);
      const std::vector<float> f = ToF32(w_uk);  // [nope, kv_lora]
      Tensor t = Tensor::Allocate(DType::kF32, {kv_lora_, nope_});
      float* dst = static_cast<float*>(t.mutable_data());
      for (int64_t i = 0; i < nope_; ++i) {
        for (int64_t j = 0; j < kv_lora_; ++j) dst[j * nope_ + i] = f[i * kv_lora_ + j];
      }
      k_absorb_.push_back(PackedView(std::move(t), packed_bytes));
      v_up_.push_back(PackedView(RowSlice(*kv_b, h * (nope_ + v_dim_) + nope_, v_dim_), packed_bytes));
    }
  } else {
    KV_ASSIGN_OR_RETURN(const Tensor* k_b,
                        FindShapedTensor(model, p + "attn_k_b.weight", {heads_, kv_lora_, nope_}));
    KV_ASSIGN_OR_RETURN(const Tensor* v_b,
                        FindShapedTensor(model, p + "attn_v_b.weight", {heads_, v_dim_, kv_lora_}));
    for (int64_t h = 0; h < heads_; ++h) {
      Tensor kh = RowSlice(*k_b, h * kv_lora_, kv_lora_);
      Tensor vh = RowSlice(*v_b, h * v_dim_, v_dim_);
      k_absorb_.push_back(PackedView(std::move(kh), packed_bytes));
      v_up_.push_back(PackedView(std::move(vh), packed_bytes));
    }
  }
  if (expansion && v_dim_ > nope_ + rope_) {
    return UnimplementedError("the expanded MLA cache pads values to the key width; v_head_dim " +
                              std::to_string(v_dim_) + " is wider");
  }
  if (expansion) {  // [W_UK[h]; W_UV[h]] per head, in f32
    kv_b_ = Tensor::Allocate(DType::kF32, {heads_ * (nope_ + v_dim_), kv_lora_});
    float* dst = static_cast<float*>(kv_b_.mutable_data());
    for (int64_t h = 0; h < heads_; ++h) {
      const std::vector<float> w_uk_t = ToF32(k_absorb_[static_cast<size_t>(h)]);
      const std::vector<float> w_uv = ToF32(v_up_[static_cast<size_t>(h)]);
      float* head = dst + h * (nope_ + v_dim_) * kv_lora_;
      for (int64_t i = 0; i < nope_; ++i) {
        for (int64_t j = 0; j < kv_lora_; ++j) head[i * kv_lora_ + j] = w_uk_t[j * nope_ + i];
      }
      std::copy(w_uv.begin(), w_uv.end(), head + nope_ * kv_lora_);
    }
    kv_b_ = PackedView(std::move(kv_b_), packed_bytes);
  }
  return OkStatus();
}

void MlaLayer::ExpandKeysValues(const float* latents, int64_t n, float* k, float* v,
                                ThreadPool* pool) {
  KV_CHECK(!kv_b_.empty()) << "MlaLayer::Load was not asked for the expansion";
  const int64_t row = latent_row_dim(), qk = nope_ + rope_, per_head = nope_ + v_dim_;
  head_in_.resize(static_cast<size_t>(n * kv_lora_));
  expanded_.resize(static_cast<size_t>(n * heads_ * per_head));
  for (int64_t i = 0; i < n; ++i) {
    std::copy(latents + i * row, latents + i * row + kv_lora_, head_in_.data() + i * kv_lora_);
  }
  kernels::Matmul(head_in_.data(), n, kv_b_, expanded_.data(), pool);
  for (int64_t i = 0; i < n; ++i) {
    const float* kr = latents + i * row + kv_lora_;
    for (int64_t h = 0; h < heads_; ++h) {
      const float* e = expanded_.data() + (i * heads_ + h) * per_head;
      float* kh = k + (i * heads_ + h) * qk;
      float* vh = v + (i * heads_ + h) * qk;
      std::copy(e, e + nope_, kh);
      std::copy(kr, kr + rope_, kh + nope_);
      std::copy(e + nope_, e + per_head, vh);
      std::fill(vh + v_dim_, vh + qk, 0.0f);
    }
  }
}

void MlaLayer::CompactHeadOutputs(const float* o, int64_t n, float* out) const {
  const int64_t qk = nope_ + rope_;
  for (int64_t i = 0; i < n * heads_; ++i) {
    std::copy(o + i * qk, o + i * qk + v_dim_, out + i * v_dim_);
  }
}

void MlaLayer::Project(const float* x, int64_t n, const int64_t* positions,
                       const float* cos_sin, const std::vector<float>& inv_freqs,
                       RopeLayout layout, float* q, float* latent, ThreadPool* pool) {
  const int64_t qk = nope_ + rope_, row = latent_row_dim();
  if (q_lora_ > 0) {
    q_lora_rows_.resize(static_cast<size_t>(n * q_lora_));
    kernels::Matmul(x, n, *wq_a_, q_lora_rows_.data(), pool);
    kernels::RmsNorm(q_lora_rows_.data(), q_a_norm_.data(), n, q_lora_, norm_eps_,
                     q_lora_rows_.data());
    kernels::Matmul(q_lora_rows_.data(), n, *wq_b_, q, pool);
  } else {
    kernels::Matmul(x, n, *wq_, q, pool);
  }
  kernels::Matmul(x, n, *wkv_a_, latent, pool);
  const auto num_pairs = static_cast<int64_t>(inv_freqs.size());
  for (int64_t i = 0; i < n; ++i) {
    float* lat = latent + i * row;
    kernels::RmsNorm(lat, kv_a_norm_.data(), 1, kv_lora_, norm_eps_, lat);
    const float* cs = cos_sin + i * 2 * num_pairs;
    kernels::Rope(lat + kv_lora_, 1, rope_, positions[i], inv_freqs, cs, layout);
    for (int64_t h = 0; h < heads_; ++h) {
      kernels::Rope(q + i * heads_ * qk + h * qk + nope_, 1, rope_, positions[i], inv_freqs, cs,
                    layout);
    }
  }
}

void MlaLayer::AbsorbQuery(const float* q, int64_t n, float* q_abs, ThreadPool* pool) {
  const int64_t qk = nope_ + rope_, row = latent_row_dim();
  head_in_.resize(static_cast<size_t>(n * nope_));
  head_out_.resize(static_cast<size_t>(n * kv_lora_));
  for (int64_t h = 0; h < heads_; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = q + i * heads_ * qk + h * qk;
      std::copy(src, src + nope_, head_in_.data() + i * nope_);
      float* dst = q_abs + i * heads_ * row + h * row;
      std::copy(src + nope_, src + qk, dst + kv_lora_);  // the RoPE part as is
    }
    kernels::Matmul(head_in_.data(), n, k_absorb_[static_cast<size_t>(h)], head_out_.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      const float* src = head_out_.data() + i * kv_lora_;
      std::copy(src, src + kv_lora_, q_abs + i * heads_ * row + h * row);
    }
  }
}

void MlaLayer::ExpandOutput(const float* o, int64_t n, float* out, ThreadPool* pool) {
  const int64_t row = latent_row_dim();
  head_in_.resize(static_cast<size_t>(n * kv_lora_));
  head_out_.resize(static_cast<size_t>(n * v_dim_));
  for (int64_t h = 0; h < heads_; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = o + i * heads_ * row + h * row;
      std::copy(src, src + kv_lora_, head_in_.data() + i * kv_lora_);
    }
    kernels::Matmul(head_in_.data(), n, v_up_[static_cast<size_t>(h)], head_out_.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      std::copy(head_out_.data() + i * v_dim_, head_out_.data() + (i + 1) * v_dim_,
                out + i * heads_ * v_dim_ + h * v_dim_);
    }
  }
}

void MlaLayer::ReferenceAttention(const float* q, int64_t n, const float* latents,
                                  int64_t num_keys, float* out) const {
  KV_CHECK(n >= 1 && n <= num_keys);
  const int64_t qk = nope_ + rope_, row = latent_row_dim();
  std::vector<double> k_nope(static_cast<size_t>(num_keys * nope_));
  std::vector<double> v(static_cast<size_t>(num_keys * v_dim_));
  std::vector<double> scores(static_cast<size_t>(num_keys));
  for (int64_t h = 0; h < heads_; ++h) {
    const std::vector<float> w_uk_t = ToF32(k_absorb_[static_cast<size_t>(h)]);  // [kv_lora, nope]
    const std::vector<float> w_uv = ToF32(v_up_[static_cast<size_t>(h)]);       // [v, kv_lora]
    for (int64_t t = 0; t < num_keys; ++t) {  // the head's keys and values, expanded
      const float* c = latents + t * row;
      for (int64_t i = 0; i < nope_; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < kv_lora_; ++j) s += double{w_uk_t[j * nope_ + i]} * c[j];
        k_nope[t * nope_ + i] = s;
      }
      for (int64_t i = 0; i < v_dim_; ++i) {
        double s = 0.0;
        for (int64_t j = 0; j < kv_lora_; ++j) s += double{w_uv[i * kv_lora_ + j]} * c[j];
        v[t * v_dim_ + i] = s;
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t last = num_keys - n + r;
      const float* qh = q + r * heads_ * qk + h * qk;
      double max = -INFINITY;
      for (int64_t t = 0; t <= last; ++t) {
        double s = 0.0;
        for (int64_t i = 0; i < nope_; ++i) s += qh[i] * k_nope[t * nope_ + i];
        const float* kr = latents + t * row + kv_lora_;
        for (int64_t i = 0; i < rope_; ++i) s += double{qh[nope_ + i]} * kr[i];
        scores[t] = s * softmax_scale_;
        max = std::max(max, scores[t]);
      }
      double sum = 0.0;
      for (int64_t t = 0; t <= last; ++t) sum += scores[t] = std::exp(scores[t] - max);
      float* o = out + r * heads_ * v_dim_ + h * v_dim_;
      for (int64_t i = 0; i < v_dim_; ++i) {
        double acc = 0.0;
        for (int64_t t = 0; t <= last; ++t) acc += scores[t] * v[t * v_dim_ + i];
        o[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace kvserve
