// Loading a vocabulary from a file given with --tokenizer, whatever its kind: a Hugging Face
// tokenizer.json, a GGUF file (tokenizer.ggml.* metadata), or a llama2.c tokenizer.bin; and
// the vocabulary of a model (without its tensors when the model file allows). Plain functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// `vocab_size` is the model's (needed by llama2.c tokenizer files, which do not store it).
StatusOr<VocabSpec> LoadVocabFromPath(const std::string& path, int64_t vocab_size);

// LoadVocabFromPath with user-facing checks: NotFound when `path` does not exist, and
// InvalidArgument (asking for --model) for a llama2.c tokenizer file without `vocab_size` > 0.
// GGUF files may be vocabulary-only (no tensors are read).
StatusOr<VocabSpec> LoadVocabFile(const std::string& path, int64_t vocab_size);

// The vocabulary `kvserve tokenize` uses: the tokenizer file alone when there is no model; a
// GGUF model's metadata alone (vocab-only GGUFs included) when no tokenizer file overrides it;
// else the model is loaded (`progress` gets its (bytes done, total)) with `tokenizer_path`
// overriding its vocabulary, and one without a vocabulary is InvalidArgument.
StatusOr<VocabSpec> LoadModelVocab(const std::string& model_path,
                                   const std::string& tokenizer_path,
                                   const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace kvserve
