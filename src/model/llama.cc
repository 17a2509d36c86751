#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"
#include "kernels/kernels.h"
#include "kernels/paged_attention.h"
#include "kv/token_eviction.h"
#include "model/model_tensors.h"
#include "model/row_ops.h"

namespace kvserve {

DenseKvCache::DenseKvCache(int64_t num_layers, int64_t max_tokens, int64_t kv_dim)
    : num_layers_(num_layers), max_tokens_(max_tokens), kv_dim_(kv_dim) {
  KV_CHECK(num_layers > 0 && max_tokens > 0 && kv_dim > 0)
      << "num_layers=" << num_layers << " max_tokens=" << max_tokens << " kv_dim=" << kv_dim;
  const size_t n = static_cast<size_t>(num_layers * max_tokens * kv_dim);
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

void DenseKvCache::Truncate(int64_t num_tokens) {
  KV_CHECK(num_tokens >= 0 && num_tokens <= num_tokens_)
      << "num_tokens=" << num_tokens << " current=" << num_tokens_;
  num_tokens_ = num_tokens;
}

namespace {

// Values per token and layer in a cache row: K (or V) of every KV head, or the MLA latent row.
int64_t KvRowDim(const ModelConfig& c) {
  return c.is_mla() ? c.mla.kv_lora_rank + c.mla.qk_rope_head_dim : c.num_kv_heads * c.head_dim;
}

// The width of attention's output (attn_output's input).
int64_t AttnOutDim(const ModelConfig& c) {
  return c.num_heads * (c.is_mla() ? c.mla.v_head_dim : c.head_dim);
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(LoadedModel model) {
  return Create(std::move(model), Options{});
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(LoadedModel model,
                                                         const Options& options) {
  std::unique_ptr<LlamaModel> m(new LlamaModel(std::move(model), options));
  KV_RETURN_IF_ERROR(m->Init());
  return m;
}

Status LlamaModel::Init() {
  const ModelConfig& c = model_.config;
  if (c.is_encoder()) {
    return InvalidArgumentError("'" + c.name + "' is an embedding model (" + c.architecture +
                                "): it makes embeddings, not text (kvserve embed)");
  }
  KV_RETURN_IF_ERROR(c.Validate());
  const int64_t D = c.hidden_dim, V = c.vocab_size, F = c.ffn_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;

  KV_ASSIGN_OR_RETURN(token_embd_, FindModelTensor(model_, "token_embd.weight", {V, D}, true));
  if (model_.tensors.count("output.weight")) {
    KV_ASSIGN_OR_RETURN(output_, FindModelTensor(model_, "output.weight", {V, D}, true));
  } else if (c.tied_embeddings) {
    output_ = token_embd_;
  } else {
    return NotFoundError("model is missing tensor 'output.weight' and its embeddings are not tied");
  }
  KV_ASSIGN_OR_RETURN(output_norm_f32_, FindModelVector(model_, "output_norm.weight", D));

  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& layer = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    KV_ASSIGN_OR_RETURN(layer.attn_norm_f32, FindModelVector(model_, p + "attn_norm.weight", D));
    KV_ASSIGN_OR_RETURN(layer.ffn_norm_f32, FindModelVector(model_, p + "ffn_norm.weight", D));
    if (c.is_mla()) {
      layer.mla = std::make_unique<MlaLayer>();
      KV_RETURN_IF_ERROR(layer.mla->Load(c, model_, l, &packed_weights_bytes_,
                                         options_.mla_expanded_kv));
    } else {
      KV_ASSIGN_OR_RETURN(layer.wq, FindModelTensor(model_, p + "attn_q.weight", {q_dim, D}, true));
      KV_ASSIGN_OR_RETURN(layer.wk, FindModelTensor(model_, p + "attn_k.weight", {kv_dim, D}, true));
      KV_ASSIGN_OR_RETURN(layer.wv, FindModelTensor(model_, p + "attn_v.weight", {kv_dim, D}, true));
    }
    KV_ASSIGN_OR_RETURN(layer.wo,
                        FindModelTensor(model_, p + "attn_output.weight", {D, AttnOutDim(c)}, true));
    if (c.moe.IsMoeLayer(l)) {
      layer.moe = std::make_unique<MoeLayer>();
      KV_RETURN_IF_ERROR(layer.moe->Load(c, model_, l, &packed_weights_bytes_));
    } else {
      KV_ASSIGN_OR_RETURN(layer.w_gate, FindModelTensor(model_, p + "ffn_gate.weight", {F, D}, true));
      KV_ASSIGN_OR_RETURN(layer.w_up, FindModelTensor(model_, p + "ffn_up.weight", {F, D}, true));
      KV_ASSIGN_OR_RETURN(layer.w_down, FindModelTensor(model_, p + "ffn_down.weight", {D, F}, true));
    }
    if (c.qkv_bias) {
      KV_ASSIGN_OR_RETURN(layer.q_bias, FindModelVector(model_, p + "attn_q.bias", q_dim));
      KV_ASSIGN_OR_RETURN(layer.k_bias, FindModelVector(model_, p + "attn_k.bias", kv_dim));
      KV_ASSIGN_OR_RETURN(layer.v_bias, FindModelVector(model_, p + "attn_v.bias", kv_dim));
    }
  }
  RopeOptions rope = c.rope;
  rope.head_dim = c.head_dim;
  inv_freqs_ = RopeInvFreqs(rope);

  // Matmul weights repacked once for this CPU's kernel (q8_0 panels at AVX-512 VNNI), instead
  // of on every batched call: 7% of a 32-sequence decode step went to repacking.
  std::vector<const Tensor*> matrices = {output_};
  for (const Layer& layer : layers_) {  // (null entries of MLA and MoE layers match nothing)
    matrices.insert(matrices.end(), {layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate,
                                     layer.w_up, layer.w_down});
  }
  for (auto& [name, tensor] : model_.tensors) {
    if (std::find(matrices.begin(), matrices.end(), &tensor) == matrices.end()) continue;
    tensor.packed = kernels::PackMatmulWeights(tensor);
    if (tensor.packed != nullptr) {
      packed_weights_bytes_ += kernels::PackedMatmulWeightsBytes(tensor);
      if (&tensor != token_embd_ && kernels::PackedReplacesWeights(tensor)) {
        replaced_weights_bytes_ += tensor.num_bytes();
      }
    }
  }
  return OkStatus();
}

std::unique_ptr<DenseKvCache> LlamaModel::NewCache(int64_t max_tokens) const {
  const ModelConfig& c = model_.config;
  return std::make_unique<DenseKvCache>(c.num_layers, max_tokens, KvRowDim(c));
}

int64_t LlamaModel::paged_kv_row_dim() const {
  const ModelConfig& c = model_.config;
  return c.is_mla() && options_.mla_expanded_kv ? c.num_heads * c.head_dim : KvRowDim(c);
}

KvCacheSpec LlamaModel::kv_spec(DType dtype, int64_t block_size) const {
  const ModelConfig& c = model_.config;
  if (c.is_mla() && !options_.mla_expanded_kv) {
    return KvCacheSpec::MlaLatent(c.num_layers, c.mla.kv_lora_rank, c.mla.qk_rope_head_dim,
                                  dtype, block_size);
  }
  KvCacheSpec spec;
  spec.layout = KvLayout::kSeparateKv;
  spec.num_layers = c.num_layers;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.dtype = dtype;
  spec.block_size = block_size;
  return spec;
}

bool LlamaModel::MatchesKvSpec(const KvCacheSpec& spec) const {
  const KvCacheSpec want = kv_spec(spec.dtype, spec.block_size);
  return spec.layout == want.layout && spec.num_layers == want.num_layers &&
         spec.num_kv_heads == want.num_kv_heads && spec.head_dim == want.head_dim &&
         spec.latent_dim == want.latent_dim && spec.rope_dim == want.rope_dim;
}

void LlamaModel::EnsureWorkspace(int64_t num_tokens) {
  if (num_tokens <= workspace_tokens_) return;
  const ModelConfig& c = model_.config;
  const size_t n = static_cast<size_t>(num_tokens);
  const size_t q_dim = static_cast<size_t>(c.num_heads * c.head_dim);
  const size_t kv_dim = static_cast<size_t>(std::max(KvRowDim(c), paged_kv_row_dim()));
  x_.resize(n * static_cast<size_t>(c.hidden_dim));
  xb_.resize(n * static_cast<size_t>(c.hidden_dim));
  q_.resize(n * q_dim);
  attn_.resize(n * std::max(q_dim, static_cast<size_t>(AttnOutDim(c))));
  if (c.is_mla() && !options_.mla_expanded_kv) {  // per head, a latent row of each
    const size_t latent_heads = static_cast<size_t>(c.num_heads * KvRowDim(c));
    q_abs_.resize(n * latent_heads);
    o_abs_.resize(n * latent_heads);
  } else if (c.is_mla()) {
    latent_.resize(n * static_cast<size_t>(KvRowDim(c)));
    o_abs_.resize(n * q_dim);  // the heads' outputs at the key width
  }
  if (c.is_moe()) ffn_out_.resize(n * static_cast<size_t>(c.hidden_dim));
  gate_.resize(n * static_cast<size_t>(c.ffn_dim));
  up_.resize(n * static_cast<size_t>(c.ffn_dim));
  k_.resize(n * kv_dim);
  v_.resize(n * kv_dim);
  positions_.resize(n);
  rope_cos_sin_.resize(n * 2 * inv_freqs_.size());
  workspace_tokens_ = num_tokens;
}

Status LlamaModel::CheckTokens(const TokenId* tokens, int64_t n) const {
  const int64_t V = model_.config.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return OutOfRangeError("Forward: token id " + std::to_string(tokens[i]) +
                             " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  return OkStatus();
}

// Batches of at least this many rows run RoPE and SwiGLU on the thread pool.
constexpr int64_t kParallelRowsMin = 8;

void LlamaModel::RunLayers(const TokenId* tokens, const int64_t* positions, int64_t n,
                           const std::function<std::pair<float*, float*>(int64_t)>& kv_rows,
                           const AttendFn& attend, ThreadPool* pool,
                           const MlaReferenceFn* mla_reference) {
  const ModelConfig& c = model_.config;
  const int64_t D = c.hidden_dim, F = c.ffn_dim, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd;
  const int64_t kv_dim = c.num_kv_heads * hd;
  EnsureWorkspace(n);
  float* x = x_.data();
  float* xb = xb_.data();
  float* q = q_.data();
  float* attn = attn_.data();
  float* gate = gate_.data();
  float* up = up_.data();

  for (int64_t i = 0; i < n; ++i) kernels::EmbeddingLookup(*token_embd_, tokens[i], x + i * D);
  // RoPE angles of each row, shared by every layer.
  const auto num_pairs = static_cast<int64_t>(inv_freqs_.size());
  for (int64_t i = 0; i < n; ++i) {
    kernels::RopeCosSin(positions[i], inv_freqs_, rope_cos_sin_.data() + i * 2 * num_pairs);
  }

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& layer = layers_[static_cast<size_t>(l)];
    auto [k_rows, v_rows] = kv_rows(l);  // [n, kv_dim] each

    kernels::RmsNorm(x, layer.attn_norm_f32.data(), n, D, c.norm_eps, xb);
    if (layer.mla != nullptr) {
      MlaLayer& mla = *layer.mla;
      mla.Project(xb, n, positions, rope_cos_sin_.data(), inv_freqs_, c.rope.layout, q, k_rows,
                  pool);
      if (mla_reference != nullptr) {
        (*mla_reference)(l, q, attn);
      } else if (options_.mla_expanded_kv) {
        // Overwrite the latent rows with the expanded heads (k_rows/v_rows have room for them).
        std::copy(k_rows, k_rows + n * KvRowDim(c), latent_.data());
        mla.ExpandKeysValues(latent_.data(), n, k_rows, v_rows, pool);
        attend(l, q, k_rows, v_rows, o_abs_.data());
        mla.CompactHeadOutputs(o_abs_.data(), n, attn);
      } else {
        mla.AbsorbQuery(q, n, q_abs_.data(), pool);
        attend(l, q_abs_.data(), k_rows, nullptr, o_abs_.data());
        mla.ExpandOutput(o_abs_.data(), n, attn, pool);
      }
    } else {
      kernels::MatmulGroup(xb, n, {{layer.wq, q}, {layer.wk, k_rows}, {layer.wv, v_rows}}, pool);
      if (c.qkv_bias) {
        AddBias(q, n, layer.q_bias);
        AddBias(k_rows, n, layer.k_bias);
        AddBias(v_rows, n, layer.v_bias);
      }
      auto rope_rows = [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const float* cos_sin = rope_cos_sin_.data() + i * 2 * num_pairs;
          kernels::Rope(q + i * q_dim, c.num_heads, hd, positions[i], inv_freqs_, cos_sin,
                        c.rope.layout);
          kernels::Rope(k_rows + i * kv_dim, c.num_kv_heads, hd, positions[i], inv_freqs_,
                        cos_sin, c.rope.layout);
        }
      };
      // Row-wise work between the matmuls runs on the pool for batches: at 32 decode rows the
      // serial parts of a step left the other threads waiting (~10% of its CPU time, perf).
      if (pool != nullptr && n >= kParallelRowsMin) {
        pool->ParallelFor(n, 4, rope_rows);
      } else {
        rope_rows(0, n);
      }
      attend(l, q, k_rows, v_rows, attn);
    }
    kernels::Matmul(attn, n, *layer.wo, xb, pool);
    AddInPlace(x, xb, n * D);

    kernels::RmsNorm(x, layer.ffn_norm_f32.data(), n, D, c.norm_eps, xb);
    if (layer.moe != nullptr) {
      layer.moe->Forward(xb, n, ffn_out_.data(), pool);
      AddInPlace(x, ffn_out_.data(), n * D);
      continue;
    }
    kernels::MatmulGroup(xb, n, {{layer.w_gate, gate}, {layer.w_up, up}}, pool);
    if (pool != nullptr && n >= kParallelRowsMin) {
      pool->ParallelFor(n, 4, [&](int64_t r0, int64_t r1) {
        kernels::SwiGlu(gate + r0 * F, up + r0 * F, (r1 - r0) * F, gate + r0 * F);
      });
    } else {
      kernels::SwiGlu(gate, up, n * F, gate);
    }
    kernels::Matmul(gate, n, *layer.w_down, xb, pool);
    AddInPlace(x, xb, n * D);
  }
}

void LlamaModel::ComputeLogits(const int64_t* rows, int64_t num_rows, float* logits,
                               ThreadPool* pool) {
  const ModelConfig& c = model_.config;
  const int64_t D = c.hidden_dim;
  // xb_ has room for every row of the step, and num_rows <= rows of the step.
  for (int64_t i = 0; i < num_rows; ++i) {
    kernels::RmsNorm(x_.data() + rows[i] * D, output_norm_f32_.data(), 1, D, c.norm_eps,
                     xb_.data() + i * D);
  }
  kernels::Matmul(xb_.data(), num_rows, *output_, logits, pool);
}

Status LlamaModel::Forward(const std::vector<TokenId>& tokens, DenseKvCache* cache,
                           ThreadPool* pool, float* logits, bool all_logits,
                           std::vector<float>* attention_mass) {
  const ModelConfig& c = model_.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t hd = c.head_dim;
  const int64_t kv_dim = KvRowDim(c);
  if (n == 0) return InvalidArgumentError("Forward: no tokens");
  if (c.is_mla() && attention_mass != nullptr) {
    return UnimplementedError("Forward: the reference attention mass of MLA models");
  }
  if (cache == nullptr || logits == nullptr) {
    return InvalidArgumentError("Forward: null cache or logits");
  }
  if (cache->num_layers() != c.num_layers || cache->kv_dim() != kv_dim) {
    return InvalidArgumentError("Forward: the KV cache was made for another model geometry");
  }
  const int64_t start = cache->num_tokens();
  if (n > cache->max_tokens() - start) {
    return OutOfRangeError("Forward: " + std::to_string(n) + " tokens at position " +
                           std::to_string(start) + " overflow the KV cache of " +
                           std::to_string(cache->max_tokens()) + " tokens");
  }
  KV_RETURN_IF_ERROR(CheckTokens(tokens.data(), n));
  EnsureWorkspace(n);
  for (int64_t i = 0; i < n; ++i) positions_[static_cast<size_t>(i)] = start + i;

  kernels::AttentionShape shape;
  shape.num_queries = n;
  shape.num_keys = start + n;
  shape.first_pos = start;
  shape.num_heads = c.num_heads;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = hd;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const MlaReferenceFn mla_reference = [&](int64_t l, const float* q, float* out) {
    layers_[static_cast<size_t>(l)].mla->ReferenceAttention(q, n, cache->k(l), start + n, out);
  };
  RunLayers(
      tokens.data(), positions_.data(), n,
      [&](int64_t l) {
        return std::make_pair(cache->k(l) + start * kv_dim, cache->v(l) + start * kv_dim);
      },
      [&](int64_t l, float* q, const float*, const float*, float* attn) {
        kernels::DenseAttention(q, cache->k(l), cache->v(l), shape, attn, pool);
        if (attention_mass != nullptr) AddReferenceMass(l, q, *cache, start + n, attention_mass);
      },
      pool, c.is_mla() ? &mla_reference : nullptr);
  cache->num_tokens_ = start + n;

  std::vector<int64_t> rows;
  if (all_logits) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(i);
  } else {
    rows.push_back(n - 1);
  }
  ComputeLogits(rows.data(), static_cast<int64_t>(rows.size()), logits, pool);
  return OkStatus();
}

void LlamaModel::AddReferenceMass(int64_t layer, const float* q, const DenseKvCache& cache,
                                  int64_t num_keys, std::vector<float>* mass) const {
  const ModelConfig& c = model_.config;
  const int64_t stride = cache.max_tokens();
  const size_t size = static_cast<size_t>(c.num_layers * c.num_kv_heads * stride);
  if (mass->size() != size) mass->assign(size, 0.0f);
  const int64_t first = cache.num_tokens();  // this call's rows are first .. num_keys - 1
  const int64_t num_rows = num_keys - first;
  std::vector<int64_t> positions(static_cast<size_t>(num_rows));
  for (int64_t i = 0; i < num_rows; ++i) positions[static_cast<size_t>(i)] = first + i;
  ReferenceAttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, num_keys, 0.0f};
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;
  const std::vector<float> weights = ReferenceAttentionWeights(
      {q, static_cast<size_t>(num_rows * c.num_heads * c.head_dim)},
      {cache.k(layer), static_cast<size_t>(num_keys * kv_dim)}, positions, shape);
  std::vector<float> layer_mass(static_cast<size_t>(c.num_kv_heads * num_keys), 0.0f);
  AccumulateAttentionMass(weights, c.num_heads, num_rows, c.num_kv_heads, layer_mass);
  for (int64_t h = 0; h < c.num_kv_heads; ++h) {
    float* out = mass->data() + (layer * c.num_kv_heads + h) * stride;
    for (int64_t t = 0; t < num_keys; ++t) out[t] += layer_mass[h * num_keys + t];
  }
}

Status LlamaModel::ShiftStoredKeys(KvStorage* kv, const int64_t* slots, const int64_t* deltas,
                                   int64_t num_slots) {
  const ModelConfig& c = model_.config;
  if (kv == nullptr) return InvalidArgumentError("ShiftStoredKeys: null KV storage");
  const KvCacheSpec& spec = kv->spec();
  if (!MatchesKvSpec(spec)) {
    return InvalidArgumentError("ShiftStoredKeys: the KV storage was made for another geometry");
  }
  if ((spec.dtype == DType::kFp8E4M3 || spec.dtype == DType::kFp8E5M2) && !kv->has_scales()) {
    return FailedPreconditionError("ShiftStoredKeys: fp8 KV storage has no scales yet");
  }
  const int64_t kv_dim = paged_kv_row_dim();
  std::vector<float> k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
  for (int64_t i = 0; i < num_slots; ++i) {
    if (slots[i] < 0 || slots[i] >= kv->num_slots()) {
      return OutOfRangeError("ShiftStoredKeys: slot " + std::to_string(slots[i]) +
                             " outside the cache");
    }
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const float* k_scale = kv->key_channel_scale(l);
    const float* k_mean = kv->key_channel_mean(l);
    const float* v_scale = kv->value_channel_scale(l);
    const float* v_mean = kv->value_channel_mean(l);
    for (int64_t i = 0; i < num_slots; ++i) {
      if (deltas[i] == 0) continue;
      kv->ReadSlot(l, slots[i], k.data(), v.data());
      if (k_scale != nullptr) {
        for (int64_t d = 0; d < kv_dim; ++d) {
          k[d] = k[d] * k_scale[d] + k_mean[d];
          v[d] = v[d] * v_scale[d] + v_mean[d];
        }
      }
      if (c.is_mla() && options_.mla_expanded_kv) {  // each head's RoPE part
        for (int64_t h = 0; h < c.num_heads; ++h) {
          kernels::Rope(k.data() + h * c.head_dim + c.mla.qk_nope_head_dim, 1,
                        c.mla.qk_rope_head_dim, deltas[i], inv_freqs_, c.rope.layout);
        }
      } else if (c.is_mla()) {  // the shared RoPE key after the latent
        kernels::Rope(k.data() + c.mla.kv_lora_rank, 1, c.mla.qk_rope_head_dim, deltas[i],
                      inv_freqs_, c.rope.layout);
      } else {
        kernels::Rope(k.data(), c.num_kv_heads, c.head_dim, deltas[i], inv_freqs_,
                      c.rope.layout);
      }
      kv->Write(l, &slots[i], 1, k.data(), v.data());
    }
  }
  return OkStatus();
}

Status LlamaModel::Forward(const ForwardBatch& batch, KvStorage* kv, ThreadPool* pool,
                           float* logits, std::span<const AttentionMassRequest> mass) {
  const ModelConfig& c = model_.config;
  if (kv == nullptr || logits == nullptr) {
    return InvalidArgumentError("Forward: null KV storage or logits");
  }
  const KvCacheSpec& spec = kv->spec();
  if (!MatchesKvSpec(spec)) {
    return InvalidArgumentError("Forward: the KV storage was made for another model geometry");
  }
  KV_RETURN_IF_ERROR(batch.Validate(spec.block_size, kv->num_blocks()));
  const int64_t n = batch.num_tokens();
  KV_RETURN_IF_ERROR(CheckTokens(batch.token_ids.data(), n));
  if (batch.num_logits() > n) return InvalidArgumentError("Forward: more logits rows than tokens");
  if ((spec.dtype == DType::kFp8E4M3 || spec.dtype == DType::kFp8E5M2) && !kv->has_scales()) {
    return FailedPreconditionError("Forward: fp8 KV storage has no scales yet");
  }

  const int64_t num_seqs = batch.num_seqs();
  std::vector<kernels::PagedSeq> seqs(static_cast<size_t>(num_seqs));
  for (int64_t i = 0; i < num_seqs; ++i) {
    kernels::PagedSeq& s = seqs[static_cast<size_t>(i)];
    s.block_table = batch.block_tables[static_cast<size_t>(i)].data();
    s.num_keys = batch.seq_lens[static_cast<size_t>(i)];
    s.query_offset = batch.query_start[static_cast<size_t>(i)];
    s.num_queries = batch.query_start[static_cast<size_t>(i) + 1] - s.query_offset;
  }
  const bool per_layer_key_begin =
      std::any_of(batch.layer_key_begin.begin(), batch.layer_key_begin.end(),
                  [](const std::vector<int64_t>& b) { return !b.empty(); });
  for (const std::vector<int64_t>& b : batch.layer_key_begin) {
    if (!b.empty() && static_cast<int64_t>(b.size()) != c.num_layers) {
      return InvalidArgumentError("Forward: layer_key_begin has " + std::to_string(b.size()) +
                                  " layers, the model " + std::to_string(c.num_layers));
    }
  }
  std::vector<bool> has_mass(static_cast<size_t>(num_seqs), false);
  for (const AttentionMassRequest& m : mass) {
    if (m.seq < 0 || m.seq >= num_seqs || has_mass[static_cast<size_t>(m.seq)] ||
        m.mass == nullptr || m.first_row < 0 ||
        m.first_row > seqs[static_cast<size_t>(m.seq)].num_queries ||
        m.mass_stride < seqs[static_cast<size_t>(m.seq)].num_keys) {
      return InvalidArgumentError("Forward: bad attention mass request for sequence " +
                                  std::to_string(m.seq) + " (out of range or repeated)");
    }
    has_mass[static_cast<size_t>(m.seq)] = true;
  }
  std::vector<kernels::PagedMassRequest> layer_mass(mass.size());
  kernels::PagedAttentionShape shape;
  shape.num_heads = c.num_heads;
  shape.scale = c.is_mla() ? layers_[0].mla->softmax_scale()
                           : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // MLA's absorbed queries or expanded heads come from RunLayers; the GQA rope/bias path does
  // not run for them.

  EnsureWorkspace(n);
  RunLayers(
      batch.token_ids.data(), batch.positions.data(), n,
      [&](int64_t) { return std::make_pair(k_.data(), v_.data()); },
      [&](int64_t l, float* q, const float* k, const float* v, float* attn) {
        kv->Write(l, batch.slot_mapping.data(), n, k, v);
        // The cache's heads (MLA: one latent "KV head" that every query head attends).
        const int64_t hd = spec.head_dim, group = c.num_heads / spec.num_kv_heads;
        // Keys were stored as (k - mean) / scale: q . k = (q * scale) . stored + a shift per
        // query that softmax ignores.
        if (const float* k_scale = kv->key_channel_scale(l)) {
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t h = 0; h < c.num_heads; ++h) {
              MulInPlace(q + (r * c.num_heads + h) * hd, k_scale + (h / group) * hd, hd);
            }
          }
        }
        kernels::PagedKv view;
        view.dtype = spec.dtype;
        view.block_size = spec.block_size;
        view.num_kv_heads = spec.num_kv_heads;
        view.head_dim = spec.head_dim;
        view.k = kv->k_pages(l);
        view.v = kv->v_pages(l);
        view.k_head_scales = kv->k_head_scales(l);
        view.v_head_scales = kv->v_head_scales(l);
        view.k_token_scales = kv->k_token_scales(l);
        view.v_token_scales = kv->v_token_scales(l);
        if (per_layer_key_begin) {
          for (int64_t i = 0; i < num_seqs; ++i) {
            const std::vector<int64_t>& b = batch.layer_key_begin[static_cast<size_t>(i)];
            seqs[static_cast<size_t>(i)].key_begin = b.empty() ? 0 : b[static_cast<size_t>(l)];
          }
        }
        if (mass.empty()) {
          kernels::PagedAttention(q, view, seqs.data(), num_seqs, shape, attn, pool);
        } else {
          for (size_t i = 0; i < mass.size(); ++i) {
            const AttentionMassRequest& m = mass[i];
            layer_mass[i] = {m.seq, m.first_row, m.mass + l * spec.num_kv_heads * m.mass_stride,
                             m.mass_stride};
          }
          kernels::PagedAttentionWithMass(q, view, seqs.data(), num_seqs, shape,
                                          layer_mass.data(),
                                          static_cast<int64_t>(layer_mass.size()), attn, pool);
        }
        // Values were stored as (v - mean) / scale and the attention weights sum to 1.
        if (const float* v_scale = kv->value_channel_scale(l)) {
          const float* v_mean = kv->value_channel_mean(l);
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t h = 0; h < c.num_heads; ++h) {
              float* o = attn + (r * c.num_heads + h) * hd;
              const int64_t off = (h / group) * hd;
              for (int64_t i = 0; i < hd; ++i) o[i] = o[i] * v_scale[off + i] + v_mean[off + i];
            }
          }
        }
      },
      pool);
  ComputeLogits(batch.logits_indices.data(), batch.num_logits(), logits, pool);
  return OkStatus();
}

}  // namespace kvserve
