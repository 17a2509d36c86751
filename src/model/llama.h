// LlamaModel: the forward pass of the decoders kvserve runs: the Llama family (Llama 1/2/3,
// Mistral, Qwen2 with qkv bias; MHA and GQA) and DeepSeek V2/V3 (Multi-head Latent Attention,
// model/mla_attention.h, and mixture-of-experts layers, model/moe.h), on the CPU kernels. One
// class and one layer loop for all: the layers differ only in their attention and FFN blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_spec.h"
#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "model/mla_attention.h"
#include "model/model_loader.h"
#include "model/moe.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// Dense per-sequence KV cache: for K and V, [num_layers][max_tokens][num_kv_heads * head_dim]
// float32 (MLA models: the latent rows [kv_lora_rank + qk_rope_head_dim] in K; V unused). Owns its storage (allocated once at creation). Not thread-safe.
// Invariant: 0 <= num_tokens() <= max_tokens(); rows [0, num_tokens) of every layer hold the
// keys/values of positions 0 .. num_tokens - 1 (keys already rotated by RoPE).
class DenseKvCache {
 public:
  DenseKvCache(int64_t num_layers, int64_t max_tokens, int64_t kv_dim);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  // Forgets every position (storage is kept).
  void Clear() { num_tokens_ = 0; }
  // Forgets positions >= num_tokens (to re-run a suffix); num_tokens must not exceed the
  // current count.
  void Truncate(int64_t num_tokens);

  // [max_tokens, kv_dim] rows of one layer.
  float* k(int64_t layer) { return k_.data() + layer * max_tokens_ * kv_dim_; }
  float* v(int64_t layer) { return v_.data() + layer * max_tokens_ * kv_dim_; }
  const float* k(int64_t layer) const { return k_.data() + layer * max_tokens_ * kv_dim_; }
  const float* v(int64_t layer) const { return v_.data() + layer * max_tokens_ * kv_dim_; }

 private:
  friend class LlamaModel;
  int64_t num_layers_;
  int64_t max_tokens_;
  int64_t kv_dim_;
  int64_t num_tokens_ = 0;
  std::vector<float> k_;
  std::vector<float> v_;
};

// Token eviction's attention statistics wanted from one sequence of a paged Forward (H2O's
// accumulated mass, SnapKV's observation-window votes). Plain value type; `mass` is the
// caller's.
struct AttentionMassRequest {
  int64_t seq = 0;          // the sequence's index in the batch
  int64_t first_row = 0;    // the first of its new tokens (0-based) whose attention is added
  float* mass = nullptr;    // [num_layers, num_kv_heads, mass_stride], added to: layer l, KV
                            // head h, slot t gets the softmax weights t received from those
                            // rows, summed over rows and the head's GQA group
  int64_t mass_stride = 0;  // >= the sequence's seq_len
};

// Owns the loaded weights (a LoadedModel) and a scratch workspace that grows to the largest
// batch seen (so decode steps allocate nothing). Not thread-safe: one Forward at a time.
// Two forward paths share every layer computation and differ only in where K/V go:
//   Forward(ForwardBatch, KvStorage)  the serving path: many sequences, paged (quantized) KV;
//   Forward(tokens, DenseKvCache)     one sequence, dense float KV: the reference the paged
//                                     path is tested against.
class LlamaModel {
 public:
  struct Options {
    // MLA models: cache every head's expanded key and value (the MHA-equivalent cache, values
    // zero-padded to the key width; what an engine without absorption keeps) instead of the
    // latent rows, and attend over them. For measuring what absorption saves; off by default.
    bool mla_expanded_kv = false;
  };
  // Checks every tensor's presence, shape and dtype against the config; Status on mismatch.
  static StatusOr<std::unique_ptr<LlamaModel>> Create(LoadedModel model);
  static StatusOr<std::unique_ptr<LlamaModel>> Create(LoadedModel model, const Options& options);
  const Options& options() const { return options_; }

