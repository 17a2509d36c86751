#include "model/llama.h"

#include <cmath>
#include <string>

#include "base/check.h"
#include "kernels/kernels.h"

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

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool IsFloatType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Looks up `name` and checks its shape; `matrix` tensors may be any Matmul weight type (q8_0
// needs rows that are whole blocks), vectors must be f32/f16/bf16.
StatusOr<const Tensor*> Find(const LoadedModel& model, const std::string& name,
                             const std::vector<int64_t>& shape, bool matrix) {
  auto it = model.tensors.find(name);
  if (it == model.tensors.end()) {
    return NotFoundError("model is missing tensor '" + name + "' (expected shape " +
                         ShapeStr(shape) + ")");
  }
  const Tensor& t = it->second;
  if (t.shape != shape) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeStr(t.shape) +
                                " but the config implies " + ShapeStr(shape));
  }
  bool dtype_ok = IsFloatType(t.dtype) ||
                  (matrix && t.dtype == DType::kQ8_0 && t.cols() % kQ8_0BlockElems == 0);
  if (!dtype_ok) {
    return InvalidArgumentError("tensor '" + name + "' has unsupported type " +
                                std::string(DTypeName(t.dtype)) +
                                (matrix ? " for a weight matrix" : " for a vector"));
  }
  if (t.data == nullptr) return InvalidArgumentError("tensor '" + name + "' has no data");
  return &t;
}

StatusOr<std::vector<float>> FindVector(const LoadedModel& model, const std::string& name,
                                        int64_t size) {
  KV_ASSIGN_OR_RETURN(const Tensor* t, Find(model, name, {size}, /*matrix=*/false));
  std::vector<float> out(static_cast<size_t>(size));
  DequantizeRow(t->dtype, t->data, out.data(), size);
  return out;
}

void AddBias(float* rows, int64_t num_rows, const std::vector<float>& bias) {
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = rows + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] += bias[static_cast<size_t>(i)];
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(LoadedModel model) {
  std::unique_ptr<LlamaModel> m(new LlamaModel(std::move(model)));
  KV_RETURN_IF_ERROR(m->Init());
  return m;
}

Status LlamaModel::Init() {
  const ModelConfig& c = model_.config;
  KV_RETURN_IF_ERROR(c.Validate());
  const int64_t D = c.hidden_dim, V = c.vocab_size, F = c.ffn_dim;
  const int64_t q_dim = c.num_heads * c.head_dim;
  const int64_t kv_dim = c.num_kv_heads * c.head_dim;

  KV_ASSIGN_OR_RETURN(token_embd_, Find(model_, "token_embd.weight", {V, D}, true));
  if (model_.tensors.count("output.weight")) {
    KV_ASSIGN_OR_RETURN(output_, Find(model_, "output.weight", {V, D}, true));
  } else if (c.tied_embeddings) {
    output_ = token_embd_;
  } else {
    return NotFoundError("model is missing tensor 'output.weight' and its embeddings are not tied");
  }
  KV_ASSIGN_OR_RETURN(output_norm_f32_, FindVector(model_, "output_norm.weight", D));

  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& layer = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    KV_ASSIGN_OR_RETURN(layer.attn_norm_f32, FindVector(model_, p + "attn_norm.weight", D));
    KV_ASSIGN_OR_RETURN(layer.ffn_norm_f32, FindVector(model_, p + "ffn_norm.weight", D));
    KV_ASSIGN_OR_RETURN(layer.wq, Find(model_, p + "attn_q.weight", {q_dim, D}, true));
    KV_ASSIGN_OR_RETURN(layer.wk, Find(model_, p + "attn_k.weight", {kv_dim, D}, true));
    KV_ASSIGN_OR_RETURN(layer.wv, Find(model_, p + "attn_v.weight", {kv_dim, D}, true));
    KV_ASSIGN_OR_RETURN(layer.wo, Find(model_, p + "attn_output.weight", {D, q_dim}, true));
    KV_ASSIGN_OR_RETURN(layer.w_gate, Find(model_, p + "ffn_gate.weight", {F, D}, true));
    KV_ASSIGN_OR_RETURN(layer.w_up, Find(model_, p + "ffn_up.weight", {F, D}, true));
    KV_ASSIGN_OR_RETURN(layer.w_down, Find(model_, p + "ffn_down.weight", {D, F}, true));
    if (c.qkv_bias) {
      KV_ASSIGN_OR_RETURN(layer.q_bias, FindVector(model_, p + "attn_q.bias", q_dim));
      KV_ASSIGN_OR_RETURN(layer.k_bias, FindVector(model_, p + "attn_k.bias", kv_dim));
      KV_ASSIGN_OR_RETURN(layer.v_bias, FindVector(model_, p + "attn_v.bias", kv_dim));
    }
  }
  RopeOptions rope = c.rope;
  rope.head_dim = c.head_dim;
  inv_freqs_ = RopeInvFreqs(rope);
  return OkStatus();
}

