// Loading the model a command runs, the same way for generate, serve and eval: from --model
// (a progress line, then the summary line) or, where allowed, the built-in default model (a
// banner saying its weights are random); its tokenizer when it carries a vocabulary; then
// LlamaModel::Create and the line on the weights packed for this CPU. CLI thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

struct CommandModel {
  std::unique_ptr<LlamaModel> model;  // null when `encoder` is set
  // An encoder (bert) file when CommandModelOptions::allow_encoder: loaded, not built.
  std::optional<LoadedModel> encoder;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model carries no vocabulary
  double load_seconds = 0.0;
};

struct CommandModelOptions {
  std::string model_path;      // empty: the built-in default model
  std::string tokenizer_path;  // overrides the model's vocabulary
  bool require_tokenizer = false;  // error "pass one with --tokenizer" when there is none
  LlamaModel::Options model;       // --mla-attention expanded sets mla_expanded_kv
  bool allow_encoder = false;      // return an embedding model in CommandModel::encoder
};

StatusOr<CommandModel> LoadCommandModel(const CommandModelOptions& options);

// The error for a model without a vocabulary where text is needed.
Status NoTokenizerError();

}  // namespace kvserve::cli