  const ModelConfig& config() const { return model_.config; }
  const LoadedModel& loaded() const { return model_; }
  // Bytes of the matmul weights repacked at load for this CPU's kernel (Tensor::packed), held
  // besides the file's weights.
  int64_t packed_weights_bytes() const { return packed_weights_bytes_; }
  // Bytes of the file's weights that nothing reads after load: matrices whose packed copy is
  // all Matmul reads at this level (kernels::PackedReplacesWeights; not the embedding table,
  // which lookups read). Their pages stay mapped but, once evicted, are never paged in again,
  // so the KV budget does not reserve memory for them.
  int64_t replaced_weights_bytes() const { return replaced_weights_bytes_; }
  std::unique_ptr<DenseKvCache> NewCache(int64_t max_tokens) const;
  // The KV cache geometry of this model for a dtype and block size.
  KvCacheSpec kv_spec(DType dtype, int64_t block_size) const;

  // Runs every sequence of `batch` in one pass: weight products once over all rows, each
  // token's K/V written to its slot of `kv` (converted to the storage dtype), attention per
  // sequence through the paged kernels. Writes batch.num_logits() rows of vocab_size logits
  // to `logits` (row-major, in logits_indices order). Errors (Status, nothing written to
  // logits) when the batch is malformed, a token id is out of range, or `kv` was made for
  // another geometry. `mass`: attention statistics to add for some sequences (at most one
  // request per sequence; kernels::PagedAttentionWithMass, outputs unchanged by them).
  Status Forward(const ForwardBatch& batch, KvStorage* kv, ThreadPool* pool, float* logits,
                 std::span<const AttentionMassRequest> mass = {});

  // StreamingLLM's positions within the cache: re-rotates the stored keys of `slots` (every
  // layer) by deltas[i] positions (RoPE angles add, so a key stored for position p becomes the
  // key of position p + deltas[i], up to rounding). Keys are de-normalized (channel
  // normalization), rotated, and written back through KvStorage::Write (normalized and
  // quantized again; values are rewritten unchanged up to their dtype's rounding). Errors
  // when `kv` was made for another geometry or fp8 storage has no scales.
  Status ShiftStoredKeys(KvStorage* kv, const int64_t* slots, const int64_t* deltas,
                         int64_t num_slots);

  // Runs `tokens` at positions cache->num_tokens() ... as one batch and appends their K/V.
  // Writes vocab_size logits for the last token to `logits` (or for every token, row-major
  // [tokens.size(), vocab_size], if all_logits). Errors (Status) when `tokens` is empty, the
  // cache would overflow, the cache has another geometry, or a token id is out of range; the
  // cache is unchanged then.
  // attention_mass (optional): the reference for the paged path's AttentionMassRequest, in
  // double precision (ReferenceAttentionWeights): sized [num_layers, num_kv_heads,
  // cache->max_tokens()] (zeros) when it is not, then every row of this call adds the softmax
  // weight each key received, summed over the KV head's GQA group.
  Status Forward(const std::vector<TokenId>& tokens, DenseKvCache* cache, ThreadPool* pool,
                 float* logits, bool all_logits = false,
                 std::vector<float>* attention_mass = nullptr);

 private:
  struct Layer {
    const Tensor* attn_norm = nullptr;
    const Tensor* wq = nullptr;
    const Tensor* wk = nullptr;
    const Tensor* wv = nullptr;
    const Tensor* wo = nullptr;
    const Tensor* ffn_norm = nullptr;
    const Tensor* w_gate = nullptr;
    const Tensor* w_up = nullptr;
    const Tensor* w_down = nullptr;
    // Float32 copies of the small vectors (norm weights and biases may be stored as f16/bf16).
    std::vector<float> attn_norm_f32, ffn_norm_f32;
    std::vector<float> q_bias, k_bias, v_bias;  // empty without qkv_bias
    std::unique_ptr<MlaLayer> mla;  // MLA models: replaces wq, wk, wv
    std::unique_ptr<MoeLayer> moe;  // MoE layers: replaces w_gate, w_up, w_down
  };

