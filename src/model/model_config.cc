#include "model/model_config.h"

#include <cmath>
#include <string>

namespace kvserve {
namespace {

// Generous caps that keep every product below computed in int64 without overflow while
// admitting every real model (the largest Llama has vocab 128k, hidden 16k, ffn 53k).
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 20;
constexpr int64_t kMaxFfn = int64_t{1} << 22;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxSeqLen = int64_t{1} << 26;

Status CheckRange(const char* what, int64_t value, int64_t max) {
  if (value <= 0 || value > max) {
    return InvalidArgumentError(std::string("model config: ") + what + " = " +
                                std::to_string(value) + " is out of range [1, " +
                                std::to_string(max) + "]");
  }
  return OkStatus();
}

// a * b + c with overflow detection; returns false on overflow.
bool MulAdd(int64_t a, int64_t b, int64_t* acc) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p)) return false;
  return !__builtin_add_overflow(*acc, p, acc);
}

constexpr int64_t kMaxExperts = int64_t{1} << 12;

Status ValidateMla(const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  KV_RETURN_IF_ERROR(CheckRange("kv_lora_rank", m.kv_lora_rank, kMaxHidden));
  if (m.q_lora_rank != 0) KV_RETURN_IF_ERROR(CheckRange("q_lora_rank", m.q_lora_rank, kMaxHidden));
  KV_RETURN_IF_ERROR(CheckRange("qk_nope_head_dim", m.qk_nope_head_dim, kMaxHeadDim));
  KV_RETURN_IF_ERROR(CheckRange("qk_rope_head_dim", m.qk_rope_head_dim, kMaxHeadDim));
  KV_RETURN_IF_ERROR(CheckRange("v_head_dim", m.v_head_dim, kMaxHeadDim));
  if (c.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim) {
    return InvalidArgumentError("model config: MLA head_dim " + std::to_string(c.head_dim) +
                                " is not qk_nope_head_dim + qk_rope_head_dim (" +
                                std::to_string(m.qk_nope_head_dim) + " + " +
                                std::to_string(m.qk_rope_head_dim) + ")");
  }
  if (m.qk_rope_head_dim % 2 != 0 || c.rope.rotary_dim != m.qk_rope_head_dim) {
    return InvalidArgumentError("model config: MLA rope dimension " +
                                std::to_string(c.rope.rotary_dim) +
                                " must be qk_rope_head_dim (even), " +
                                std::to_string(m.qk_rope_head_dim));
  }
  if (c.num_kv_heads != c.num_heads) {
    return InvalidArgumentError("model config: MLA models expand one key and value per head "
                                "(num_kv_heads must equal num_heads)");
  }
  if (!std::isfinite(m.yarn_log_multiplier) || m.yarn_log_multiplier < 0.0f) {
    return InvalidArgumentError("model config: MLA yarn_log_multiplier must be >= 0");
  }
  return OkStatus();
}

Status ValidateMoe(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  KV_RETURN_IF_ERROR(CheckRange("expert_count", m.num_experts, kMaxExperts));
  if (m.num_experts_used <= 0 || m.num_experts_used > m.num_experts) {
    return InvalidArgumentError("model config: expert_used_count " +
                                std::to_string(m.num_experts_used) + " must be in [1, " +
                                std::to_string(m.num_experts) + "]");
  }
  KV_RETURN_IF_ERROR(CheckRange("expert_feed_forward_length", m.expert_ffn_dim, kMaxFfn));
  if (m.num_shared_experts < 0 || m.num_shared_experts > kMaxExperts) {
    return InvalidArgumentError("model config: expert_shared_count out of range");
  }
  if (m.first_dense_layers < 0 || m.first_dense_layers > c.num_layers) {
    return InvalidArgumentError("model config: leading_dense_block_count " +
                                std::to_string(m.first_dense_layers) + " exceeds the " +
                                std::to_string(c.num_layers) + " layers");
  }
  if (m.num_groups <= 0 || m.num_experts % m.num_groups != 0 || m.num_groups_used <= 0 ||
      m.num_groups_used > m.num_groups) {
    return InvalidArgumentError("model config: expert groups (" + std::to_string(m.num_groups) +
                                ", " + std::to_string(m.num_groups_used) +
                                " used) must divide the " + std::to_string(m.num_experts) +
                                " experts");
  }
  if (m.num_groups > 1 && m.num_experts / m.num_groups * m.num_groups_used < m.num_experts_used) {
    return InvalidArgumentError("model config: the eligible expert groups hold fewer experts "
                                "than expert_used_count");
  }
  if (!(std::isfinite(m.weights_scale) && m.weights_scale > 0.0f)) {
    return InvalidArgumentError("model config: expert_weights_scale must be positive");
  }
  return OkStatus();
}

}  // namespace

const char* ExpertGatingName(ExpertGating gating) {
  return gating == ExpertGating::kSigmoid ? "sigmoid" : "softmax";
}

