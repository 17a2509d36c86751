#include "model/bert.h"

#include <cmath>
#include <string>
#include <utility>

#include "base/check.h"
#include "kernels/kernels.h"
#include "model/model_tensors.h"
#include "model/row_ops.h"

namespace kvserve {

BertModel::BertModel(LoadedModel model, const Options& options)
    : model_(std::move(model)), options_(options) {}

StatusOr<std::unique_ptr<BertModel>> BertModel::Create(LoadedModel model) {
  return Create(std::move(model), Options{});
}

StatusOr<std::unique_ptr<BertModel>> BertModel::Create(LoadedModel model, const Options& options) {
  std::unique_ptr<BertModel> m(new BertModel(std::move(model), options));
  KV_RETURN_IF_ERROR(m->Init());
  return m;
}

Status BertModel::Init() {
  const ModelConfig& c = model_.config;
  if (!c.is_encoder()) {
    return InvalidArgumentError("'" + c.name + "' is a " + c.architecture +
                                " model, not an embedding model (bert)");
  }
  KV_RETURN_IF_ERROR(c.Validate());
  if (c.causal) {
    return UnimplementedError("a bert model with causal attention (bert.attention.causal true) "
                              "is not supported");
  }
  pooling_ = options_.pooling.value_or(c.pooling);
  if (pooling_ == PoolingType::kNone) {
    return InvalidArgumentError("the model names no pooling (bert.pooling_type): pass one");
  }
  const int64_t D = c.hidden_dim, F = c.ffn_dim;
  KV_ASSIGN_OR_RETURN(token_embd_, FindModelTensor(model_, "token_embd.weight", {c.vocab_size, D}, true));
  KV_ASSIGN_OR_RETURN(position_embd_,
                      FindModelTensor(model_, "position_embd.weight", {c.max_seq_len, D}, true));
  type0_.assign(static_cast<size_t>(D), 0.0f);
  if (model_.tensors.count("token_types.weight") != 0) {
    KV_ASSIGN_OR_RETURN(const Tensor* types, FindModelTensor(model_, "token_types.weight",
                                                             {c.token_type_count, D}, true));
    kernels::EmbeddingLookup(*types, 0, type0_.data());
  }
  KV_ASSIGN_OR_RETURN(embd_norm_w_, FindModelVector(model_, "token_embd_norm.weight", D));
  KV_ASSIGN_OR_RETURN(embd_norm_b_, FindModelVector(model_, "token_embd_norm.bias", D));
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    Layer& y = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    KV_ASSIGN_OR_RETURN(y.q, FindModelTensor(model_, p + "attn_q.weight", {D, D}, true));
    KV_ASSIGN_OR_RETURN(y.k, FindModelTensor(model_, p + "attn_k.weight", {D, D}, true));
    KV_ASSIGN_OR_RETURN(y.v, FindModelTensor(model_, p + "attn_v.weight", {D, D}, true));
    KV_ASSIGN_OR_RETURN(y.out, FindModelTensor(model_, p + "attn_output.weight", {D, D}, true));
    KV_ASSIGN_OR_RETURN(y.up, FindModelTensor(model_, p + "ffn_up.weight", {F, D}, true));
    KV_ASSIGN_OR_RETURN(y.down, FindModelTensor(model_, p + "ffn_down.weight", {D, F}, true));
    KV_ASSIGN_OR_RETURN(y.q_bias, FindModelVector(model_, p + "attn_q.bias", D));
    KV_ASSIGN_OR_RETURN(y.k_bias, FindModelVector(model_, p + "attn_k.bias", D));
    KV_ASSIGN_OR_RETURN(y.v_bias, FindModelVector(model_, p + "attn_v.bias", D));
    KV_ASSIGN_OR_RETURN(y.out_bias, FindModelVector(model_, p + "attn_output.bias", D));
    KV_ASSIGN_OR_RETURN(y.up_bias, FindModelVector(model_, p + "ffn_up.bias", F));
    KV_ASSIGN_OR_RETURN(y.down_bias, FindModelVector(model_, p + "ffn_down.bias", D));
    KV_ASSIGN_OR_RETURN(y.attn_norm_w, FindModelVector(model_, p + "attn_output_norm.weight", D));
    KV_ASSIGN_OR_RETURN(y.attn_norm_b, FindModelVector(model_, p + "attn_output_norm.bias", D));
    KV_ASSIGN_OR_RETURN(y.out_norm_w, FindModelVector(model_, p + "layer_output_norm.weight", D));
    KV_ASSIGN_OR_RETURN(y.out_norm_b, FindModelVector(model_, p + "layer_output_norm.bias", D));
  }
  return OkStatus();
}

