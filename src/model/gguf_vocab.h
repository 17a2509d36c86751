// The tokenizer.ggml.* metadata of a GGUF file as a VocabSpec, the way llama.cpp reads it
// (model kind, tokens, scores, types, merges, pre-tokenizer, special ids, add_* flags and the
// end-of-generation tokens it infers from token texts). Stateless.
#pragma once

#include "base/status.h"
#include "model/gguf.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// tokenizer.ggml.model: "llama" -> kSpm, "gpt2" -> kBpe, "bert" -> kWpm; others are refused
// by name. Sizes must agree and every id must be in range (InvalidArgument otherwise).
StatusOr<VocabSpec> VocabSpecFromGguf(const GgufFile& file);

}  // namespace kvserve
