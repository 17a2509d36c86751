#include "cli/model_setup.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "cli/cli_util.h"
#include "model/synthetic.h"

namespace kvserve::cli {

Status NoTokenizerError() {
  return InvalidArgumentError("the model carries no tokenizer; pass one with --tokenizer PATH");
}

StatusOr<CommandModel> LoadCommandModel(const CommandModelOptions& options) {
  CommandModel out;
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  if (options.model_path.empty()) {
    loaded = MakeBuiltinDefaultModel();
    std::fprintf(stderr,
                 "note: no --model given, using the built-in default model '%s'.\n"
                 "note: ITS WEIGHTS ARE RANDOM: the text it generates is noise. Pass --model PATH "
                 "(GGUF file, llama2.c checkpoint or Hugging Face folder) for real text.\n",
                 loaded.config.name.c_str());
  } else {
    KV_ASSIGN_OR_RETURN(loaded, LoadModelWithProgress(options.model_path, options.tokenizer_path));
  }
  out.load_seconds = SecondsSince(start);
  PrintModelSummary(loaded, out.load_seconds);
  if (options.allow_encoder && loaded.config.is_encoder()) {
    out.encoder = std::move(loaded);
    return out;
  }
  if (loaded.vocab.has_value()) {
    auto tok = Tokenizer::Create(*loaded.vocab);
    if (!tok.ok()) return tok.status().WithContext("tokenizer");
    out.tokenizer = std::move(tok).value();
  } else if (options.require_tokenizer) {
    return NoTokenizerError();
  }
  KV_ASSIGN_OR_RETURN(out.model, LlamaModel::Create(std::move(loaded), options.model));
  PrintPackedWeights(out.model->packed_weights_bytes(), out.model->replaced_weights_bytes());
  return out;
}

}  // namespace kvserve::cli
