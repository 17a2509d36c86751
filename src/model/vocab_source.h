// Loading a vocabulary from a file given with --tokenizer, whatever its kind: a Hugging Face
// tokenizer.json, a GGUF file (tokenizer.ggml.* metadata), or a llama2.c tokenizer.bin.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// `vocab_size` is the model's (needed by llama2.c tokenizer files, which do not store it).
StatusOr<VocabSpec> LoadVocabFromPath(const std::string& path, int64_t vocab_size);

}  // namespace kvserve
