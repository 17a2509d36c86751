// GrammarMatcher: a pushdown recognizer for a CompiledGrammar over UTF-8 bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace kvserve::grammar {

// Tracks every way the input read so far can continue under the grammar, as a set of stacks
// (llama.cpp's approach). A stack lists grammar positions bottom to top: the top is the
// character set to match next; the entries below are the positions to return to when the
// rule being matched ends. Calls in tail position push nothing, so right recursion (`x*`,
// `chars ::= char chars | ""`) keeps stacks flat and the state repeats.
//
// Bytes come in one at a time; a multi-byte UTF-8 character is held as pending bytes until
// complete, and each partial byte is accepted only if some stack top admits a code point that
// starts with those bytes (exact for range sets), so token boundaries inside a character work.
//
// Value type: copying is cheap (a few small vectors) and is how callers roll back.
// Not thread-safe; the CompiledGrammar it points to is shared and immutable.
// Invariant: stacks_ is sorted and has no duplicates; every non-empty stack's top is a
// kCharSet position.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Each returns false, leaving the matcher unchanged, when the input is rejected.
  bool AcceptByte(uint8_t byte);
  bool AcceptCodePoint(uint32_t cp);
  // All or nothing.
  bool AcceptString(std::string_view bytes);

  // The input so far is a complete sentence of the grammar (no pending UTF-8 bytes).
  bool IsComplete() const;
  // No continuation is possible (only after a failed construction; Accept never leads here).
  bool IsDead() const { return stacks_.empty(); }
  int num_pending_bytes() const { return pending_len_; }
  size_t num_stacks() const { return stacks_.size(); }

  // A byte string identifying the state exactly (equal keys <=> equal states).
  void AppendKey(std::string* key) const;
  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }

 private:
  using Stack = std::vector<uint32_t>;
  void Expand(uint32_t pos, Stack* stack, std::vector<Stack>* out,
              std::vector<std::pair<uint32_t, uint64_t>>* path) const;
  static void Canonicalize(std::vector<Stack>* stacks);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<Stack> stacks_;
  uint8_t pending_[4] = {0, 0, 0, 0};
  int pending_len_ = 0;
};

}  // namespace kvserve::grammar