Status ModelConfig::Validate() const {
  KV_RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, kMaxVocab));
  KV_RETURN_IF_ERROR(CheckRange("hidden_dim", hidden_dim, kMaxHidden));
  // A model whose every layer is MoE has no dense width.
  if (!(is_moe() && moe.first_dense_layers == 0 && ffn_dim == 0)) {
    KV_RETURN_IF_ERROR(CheckRange("ffn_dim", ffn_dim, kMaxFfn));
  }
  KV_RETURN_IF_ERROR(CheckRange("num_layers", num_layers, kMaxLayers));
  KV_RETURN_IF_ERROR(CheckRange("num_heads", num_heads, kMaxHeads));
  KV_RETURN_IF_ERROR(CheckRange("num_kv_heads", num_kv_heads, kMaxHeads));
  KV_RETURN_IF_ERROR(CheckRange("head_dim", head_dim, kMaxHeadDim));
  KV_RETURN_IF_ERROR(CheckRange("max_seq_len", max_seq_len, kMaxSeqLen));
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgumentError("model config: num_heads (" + std::to_string(num_heads) +
                                ") is not a multiple of num_kv_heads (" +
                                std::to_string(num_kv_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    return InvalidArgumentError("model config: head_dim " + std::to_string(head_dim) +
                                " is odd (RoPE rotates pairs)");
  }
  if (num_heads * head_dim > kMaxHidden * 4) {
    return InvalidArgumentError("model config: num_heads * head_dim is too large");
  }
  if (rope.head_dim != 0 && rope.head_dim != head_dim) {
    return InvalidArgumentError("model config: rope.head_dim " + std::to_string(rope.head_dim) +
                                " differs from head_dim " + std::to_string(head_dim));
  }
  if (rope.rotary_dim < 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2 != 0) {
    return InvalidArgumentError("model config: rope.rotary_dim " +
                                std::to_string(rope.rotary_dim) +
                                " must be even and within [0, head_dim]");
  }
  if (!(std::isfinite(rope.theta) && rope.theta > 0.0f)) {
    return InvalidArgumentError("model config: rope theta must be positive and finite");
  }
  if (!(std::isfinite(rope.scaling_factor) && rope.scaling_factor > 0.0f)) {
    return InvalidArgumentError("model config: rope scaling factor must be positive");
  }
  if (!(std::isfinite(norm_eps) && norm_eps > 0.0f)) {
    return InvalidArgumentError("model config: norm_eps must be positive and finite");
  }
  if (is_mla()) KV_RETURN_IF_ERROR(ValidateMla(*this));
  if (is_moe()) KV_RETURN_IF_ERROR(ValidateMoe(*this));
  if (NumParameters() < 0) {
    return InvalidArgumentError("model config: parameter count overflows");
  }
  return OkStatus();
}

const char* PoolingTypeName(PoolingType pooling) {
  switch (pooling) {
    case PoolingType::kNone: return "none";
    case PoolingType::kMean: return "mean";
    case PoolingType::kCls: return "cls";
    case PoolingType::kLast: return "last";
  }
  return "none";
}

int64_t ModelConfig::NumParameters() const {
  int64_t total = 0;
  if (is_encoder()) {
    // Embeddings (token, type, position, their LayerNorm), then per layer Q/K/V/O with biases,
    // the FFN with biases, two LayerNorms.
    const int64_t D = hidden_dim, F = ffn_dim;
    bool ok = MulAdd(vocab_size + token_type_count + max_seq_len, D, &total) &&
              MulAdd(2, D, &total);
    for (int64_t l = 0; ok && l < num_layers; ++l) {
      ok = MulAdd(4 * D + 2 * F, D, &total) && MulAdd(1, 9 * D + F, &total);
    }
    return ok ? total : -1;
  }
  const int64_t q_dim = num_heads * head_dim;
  const int64_t kv_dim = num_kv_heads * head_dim;
  int64_t attention = 0;  // per layer
  bool ok = true;
  if (is_mla()) {
    const MlaConfig& m = mla;
    if (m.q_lora_rank > 0) {  // attn_q_a, its norm, attn_q_b
      ok = MulAdd(m.q_lora_rank, hidden_dim + 1, &attention) &&
           MulAdd(q_dim, m.q_lora_rank, &attention);
    } else {
      ok = MulAdd(q_dim, hidden_dim, &attention);
    }
    ok = ok && MulAdd(m.kv_lora_rank + m.qk_rope_head_dim, hidden_dim, &attention) &&  // kv_a
         MulAdd(1, m.kv_lora_rank, &attention) &&                                       // norm
         MulAdd(num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank,
                &attention) &&                                                          // kv_b
         MulAdd(hidden_dim, num_heads * m.v_head_dim, &attention);                     // wo
  } else {
    ok = MulAdd(q_dim, hidden_dim, &attention) && MulAdd(2 * kv_dim, hidden_dim, &attention) &&
         MulAdd(hidden_dim, q_dim, &attention);
    if (qkv_bias) ok = ok && MulAdd(1, q_dim + 2 * kv_dim, &attention);
  }
  int64_t dense_ffn = 0, moe_ffn = 0;
  ok = ok && MulAdd(3 * ffn_dim, hidden_dim, &dense_ffn);
  if (is_moe()) {
    ok = ok && MulAdd(3 * moe.expert_ffn_dim, hidden_dim * moe.num_experts, &moe_ffn) &&
         MulAdd(3 * moe.expert_ffn_dim * moe.num_shared_experts, hidden_dim, &moe_ffn) &&
         MulAdd(moe.num_experts, hidden_dim, &moe_ffn) &&  // router
         MulAdd(moe.selection_bias ? 1 : 0, moe.num_experts, &moe_ffn);
  }
  for (int64_t l = 0; ok && l < num_layers; ++l) {
    ok = MulAdd(1, 2 * hidden_dim + attention, &total) &&  // norms + attention
         MulAdd(1, moe.IsMoeLayer(l) ? moe_ffn : dense_ffn, &total);
  }
  ok = ok && MulAdd(vocab_size, hidden_dim, &total) &&
       (tied_embeddings || MulAdd(vocab_size, hidden_dim, &total)) &&
       MulAdd(1, hidden_dim, &total);
  return ok ? total : -1;
}

}  // namespace kvserve
