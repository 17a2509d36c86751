// Byte-level BPE (GPT-2 family): pre-tokenizer regexes (PCRE2 with Unicode properties), the
// GPT-2 byte-to-unicode map, and rank-ordered merges. Used by Tokenizer for VocabSpec::kBpe;
// special tokens are split out by the caller before Encode. Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

class BpeEncoder {
 public:
  virtual ~BpeEncoder() = default;
  // Chooses the pre-tokenizer from spec.pre / spec.pre_regexes; an unknown `pre` name is an
  // InvalidArgument error listing the supported ones.
  static StatusOr<std::unique_ptr<BpeEncoder>> Create(const VocabSpec& spec);
  // Appends the ids of `text` (no special tokens inside) to `out`.
  virtual void Encode(std::string_view text, std::vector<TokenId>* out) const = 0;
};

// Maps a byte-level token text (GPT-2 byte-to-unicode alphabet) back to raw bytes; characters
// outside that alphabet are passed through as their UTF-8.
std::string ByteLevelDecode(std::string_view token_text);
// Raw bytes -> byte-level token text.
std::string ByteLevelEncode(std::string_view bytes);

}  // namespace kvserve
