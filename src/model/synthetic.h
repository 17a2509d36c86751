// Synthetic models: random weights in the exact shapes of real models (for benchmarks and
// tests without downloads), plus the small built-in default model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "model/quant_mix.h"
#include "tensor/dtype.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

struct SyntheticModelOptions {
  std::string preset = "tiny";
  // One type for every weight matrix (IsSyntheticWeightDType) ...
  DType dtype = DType::kF32;
  uint64_t seed = 0;
  std::optional<VocabSpec> vocab = std::nullopt;  // replaces the synthetic vocabulary and size
  // ... or, when set, each tensor in the type QuantMixDType gives it for this file type (as
  // llama.cpp's quantiser mixes q4_k_m); `dtype` is then ignored.
  std::optional<QuantFileType> file_type = std::nullopt;
  int num_threads = 0;  // rows are generated and quantised in parallel; 0: up to 16
};

// The weight types synthetic models are made in: f32, f16, bf16 and the GGML block types
// (q8_0, q4_0 ... q6_k).
bool IsSyntheticWeightDType(DType dtype);
// `kvserve mkmodel --dtype`: one of those names, else InvalidArgument naming the flag.
StatusOr<DType> ParseSyntheticWeightDType(const std::string& name);

// "tiny", "smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b".
std::vector<std::string> SyntheticPresetNames();
// The preset's configuration (as in the real model's config.json); unknown names give
// InvalidArgument listing the known ones. Also "deepseek-v3" (the planner's: too large to
// make on these machines, so not among the names above).
StatusOr<ModelConfig> SyntheticPresetConfig(const std::string& preset);

// Random-weight model of the preset's shape, deterministic in `seed` (independent of the
// thread count). Matrices use `options.dtype` (or options.file_type's mix); norms stay f32
// (as llama.cpp does), Qwen2
// biases too. Values are uniform with std 0.02 (norm weights 1.0), so activations stay finite
// through all layers. Each row is generated and converted directly into the target storage:
// no full f32 copy of a big tensor exists when the target dtype is smaller.
// Without options.vocab, builds a synthetic byte-level BPE vocabulary of the preset's
// vocab_size (256 byte tokens, deterministic merges of earlier tokens, <|endoftext|> as
// BOS/EOS) so that any text round-trips. `progress` gets (bytes done, bytes total).
StatusOr<LoadedModel> MakeSyntheticModel(
    const SyntheticModelOptions& options,
    const std::function<void(int64_t, int64_t)>& progress = nullptr);

// The byte-level BPE vocabulary MakeSyntheticModel builds (vocab_size >= 258).
StatusOr<VocabSpec> MakeSyntheticVocab(int64_t vocab_size, uint64_t seed);

// A WordPiece vocabulary as llama.cpp stores BERT's (word-initial pieces with a U+2581 prefix,
// continuations bare, bracketed tokens as they are) for the encoder presets: [PAD] 0,
// [unusedN] 1..99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 (control tokens, as BERT's), then every lower-case letter, digit and
// ASCII punctuation mark both word-initial and continuing (so ASCII text never needs [UNK]),
// then common English words and deterministic filler pieces up to vocab_size (>= 300).
StatusOr<VocabSpec> MakeSyntheticWordPieceVocab(int64_t vocab_size);

// The model used when no --model is given: the "tiny" preset, f32, seed 0, format "builtin".
LoadedModel MakeBuiltinDefaultModel();

// A fixed, seed-free pseudo-random token sequence (splitmix64) for benchmarks and for models
// without a tokenizer, avoiding the first 16 ids (where control tokens usually live) when the
// vocabulary has more than 64 tokens.
std::vector<TokenId> SyntheticTokenIds(int64_t num_tokens, int64_t vocab_size);

}  // namespace kvserve
