#include "runtime/embedder.h"

#include <algorithm>
#include <utility>

namespace kvserve {

Embedder::Embedder(std::unique_ptr<BertModel> bert, std::unique_ptr<Tokenizer> tokenizer,
                   int threads, int64_t max_batch_tokens)
    : bert_(std::move(bert)),
      tokenizer_(std::move(tokenizer)),
      pool_(std::make_unique<ThreadPool>(std::max(1, threads))),
      max_batch_tokens_(std::max(max_batch_tokens, bert_->max_tokens())) {}

StatusOr<std::unique_ptr<Embedder>> Embedder::Create(LoadedModel model, const Options& options) {
  if (!model.config.is_encoder()) {
    return InvalidArgumentError("'" + model.path + "' is a " + model.config.architecture +
                                " model, not an embedding model (GGUF architecture bert or a "
                                "Hugging Face BertModel)");
  }
  if (!model.vocab.has_value()) {
    return InvalidArgumentError("the embedding model '" + model.path + "' has no vocabulary");
  }
  auto tokenizer = Tokenizer::Create(*model.vocab);
  if (!tokenizer.ok()) return tokenizer.status().WithContext("embedding model tokenizer");
  BertModel::Options bo = options.model;
  bo.normalize = options.normalize;
  auto bert = BertModel::Create(std::move(model), bo);
  if (!bert.ok()) return bert.status();
  return std::unique_ptr<Embedder>(new Embedder(std::move(bert).value(),
                                                std::move(tokenizer).value(), options.threads,
                                                options.max_batch_tokens));
}

StatusOr<std::unique_ptr<Embedder>> Embedder::Load(const std::string& path,
                                                   const Options& options) {
  auto loaded = LoadModel(path);
  if (!loaded.ok()) return loaded.status();
  return Create(std::move(loaded).value(), options);
}

StatusOr<std::vector<TokenId>> Embedder::Tokenize(std::string_view text,
                                                  EmbedTruncation truncation,
                                                  int64_t max_tokens) const {
  std::vector<TokenId> ids =
      tokenizer_->Encode(text, EncodeOptions{.add_bos = true, .parse_special = false});
  const auto max = static_cast<size_t>(
      max_tokens > 0 ? std::min(max_tokens, this->max_tokens()) : this->max_tokens());
  if (ids.size() <= max) return ids;
  if (truncation == EmbedTruncation::kError) {
    return InvalidArgumentError("the input has " + std::to_string(ids.size()) +
                                " tokens; the embedding model takes at most " +
                                std::to_string(max));
  }
  // Keep the first token ([CLS]) and the last max - 1 ([SEP] included).
  std::vector<TokenId> kept;
  kept.reserve(max);
  kept.push_back(ids.front());
  kept.insert(kept.end(), ids.end() - static_cast<int64_t>(max - 1), ids.end());
  return kept;
}

StatusOr<std::vector<std::vector<float>>> Embedder::Embed(
    const std::vector<std::vector<TokenId>>& inputs,
    const std::function<bool()>& cancelled) const {
  const int64_t dim = bert_->dim();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n == 0) return InvalidArgumentError("input " + std::to_string(i) + " is empty");
    if (n > max_tokens()) {
      return InvalidArgumentError("input " + std::to_string(i) + " has " + std::to_string(n) +
                                  " tokens; the embedding model takes at most " +
                                  std::to_string(max_tokens()));
    }
  }
  std::vector<std::vector<float>> out(inputs.size());
  std::lock_guard<std::mutex> lock(mu_);
  size_t next = 0;
  std::vector<TokenId> tokens;
  std::vector<int64_t> starts;
  std::vector<float> pooled;
  while (next < inputs.size()) {
    if (cancelled != nullptr && cancelled()) {
      return CancelledError("embedding stopped after " + std::to_string(next) + " of " +
                            std::to_string(inputs.size()) + " inputs");
    }
    // A batch: inputs from `next` while they fit max_batch_tokens_ (at least one).
    tokens.clear();
    starts.assign(1, 0);
    const size_t first = next;
    while (next < inputs.size() &&
           (next == first ||
            static_cast<int64_t>(tokens.size() + inputs[next].size()) <= max_batch_tokens_)) {
      tokens.insert(tokens.end(), inputs[next].begin(), inputs[next].end());
      starts.push_back(static_cast<int64_t>(tokens.size()));
      ++next;
    }
    pooled.resize((next - first) * static_cast<size_t>(dim));
    Status s = bert_->Embed(tokens, starts, pool_.get(), pooled.data());
    if (!s.ok()) {
      return first == 0 && next == inputs.size()
                 ? s
                 : s.WithContext("inputs " + std::to_string(first) + ".." +
                                 std::to_string(next - 1));
    }
    for (size_t i = first; i < next; ++i) {
      const float* row = pooled.data() + (i - first) * static_cast<size_t>(dim);
      out[i].assign(row, row + dim);
    }
  }
  return out;
}

StatusOr<std::vector<float>> Embedder::EmbedText(std::string_view text,
                                                 EmbedTruncation truncation) const {
  auto ids = Tokenize(text, truncation);
  if (!ids.ok()) return ids.status();
  auto out = Embed({*std::move(ids)});
  if (!out.ok()) return out.status();
  return std::move(out->front());
}

}  // namespace kvserve
