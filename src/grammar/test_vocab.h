// Synthetic vocabularies for the grammar tests and benchmark (header-only, test code).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "grammar/token_masker.h"

namespace kvserve::grammar::testing {

inline constexpr int32_t kTestEosId = 256;
inline constexpr int32_t kTestSpecialId = 257;

// ~1000 tokens: ids 0-255 are the single bytes (byte-level BPE's base alphabet, so every
// string is spellable and UTF-8 characters can be split across tokens), 256 is EOS, 257 a
// special token, then JSON-ish multi-character pieces, UTF-8 pieces (whole and split), and
// random strings over a JSON-ish alphabet.
inline Vocabulary MakeTestVocabulary(int32_t num_tokens = 1000, uint64_t seed = 7) {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("</s>");
  v.token_bytes.push_back("<|im_start|>");
  v.eos_token_ids = {kTestEosId};
  v.special_token_ids = {kTestSpecialId};
  const std::vector<std::string> pieces = {
      "{\"", "\"}", "\":", "\": \"", "\", \"", "\",", "},", "}]", "[{", "{}", "[]", " {", " [",
      "true", "false", "null", " true", " null", "  ", "    ", "\n", "\n  ", "\n    ", "\t",
      "\": ", ", ", ",\n  ", "\"name\"", "\"age\":", "\"id\": ", "\"tags\"", "name", "age", "id",
      "the", "hello", "world", " world", "foo", "bar", "value", "type", "items", "email", "com",
      ".com", "@", "example", "-0", "2024", "-12-", "T12:", ":00", ":00Z", "+01:00", "abcd",
      "ef01", "-4", "0.", ".5", "e+", "E-", "1e5", "3.14", "-1", "00", "007", "42", "100",
      "\\n", "\\\"", "\\u00e9", "\\\\", "\\", "é", "日本", "語", "😀", "\xe6\x97", "\xa5\xe6",
      "\xf0\x9f", "\x98\x80", "\xc3", "\xa9 ", "yes", "no", "maybe", "red", "green", "blue",
      "\"red\"", "\"green\"", "A", "Z", "a-z", "-", "_", "ab", "abc", "0x", "123", "456", "789",
  };
  for (const auto& p : pieces) v.token_bytes.push_back(p);
  for (int i = 0; i < 100; ++i) v.token_bytes.push_back(std::to_string(i));
  std::mt19937_64 rng(seed);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \"{}[]:,.-_@\\";
  while (static_cast<int32_t>(v.token_bytes.size()) < num_tokens) {
    const int len = 2 + static_cast<int>(rng() % 5);
    std::string s;
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    v.token_bytes.push_back(s);
  }
  return v;
}

}  // namespace kvserve::grammar::testing