std::unique_ptr<DenseKvCache> LlamaModel::NewCache(int64_t max_tokens) const {
  const ModelConfig& c = model_.config;
  return std::make_unique<DenseKvCache>(c.num_layers, max_tokens, c.num_kv_heads * c.head_dim);
}

void LlamaModel::EnsureWorkspace(int64_t num_tokens) {
  if (num_tokens <= workspace_tokens_) return;
  const ModelConfig& c = model_.config;
  const size_t n = static_cast<size_t>(num_tokens);
  const size_t q_dim = static_cast<size_t>(c.num_heads * c.head_dim);
  x_.resize(n * static_cast<size_t>(c.hidden_dim));
  xb_.resize(n * static_cast<size_t>(c.hidden_dim));
  q_.resize(n * q_dim);
  attn_.resize(n * q_dim);
  gate_.resize(n * static_cast<size_t>(c.ffn_dim));
  up_.resize(n * static_cast<size_t>(c.ffn_dim));
  workspace_tokens_ = num_tokens;
}

Status LlamaModel::Forward(const std::vector<TokenId>& tokens, DenseKvCache* cache,
                           ThreadPool* pool, float* logits, bool all_logits) {
  const ModelConfig& c = model_.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t D = c.hidden_dim, F = c.ffn_dim, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd;
  const int64_t kv_dim = c.num_kv_heads * hd;
  if (n == 0) return InvalidArgumentError("Forward: no tokens");
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
  for (TokenId t : tokens) {
    if (t < 0 || t >= V) {
      return OutOfRangeError("Forward: token id " + std::to_string(t) +
                             " is outside the vocabulary [0, " + std::to_string(V) + ")");
    }
  }
  EnsureWorkspace(n);
  float* x = x_.data();
  float* xb = xb_.data();
  float* q = q_.data();
  float* attn = attn_.data();
  float* gate = gate_.data();
  float* up = up_.data();

  for (int64_t i = 0; i < n; ++i) kernels::EmbeddingLookup(*token_embd_, tokens[i], x + i * D);

  kernels::AttentionShape shape;
  shape.num_queries = n;
  shape.num_keys = start + n;
  shape.first_pos = start;
  shape.num_heads = c.num_heads;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = hd;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Layer& layer = layers_[static_cast<size_t>(l)];
    float* k_rows = cache->k(l) + start * kv_dim;  // [n, kv_dim], written in place
    float* v_rows = cache->v(l) + start * kv_dim;

    kernels::RmsNorm(x, layer.attn_norm_f32.data(), n, D, c.norm_eps, xb);
    kernels::Matmul(xb, n, *layer.wq, q, pool);
    kernels::Matmul(xb, n, *layer.wk, k_rows, pool);
    kernels::Matmul(xb, n, *layer.wv, v_rows, pool);
    if (c.qkv_bias) {
      AddBias(q, n, layer.q_bias);
      AddBias(k_rows, n, layer.k_bias);
      AddBias(v_rows, n, layer.v_bias);
    }
    for (int64_t i = 0; i < n; ++i) {
      kernels::Rope(q + i * q_dim, c.num_heads, hd, start + i, inv_freqs_, c.rope.layout);
      kernels::Rope(k_rows + i * kv_dim, c.num_kv_heads, hd, start + i, inv_freqs_,
                    c.rope.layout);
    }
    kernels::DenseAttention(q, cache->k(l), cache->v(l), shape, attn, pool);
    kernels::Matmul(attn, n, *layer.wo, xb, pool);
    AddInPlace(x, xb, n * D);

    kernels::RmsNorm(x, layer.ffn_norm_f32.data(), n, D, c.norm_eps, xb);
    kernels::Matmul(xb, n, *layer.w_gate, gate, pool);
    kernels::Matmul(xb, n, *layer.w_up, up, pool);
    kernels::SwiGlu(gate, up, n * F, gate);
    kernels::Matmul(gate, n, *layer.w_down, xb, pool);
    AddInPlace(x, xb, n * D);
  }
  cache->num_tokens_ = start + n;

  const int64_t num_out = all_logits ? n : 1;
  const float* last = all_logits ? x : x + (n - 1) * D;
  kernels::RmsNorm(last, output_norm_f32_.data(), num_out, D, c.norm_eps, xb);
  kernels::Matmul(xb, num_out, *output_, logits, pool);
  return OkStatus();
}

}  // namespace kvserve
