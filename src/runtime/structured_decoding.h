// Constrained decoding on the engine thread: a request's compiled grammar (RequestInput::
// grammar, from response_format, guided_*, a GBNF grammar or a forced tool call) becomes a
// token mask applied to its logits row before sampling, and every sampled token advances the
// request's grammar state. So the output always matches the grammar, up to max_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/ids.h"
#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar/token_masker.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// The masker's view of a tokenizer: each token's output bytes (what the detokenizer writes:
// SPM "▁" as a space, byte tokens as their byte, user-defined tokens as their text); the
// end-of-generation ids (allowed once the grammar is complete); control, unknown and unused
// tokens never allowed.
grammar::Vocabulary GrammarVocabulary(const Tokenizer& tokenizer,
                                      const std::vector<TokenId>& eos_token_ids);

// Owns the token maskers (one per compiled grammar, LRU) and each constrained sequence's
// grammar state. Sequences are created on their first Constrain(), kept across preemptions
// (the output so far is kept, so the state still matches it) and dropped with Erase() when the
// request finishes. Engine thread only, not thread-safe.
// Invariant: a sequence's state has consumed exactly the output tokens sampled under it.
class StructuredDecoder {
 public:
  explicit StructuredDecoder(std::shared_ptr<const grammar::TokenTrie> trie);

  const grammar::TokenTrie& trie() const { return *trie_; }

  // Masks the row (num_logits values; ids past the vocabulary are masked too) of sequence `id`
  // under `grammar`. A sequence seen for the first time replays `output_ids` (its output so
  // far; empty unless the runner was rebuilt). Returns the number of tokens left allowed (0:
  // no token can continue the grammar, or it already ended).
  int64_t Constrain(SeqId id, const std::shared_ptr<const grammar::CompiledGrammar>& g,
                            const std::vector<TokenId>& output_ids, float* logits,
                            int64_t num_logits);
  // Advances sequence `id` by the token sampled from its masked row. Returns true when the
  // token is an end-of-generation token the complete grammar accepted (the output is done).
  // CHECK-fails on a token the mask did not allow (a broken invariant).
  bool Advance(SeqId id, TokenId token);
  void Erase(SeqId id) { sequences_.erase(id); }
  int64_t num_sequences() const { return static_cast<int64_t>(sequences_.size()); }

  // Work done so far: tokens constrained, and the thread time spent in Constrain() and
  // Advance() (masks, applying them to the logits, grammar steps).
  int64_t num_tokens_total() const { return num_tokens_total_; }
  double seconds_total() const { return seconds_total_; }

 private:
  struct Sequence {
    std::shared_ptr<grammar::TokenMasker> masker;
    grammar::TokenMasker::State state;
  };
  std::shared_ptr<const grammar::TokenTrie> trie_;
  grammar::TokenMaskerCache maskers_;
  std::unordered_map<SeqId, Sequence> sequences_;
  int64_t num_tokens_total_ = 0;
  double seconds_total_ = 0.0;
};

}  // namespace kvserve
