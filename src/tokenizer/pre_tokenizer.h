// Byte-level BPE pre-tokenizer: splits text into pieces with a sequence of regexes (PCRE2,
// Unicode properties), the way llama.cpp's unicode_regex_split does: every regex is applied to
// every piece left by the previous one, and both the matches and the text between them become
// pieces ("isolated" behaviour). Matching never looks past the end of a piece.
//
// Invalid UTF-8 never fails: each byte that does not start a well-formed sequence becomes
// U+FFFD (as llama.cpp does), so pieces are always valid UTF-8.
//
// Owns the compiled regexes. Immutable after Create: safe to use from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvserve {

// The regex list llama.cpp uses for a `tokenizer.ggml.pre` name ("gpt-2", "llama-bpe",
// "qwen2", "falcon", ...). NotFound for an unknown name (the message lists the known ones).
StatusOr<std::vector<std::string>> PreTokenizerRegexes(std::string_view pre);
// The `pre` names PreTokenizerRegexes knows, sorted.
std::vector<std::string> SupportedPreTokenizerNames();
// Whether llama.cpp encodes a pre-token that is itself a vocabulary entry as that entry
// without running merges (llama-3 family and tekken).
bool PreTokenizerIgnoresMerges(std::string_view pre);
// The GPT-2 pre-tokenizer regex (also HF ByteLevel with use_regex).
extern const char kGpt2PreTokenizerRegex[];

// Replaces every byte that does not start a well-formed UTF-8 sequence with U+FFFD (EF BF BD).
// Overlong forms are re-encoded in shortest form; surrogates and code points above U+10FFFF
// become U+FFFD.
std::string SanitizeUtf8(std::string_view text);

class PreTokenizerImpl;

class PreTokenizer {
 public:
  // Compiles `regexes` (applied in order). An invalid regex is an InvalidArgument error that
  // quotes it and the PCRE2 message. An empty list yields one piece per input.
  static StatusOr<std::unique_ptr<PreTokenizer>> Create(const std::vector<std::string>& regexes);
  ~PreTokenizer();

  // Splits `text` into non-empty pieces whose concatenation is SanitizeUtf8(text).
  std::vector<std::string> Split(std::string_view text) const;

 private:
  explicit PreTokenizer(std::unique_ptr<PreTokenizerImpl> impl);
  std::unique_ptr<PreTokenizerImpl> impl_;
};

}  // namespace kvserve
