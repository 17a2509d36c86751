// DeepSeek Multi-head Latent Attention, one layer. Per token the layer projects
//   q        = attn_q(x)  or  attn_q_b(rmsnorm(attn_q_a(x)))          [heads, nope + rope]
//   [c, kr]  = attn_kv_a_mqa(x);  c = rmsnorm(c, attn_kv_a_norm)     [kv_lora + rope]
// and rotates the RoPE parts (q's last `rope` values per head, and kr, one key for all heads).
// The cache keeps the latent row [c, kr]. Head h's key is [W_UK[h] c, kr] and its value
// W_UV[h] c, where attn_kv_b = [W_UK[0]; W_UV[0]; W_UK[1]; ...] ([heads * (nope + v), kv_lora]).
//
// Attention runs in the absorbed form (DeepSeek-V2 paper, section 2.1.3; FlashMLA): the query
// is moved into the latent space, q_abs[h] = [W_UK[h]^T q_nope[h], q_rope[h]], so that
// q_abs[h] . [c, kr] = q[h] . key[h]; attention over the latent rows (multi-query: one "KV
// head" of kv_lora + rope values, values = the rows' first kv_lora channels) gives o[h] in the
// latent space, and the head's output is W_UV[h] o[h]. Only the latent cache is read: the
// per-head keys and values are never formed. ReferenceAttention forms them (the naive path the
// absorbed one is tested against).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "tensor/tensor.h"

namespace kvserve {

// Owns per-head views of the layer's weights (the tensors belong to the LoadedModel) and
// scratch. Not thread-safe (one call at a time); immutable weights after Load.
class MlaLayer {
 public:
  // Finds and checks blk.N.{attn_q | attn_q_a, attn_q_a_norm, attn_q_b}, attn_kv_a_mqa,
  // attn_kv_a_norm and attn_kv_b (or its split form attn_k_b [heads, kv_lora, nope] and
  // attn_v_b [heads, v, kv_lora]); builds the per-head absorption matrices, and with
  // `expansion` the [heads * (nope + v), kv_lora] matrix ExpandKeysValues uses.
  Status Load(const ModelConfig& config, LoadedModel& model, int64_t layer,
              int64_t* packed_bytes, bool expansion = false);

  int64_t latent_row_dim() const { return kv_lora_ + rope_; }   // cached values per token
  int64_t query_dim() const { return heads_ * (nope_ + rope_); }  // q per token
  int64_t absorbed_query_dim() const { return heads_ * latent_row_dim(); }
  int64_t output_dim() const { return heads_ * v_dim_; }        // attn_output's input
  // The softmax scale of both forms: 1 / sqrt(nope + rope), times YaRN's mscale^2.
  float softmax_scale() const { return softmax_scale_; }

  // x [n, D] (normed) -> q [n, query_dim] and latent rows [n, latent_row_dim], RoPE applied
  // at `positions` with cos_sin rows (RopeCosSin of each position over inv_freqs).
  void Project(const float* x, int64_t n, const int64_t* positions, const float* cos_sin,
               const std::vector<float>& inv_freqs, RopeLayout layout, float* q, float* latent,
               ThreadPool* pool);
  // q [n, query_dim] -> q_abs [n, absorbed_query_dim].
  void AbsorbQuery(const float* q, int64_t n, float* q_abs, ThreadPool* pool);
  // Latent-space attention outputs o [n, heads, latent_row_dim] (their first kv_lora values
  // per head are used) -> out [n, output_dim].
  void ExpandOutput(const float* o, int64_t n, float* out, ThreadPool* pool);

  // The expanded cache (LlamaModel::Options::mla_expanded_kv): latent rows [n, latent_row_dim]
  // -> every head's key k [n, heads, nope + rope] = [W_UK[h] c, kr] and value v [n, heads,
  // nope + rope] = [W_UV[h] c, zeros] (padded to the key width). Needs Load(..., expansion).
  void ExpandKeysValues(const float* latents, int64_t n, float* k, float* v, ThreadPool* pool);
  // Per-head outputs at the key width [n, heads, nope + rope] -> out [n, output_dim].
  void CompactHeadOutputs(const float* o, int64_t n, float* out) const;

  // The naive form, in double precision: per-head keys and values expanded from the latent
  // rows latents[0 .. num_keys), causal attention of the n queries q (at positions num_keys -
  // n ...) over them, out [n, output_dim].
  void ReferenceAttention(const float* q, int64_t n, const float* latents, int64_t num_keys,
                          float* out) const;

 private:
  int64_t hidden_ = 0, heads_ = 0, nope_ = 0, rope_ = 0, v_dim_ = 0, kv_lora_ = 0, q_lora_ = 0;
  float norm_eps_ = 1e-6f;
  float softmax_scale_ = 1.0f;
  const Tensor* wq_ = nullptr;    // [heads * (nope + rope), D], or null with q LoRA
  const Tensor* wq_a_ = nullptr;  // [q_lora, D]
  const Tensor* wq_b_ = nullptr;  // [heads * (nope + rope), q_lora]
  std::vector<float> q_a_norm_;   // [q_lora]
  const Tensor* wkv_a_ = nullptr;  // [kv_lora + rope, D]
  std::vector<float> kv_a_norm_;   // [kv_lora]
  std::vector<Tensor> k_absorb_;   // per head [kv_lora, nope]: W_UK[h]^T (f32 or the file's)
  std::vector<Tensor> v_up_;       // per head [v, kv_lora]: W_UV[h]
  Tensor kv_b_;                    // [heads * (nope + v), kv_lora], with expansion only
  // Scratch.
  std::vector<float> q_lora_rows_, head_in_, head_out_, expanded_;
};

}  // namespace kvserve