  LlamaModel(LoadedModel model, const Options& options)
      : model_(std::move(model)), options_(options) {}
  // Values per token and layer in a paged cache row (all KV heads; MLA: the latent row, or the
  // expanded heads with Options::mla_expanded_kv).
  int64_t paged_kv_row_dim() const;
  Status Init();
  void EnsureWorkspace(int64_t num_tokens);
  Status CheckTokens(const TokenId* tokens, int64_t n) const;
  // The dense path's reference attention mass of one layer (Forward's attention_mass): rows
  // cache.num_tokens() .. num_keys - 1 (queries q, as attention got them) over the cache's keys.
  void AddReferenceMass(int64_t layer, const float* q, const DenseKvCache& cache,
                        int64_t num_keys, std::vector<float>* mass) const;
  // Attention of one layer: given q [n, heads*hd] and this step's k, v [n, kv_dim] (rotated),
  // stores k, v wherever the cache keeps them and writes attn [n, heads*hd].
  // q may be modified (the paged path scales it by the keys' channel normalization).
  using AttendFn = std::function<void(int64_t layer, float* q, const float* k,
                                      const float* v, float* attn)>;
  // MLA's naive reference attention (the dense path): given the unabsorbed q [n, heads *
  // head_dim] (rotated) and the layer's latent rows, writes the heads' outputs [n, heads *
  // v_head_dim].
  using MlaReferenceFn = std::function<void(int64_t layer, const float* q, float* out)>;
  // The decoder stack over n tokens at `positions`; k_rows(layer) gives where the layer's K
  // and V rows are computed (a cache or the workspace; MLA: the latent rows, in K). Leaves the
  // final residual in x_. MLA layers attend in the absorbed form through `attend` (q: the
  // absorbed queries [n, heads, latent row], k: the latent rows, v: null, attn: [n, heads,
  // latent row]), or through mla_reference when it is set.
  void RunLayers(const TokenId* tokens, const int64_t* positions, int64_t n,
                 const std::function<std::pair<float*, float*>(int64_t layer)>& kv_rows,
                 const AttendFn& attend, ThreadPool* pool,
                 const MlaReferenceFn* mla_reference = nullptr);
  // The KV geometry check of both Forward paths.
  bool MatchesKvSpec(const KvCacheSpec& spec) const;
  // Final norm and output projection of the residual rows `rows` (num_rows of them).
  void ComputeLogits(const int64_t* rows, int64_t num_rows, float* logits, ThreadPool* pool);

  LoadedModel model_;
  Options options_;
  std::vector<Layer> layers_;
  const Tensor* token_embd_ = nullptr;
  const Tensor* output_ = nullptr;  // output.weight, or token_embd when tied
  std::vector<float> output_norm_f32_;
  std::vector<float> inv_freqs_;
  int64_t packed_weights_bytes_ = 0;    // Tensor::packed copies made by Init()
  int64_t replaced_weights_bytes_ = 0;  // see replaced_weights_bytes()

  // Workspace, sized for `workspace_tokens_` rows.
  int64_t workspace_tokens_ = 0;
  std::vector<float> x_;       // [n, hidden] residual stream
  std::vector<float> xb_;      // [n, hidden] normed input / attention projection output
  std::vector<float> q_;       // [n, heads * head_dim]
  std::vector<float> attn_;    // [n, heads * head_dim]
  std::vector<float> gate_;    // [n, ffn]
  std::vector<float> up_;      // [n, ffn]
  std::vector<float> k_;       // [n, kv_dim] paged path: this step's keys before storing
  std::vector<float> v_;       // [n, kv_dim]
  std::vector<float> q_abs_;   // MLA: [n, heads, latent row] absorbed queries
  std::vector<float> o_abs_;   // MLA: [n, heads, latent row] attention in the latent space
                               // (mla_expanded_kv: [n, heads, head_dim] the heads' outputs)
  std::vector<float> ffn_out_;  // MoE: [n, hidden]
  std::vector<float> latent_;   // MLA with mla_expanded_kv: [n, latent row] before expansion
  std::vector<int64_t> positions_;  // [n] dense path
  std::vector<float> rope_cos_sin_;  // [n, rotary_dim]: RopeCosSin of each row (cos, sin)
};

}  // namespace kvserve