Status BertModel::Encode(std::span<const TokenId> tokens, std::span<const int64_t> seq_starts,
                         ThreadPool* pool, float* hidden) {
  const ModelConfig& c = model_.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (seq_starts.size() < 2 || seq_starts.front() != 0 || seq_starts.back() != n) {
    return InvalidArgumentError("seq_starts must go from 0 to the number of tokens");
  }
  for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
    const int64_t len = seq_starts[s + 1] - seq_starts[s];
    if (len <= 0) return InvalidArgumentError("an empty sequence");
    if (len > c.max_seq_len) {
      return InvalidArgumentError("a sequence of " + std::to_string(len) + " tokens; this model "
                                  "takes at most " + std::to_string(c.max_seq_len));
    }
  }
  for (TokenId t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgumentError("token id " + std::to_string(t) + " is outside the vocabulary (" +
                                  std::to_string(c.vocab_size) + " tokens)");
    }
  }
  const int64_t D = c.hidden_dim, F = c.ffn_dim, H = c.num_heads, hd = c.head_dim;
  for (auto* buf : {&x_, &q_, &k_, &v_, &attn_, &tmp_}) buf->resize(static_cast<size_t>(n * D));
  ffn_.resize(static_cast<size_t>(n * F));
  float* x = x_.data();
  std::vector<float> pos(static_cast<size_t>(D));
  for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
    for (int64_t r = seq_starts[s]; r < seq_starts[s + 1]; ++r) {
      float* row = x + r * D;
      // llama.cpp's order: (token + type 0) + position.
      kernels::EmbeddingLookup(*token_embd_, tokens[static_cast<size_t>(r)], row);
      AddInPlace(row, type0_.data(), D);
      kernels::EmbeddingLookup(*position_embd_, r - seq_starts[s], pos.data());
      AddInPlace(row, pos.data(), D);
    }
  }
  kernels::LayerNorm(x, embd_norm_w_.data(), embd_norm_b_.data(), n, D, c.norm_eps, x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const Layer& y : layers_) {
    kernels::Matmul(x, n, *y.q, q_.data(), pool);
    kernels::Matmul(x, n, *y.k, k_.data(), pool);
    kernels::Matmul(x, n, *y.v, v_.data(), pool);
    AddBias(q_.data(), n, y.q_bias);
    AddBias(k_.data(), n, y.k_bias);
    AddBias(v_.data(), n, y.v_bias);
    for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
      const int64_t first = seq_starts[s], len = seq_starts[s + 1] - first;
      kernels::AttentionShape shape;
      shape.num_queries = len;
      shape.num_keys = len;
      shape.first_pos = len - 1;  // every query sees every key: bidirectional
      shape.num_heads = H;
      shape.num_kv_heads = H;
      shape.head_dim = hd;
      shape.scale = scale;
      kernels::DenseAttention(q_.data() + first * D, k_.data() + first * D, v_.data() + first * D,
                              shape, attn_.data() + first * D, pool);
    }
    kernels::Matmul(attn_.data(), n, *y.out, tmp_.data(), pool);
    AddBias(tmp_.data(), n, y.out_bias);
    AddInPlace(tmp_.data(), x, n * D);
    kernels::LayerNorm(tmp_.data(), y.attn_norm_w.data(), y.attn_norm_b.data(), n, D,
                       c.norm_eps, x);
    kernels::Matmul(x, n, *y.up, ffn_.data(), pool);
    AddBias(ffn_.data(), n, y.up_bias);
    kernels::Gelu(ffn_.data(), n * F, ffn_.data());
    kernels::Matmul(ffn_.data(), n, *y.down, tmp_.data(), pool);
    AddBias(tmp_.data(), n, y.down_bias);
    AddInPlace(tmp_.data(), x, n * D);
    kernels::LayerNorm(tmp_.data(), y.out_norm_w.data(), y.out_norm_b.data(), n, D, c.norm_eps,
                       x);
  }
  std::copy(x, x + n * D, hidden);
  return OkStatus();
}

Status BertModel::Embed(std::span<const TokenId> tokens, std::span<const int64_t> seq_starts,
                        ThreadPool* pool, float* out) {
  const int64_t D = model_.config.hidden_dim;
  std::vector<float> hidden(tokens.size() * static_cast<size_t>(D));
  KV_RETURN_IF_ERROR(Encode(tokens, seq_starts, pool, hidden.data()));
  for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
    const int64_t first = seq_starts[s], len = seq_starts[s + 1] - first;
    float* o = out + static_cast<int64_t>(s) * D;
    if (pooling_ == PoolingType::kMean) {
      for (int64_t i = 0; i < D; ++i) {
        double sum = 0.0;
        for (int64_t r = first; r < first + len; ++r) sum += hidden[static_cast<size_t>(r * D + i)];
        o[i] = static_cast<float>(sum / static_cast<double>(len));
      }
    } else {
      const int64_t r = pooling_ == PoolingType::kCls ? first : first + len - 1;
      std::copy(hidden.begin() + r * D, hidden.begin() + (r + 1) * D, o);
    }
    if (options_.normalize) {
      double ss = 0.0;
      for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(o[i]) * o[i];
      if (ss > 0.0) {
        const auto inv = static_cast<float>(1.0 / std::sqrt(ss));
        for (int64_t i = 0; i < D; ++i) o[i] *= inv;
      }
    }
  }
  return OkStatus();
}

}  // namespace kvserve
