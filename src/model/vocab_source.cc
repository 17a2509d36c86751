#include "model/vocab_source.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

StatusOr<VocabSpec> LoadVocabFromPath(const std::string& path, int64_t vocab_size) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return LoadHfTokenizerJson(path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open tokenizer file '" + path + "'");
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    KV_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
    return VocabSpecFromGguf(*file);
  }
  return LoadLlama2cTokenizer(path, vocab_size);
}

StatusOr<VocabSpec> LoadVocabFile(const std::string& path, int64_t vocab_size) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("tokenizer file '" + path + "' does not exist");
  }
  const std::string ext = std::filesystem::path(path).extension().string();
  if (!IsGgufFile(path) && ext != ".json" && vocab_size <= 0) {
    return InvalidArgumentError("'" + path +
                                "' looks like a llama2.c tokenizer file, which does not record "
                                "its vocabulary size; pass the model too (--model)");
  }
  return LoadVocabFromPath(path, vocab_size);
}

StatusOr<VocabSpec> LoadModelVocab(const std::string& model_path,
                                   const std::string& tokenizer_path,
                                   const std::function<void(int64_t, int64_t)>& progress) {
  // A tokenizer file alone (GGUF or tokenizer.json) is enough.
  if (model_path.empty()) return LoadVocabFile(tokenizer_path, 0);
  // Only the vocabulary is needed: works for vocab-only GGUFs (no tensors) too.
  if (tokenizer_path.empty() && IsGgufFile(model_path)) return LoadVocabFile(model_path, 0);
  LoadOptions options;
  options.tokenizer_path = tokenizer_path;
  options.progress = progress;
  KV_ASSIGN_OR_RETURN(LoadedModel model, LoadModel(model_path, options));
  if (!model.vocab.has_value()) {
    return InvalidArgumentError("model '" + model_path +
                                "' carries no tokenizer; pass one with --tokenizer PATH");
  }
  return std::move(*model.vocab);
}

}  // namespace kvserve
