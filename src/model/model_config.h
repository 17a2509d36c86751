// ModelConfig: the hyper-parameters of a decoder (Llama family, and DeepSeek V2/V3 with
// Multi-head Latent Attention and mixture-of-experts layers), whatever file they came from.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kernels/kernels.h"

namespace kvserve {

// DeepSeek Multi-head Latent Attention (on when kv_lora_rank > 0). Per token and layer the
// cache holds the compressed latent c (kv_lora_rank values, after attn_kv_a_norm) and one RoPE
// key shared by all heads (qk_rope_head_dim values); head h's key is [W_UK[h] c, k_rope] and
// its value W_UV[h] c.
struct MlaConfig {
  int64_t q_lora_rank = 0;       // 0: attn_q without low-rank compression (V2-Lite)
  int64_t kv_lora_rank = 0;      // the latent's width
  int64_t qk_nope_head_dim = 0;  // per-head key/query part without RoPE
  int64_t qk_rope_head_dim = 0;  // per-head query RoPE part; the shared RoPE key's width
  int64_t v_head_dim = 0;        // per-head value width
  // How the file stores W_UK and W_UV: true, split per head as attn_k_b [heads, kv_lora, nope]
  // (W_UK[h]^T) and attn_v_b [heads, v, kv_lora] (llama.cpp's MLA files since b5137, what
  // kvserve writes); false, together as attn_kv_b [heads * (nope + v), kv_lora] (HF kv_b_proj,
  // older GGUF files). The model runs the absorbed form from either.
  bool split_kv_b = false;
  // YaRN's attention factor as DeepSeek applies it to the softmax scale: 1 / sqrt(head_dim)
  // times mscale^2, mscale = 1 + 0.1 * yarn_log_multiplier * ln(rope scaling factor).
  float yarn_log_multiplier = 0.0f;
};

// How a mixture-of-experts router turns its logits into expert weights.
enum class ExpertGating {
  kSoftmax,  // DeepSeek V2, Mixtral: softmax over all experts, top-k of the probabilities
  kSigmoid,  // DeepSeek V3: sigmoid per expert; top-k of sigmoid + selection bias
};
const char* ExpertGatingName(ExpertGating gating);

// Mixture-of-experts feed-forward layers (on when num_experts > 0). Layer l uses experts when
// l >= first_dense_layers; earlier layers are dense SwiGLU of ModelConfig::ffn_dim.
struct MoeConfig {
  int64_t num_experts = 0;         // routed experts per MoE layer
  int64_t num_experts_used = 0;    // top-k routed experts per token
  int64_t num_shared_experts = 0;  // always-on experts, one SwiGLU of that many times the width
  int64_t expert_ffn_dim = 0;      // each expert's inner width
  int64_t first_dense_layers = 0;  // GGUF leading_dense_block_count, HF first_k_dense_replace
  ExpertGating gating = ExpertGating::kSoftmax;
  // exp_probs_b (V3 "noaux_tc"): a per-expert bias added to the gate scores for selection only;
  // the weights are the unbiased scores.
  bool selection_bias = false;
  bool normalize_weights = false;  // the selected weights are divided by their sum
  float weights_scale = 1.0f;      // routed_scaling_factor, applied after normalization
  // Group-limited routing (V3): experts form num_groups equal groups; a group scores the sum
  // of its two best selection scores and only the best num_groups_used groups are eligible.
  int64_t num_groups = 1;
  int64_t num_groups_used = 1;

  bool is_moe_model() const { return num_experts > 0; }
  bool IsMoeLayer(int64_t layer) const { return num_experts > 0 && layer >= first_dense_layers; }
};

// How an encoder turns its sequence's rows into one embedding (GGUF <arch>.pooling_type, the
// values of llama.cpp's enum).
enum class PoolingType { kNone = 0, kMean = 1, kCls = 2, kLast = 3 };
const char* PoolingTypeName(PoolingType pooling);  // "none", "mean", "cls", "last"

// A field added here that changes the KV a model computes (for a given prompt) must also be
// hashed into KvTierFingerprint (runtime/kv_tiers_setup.cc), or the disk and Redis tiers could
// serve KV computed under the old setting.
struct ModelConfig {
  std::string architecture = "llama";  // GGUF general.architecture: llama, qwen2, mistral, bert
  std::string name;                    // general.name or the file name
  int64_t vocab_size = 0;
  int64_t hidden_dim = 0;        // embedding width (llama2.c `dim`)
  int64_t ffn_dim = 0;           // SwiGLU inner width (llama2.c `hidden_dim`)
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;          // usually hidden_dim / num_heads
  int64_t max_seq_len = 0;       // context length the model was trained for
  float norm_eps = 1e-5f;
  RopeOptions rope;              // head_dim, theta, layout, scaling
  bool tied_embeddings = false;  // output projection shares token_embd
  bool qkv_bias = false;         // Qwen2
  // DeepSeek V2/V3 (architecture deepseek2). For MLA models head_dim is the query/key head
  // (qk_nope_head_dim + qk_rope_head_dim), num_kv_heads equals num_heads (each head has its
  // own key and value once expanded) and rope.rotary_dim is qk_rope_head_dim.
  MlaConfig mla;
  MoeConfig moe;
  // Encoders (architecture bert: all-MiniLM, bge, e5, gte). norm_eps is then LayerNorm's eps;
  // the layers have biases, a GELU FFN and post-LN (model/bert.h).
  PoolingType pooling = PoolingType::kNone;
  bool causal = true;            // bert.attention.causal (encoders: false)
  int64_t token_type_count = 0;  // rows of token_types (BERT: 2)

  bool is_encoder() const { return architecture == "bert"; }

  bool is_mla() const { return mla.kv_lora_rank > 0; }
  bool is_moe() const { return moe.num_experts > 0; }

  // Checks positivity, divisibility (heads by kv heads), and sizes that would overflow.
  Status Validate() const;
  // Parameter count implied by the shapes (embeddings counted once when tied).
  int64_t NumParameters() const;
};

}  // namespace kvserve
