// Embedder: texts or token sequences -> one embedding each, with a BERT-family encoder
// (model/bert.h) and its WordPiece tokenizer. The one path behind `kvserve embed`, the server's
// /v1/embeddings and the semantic response cache's embeddings (tier 1).
//
// Each text is tokenized as llama.cpp's embedding path does: [CLS] text [SEP], no special-token
// parsing in the text. Inputs are embedded in batches of at most Options::max_batch_tokens
// tokens (BertModel batches sequences; its workspace grows to the largest batch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/bert.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// What to do with an input longer than the model's position table (max_tokens()).
enum class EmbedTruncation {
  kError,     // InvalidArgument naming the input and both lengths (the API's default)
  kKeepEnd,   // keep [CLS], the last max_tokens() - 2 text tokens and [SEP] (for cache keys:
              // the most recent turns of a conversation matter most)
};

// Owns the model, the tokenizer and a thread pool of its own (so that it never shares one with
// the engine's step loop). Thread-safe: Embed calls are serialised by a mutex; Tokenize and the
// accessors may run concurrently with them.
class Embedder {
 public:
  struct Options {
    int threads = 1;                // the pool's threads
    bool normalize = true;          // L2-normalise (what OpenAI's and vLLM's APIs return)
    int64_t max_batch_tokens = 8192;  // tokens per BertModel call (>= max_tokens())
    BertModel::Options model;       // pooling override; `normalize` above wins
  };

  // From a loaded model that carries a WordPiece (or other) vocabulary. InvalidArgument for a
  // model that is not an encoder or has no vocabulary.
  static StatusOr<std::unique_ptr<Embedder>> Create(LoadedModel model, const Options& options);
  // LoadModel(path) (GGUF or Hugging Face folder), then Create.
  static StatusOr<std::unique_ptr<Embedder>> Load(const std::string& path, const Options& options);

  const ModelConfig& config() const { return bert_->config(); }
  int64_t dim() const { return bert_->dim(); }
  int64_t max_tokens() const { return bert_->max_tokens(); }
  PoolingType pooling() const { return bert_->pooling(); }
  bool normalize() const { return bert_->normalize(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int num_threads() const { return pool_->num_threads(); }

  // [CLS] text [SEP] (as the model's vocabulary says), at most `max_tokens` tokens (0 or more
  // than max_tokens(): max_tokens()), truncated per `truncation`.
  StatusOr<std::vector<TokenId>> Tokenize(std::string_view text, EmbedTruncation truncation,
                                          int64_t max_tokens = 0) const;

  // One embedding of dim() values per input, in order. InvalidArgument for an empty input, a
  // token outside the vocabulary or (kError) an input longer than max_tokens(). `cancelled`,
  // when given, is asked before each batch: true stops with Cancelled (a client that left).
  StatusOr<std::vector<std::vector<float>>> Embed(
      const std::vector<std::vector<TokenId>>& inputs,
      const std::function<bool()>& cancelled = nullptr) const;
  // Tokenize + Embed for one text.
  StatusOr<std::vector<float>> EmbedText(std::string_view text, EmbedTruncation truncation) const;

 private:
  Embedder(std::unique_ptr<BertModel> bert, std::unique_ptr<Tokenizer> tokenizer, int threads,
           int64_t max_batch_tokens);

  std::unique_ptr<BertModel> bert_;        // guarded by mu_ (its workspace)
  std::unique_ptr<Tokenizer> tokenizer_;   // immutable after construction
  std::unique_ptr<ThreadPool> pool_;
  int64_t max_batch_tokens_;
  mutable std::mutex mu_;
};

}  // namespace kvserve
