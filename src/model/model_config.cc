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

}  // namespace

Status ModelConfig::Validate() const {
  KV_RETURN_IF_ERROR(CheckRange("vocab_size", vocab_size, kMaxVocab));
  KV_RETURN_IF_ERROR(CheckRange("hidden_dim", hidden_dim, kMaxHidden));
  KV_RETURN_IF_ERROR(CheckRange("ffn_dim", ffn_dim, kMaxFfn));
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
  if (NumParameters() < 0) {
    return InvalidArgumentError("model config: parameter count overflows");
  }
  return OkStatus();
}

int64_t ModelConfig::NumParameters() const {
  int64_t total = 0;
  const int64_t q_dim = num_heads * head_dim;
  const int64_t kv_dim = num_kv_heads * head_dim;
  int64_t per_layer = 0;
  bool ok = MulAdd(1, 2 * hidden_dim, &per_layer) &&   // attn_norm + ffn_norm
            MulAdd(q_dim, hidden_dim, &per_layer) &&    // wq
            MulAdd(2 * kv_dim, hidden_dim, &per_layer) &&  // wk, wv
            MulAdd(hidden_dim, q_dim, &per_layer) &&    // wo
            MulAdd(3 * ffn_dim, hidden_dim, &per_layer);  // gate, up, down
  if (qkv_bias) ok = ok && MulAdd(1, q_dim + 2 * kv_dim, &per_layer);
  ok = ok && MulAdd(vocab_size, hidden_dim, &total) &&
       (tied_embeddings || MulAdd(vocab_size, hidden_dim, &total)) &&
       MulAdd(num_layers, per_layer, &total) && MulAdd(1, hidden_dim, &total);
  return ok ? total : -1;
}

}  // namespace kvserve
