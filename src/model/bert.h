// BertModel: a BERT-family encoder (all-MiniLM, bge, e5, gte as llama.cpp stores them: GGUF
// architecture `bert`) that turns token sequences into one embedding each, the way llama.cpp
// computes them (docs/plans/bert-embeddings.md):
//   x = token_embd[t] + token_types[0] + position_embd[p]; x = LayerNorm(x)
//   per layer (post-LN): x = LN(x + Wo * Attention(Wq x + bq, Wk x + bk, Wv x + bv) + bo)
//                        x = LN(x + Wdown * GELU(Wup x + bup) + bdown)
//   pooled per sequence: the mean of its rows ([CLS] and [SEP] included), its first row (CLS)
//   or its last; optionally L2-normalised.
// Attention is bidirectional within each sequence; sequences of a batch never see each other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model_loader.h"

namespace kvserve {

// Owns the loaded weights and a scratch workspace that grows to the largest batch. Not
// thread-safe: one Encode/Embed at a time.
class BertModel {
 public:
  struct Options {
    std::optional<PoolingType> pooling;  // overrides the file's (bert.pooling_type)
    bool normalize = false;              // L2-normalise pooled embeddings
  };
  // Checks every tensor's presence, shape and dtype against the config: InvalidArgument for a
  // model that is not a bidirectional bert encoder with a pooling type.
  static StatusOr<std::unique_ptr<BertModel>> Create(LoadedModel model);
  static StatusOr<std::unique_ptr<BertModel>> Create(LoadedModel model, const Options& options);

  const ModelConfig& config() const { return model_.config; }
  const LoadedModel& loaded() const { return model_; }
  int64_t dim() const { return model_.config.hidden_dim; }
  PoolingType pooling() const { return pooling_; }
  bool normalize() const { return options_.normalize; }
  // Longest sequence (the position table's rows).
  int64_t max_tokens() const { return model_.config.max_seq_len; }

  // Last hidden states: `tokens` holds the sequences one after the other, seq_starts their
  // first indices plus tokens.size() at the end (so seq_starts.size() = sequences + 1);
  // positions restart at 0 in each. hidden: [tokens.size(), dim()]. InvalidArgument for an
  // empty or too long sequence, a token outside the vocabulary, malformed seq_starts.
  Status Encode(std::span<const TokenId> tokens, std::span<const int64_t> seq_starts,
                ThreadPool* pool, float* hidden);
  // One pooled embedding per sequence: out [seq_starts.size() - 1, dim()].
  Status Embed(std::span<const TokenId> tokens, std::span<const int64_t> seq_starts,
               ThreadPool* pool, float* out);

 private:
  struct Layer {
    const Tensor* q;
    const Tensor* k;
    const Tensor* v;
    const Tensor* out;
    const Tensor* up;
    const Tensor* down;
    std::vector<float> q_bias, k_bias, v_bias, out_bias, up_bias, down_bias;
    std::vector<float> attn_norm_w, attn_norm_b, out_norm_w, out_norm_b;
  };
  BertModel(LoadedModel model, const Options& options);
  Status Init();

  LoadedModel model_;
  Options options_;
  PoolingType pooling_ = PoolingType::kMean;
  const Tensor* token_embd_ = nullptr;
  const Tensor* position_embd_ = nullptr;
  std::vector<float> type0_;  // token_types row 0 (zeros when the file has none)
  std::vector<float> embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
  // Workspace, [rows, width] each.
  std::vector<float> x_, q_, k_, v_, attn_, tmp_, ffn_;
};

}  // namespace kvserve
