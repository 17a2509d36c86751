// Token masks for constrained decoding: which token ids may come next under a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace kvserve::grammar {

// What the masker needs to know about a tokenizer's vocabulary.
struct Vocabulary {
  // token_bytes[id]: the bytes token `id` adds to the output text (byte-level BPE decoded to
  // raw bytes, SentencePiece "▁" turned into " ", byte-fallback tokens <0xNN> as that byte).
  // Pieces need not be valid UTF-8 on their own.
  std::vector<std::string> token_bytes;
  // Allowed only when the grammar is complete (and then they end the output).
  std::vector<int32_t> eos_token_ids;
  // Never allowed: control tokens that do not stand for text (BOS, chat markers, ...).
  // Tokens with empty text are never allowed either.
  std::vector<int32_t> special_token_ids;
};

// A byte trie of a vocabulary's token strings, laid out in depth-first preorder so a walk is a
// linear scan that skips whole subtrees. Built once per vocabulary and shared by every grammar
// (immutable, thread-safe to read).
class TokenTrie {
 public:
  // 20 bytes. A walk that accepts or rejects a whole subtree needs nothing but the node.
  struct Node {
    uint32_t subtree_end;  // index one past this node's last descendant
    uint32_t token_begin;  // tokens ending here: tokens_[token_begin .. next node's token_begin)
    uint32_t subtree_token_end;  // the subtree's tokens: tokens_[token_begin .. subtree_token_end)
    uint32_t classes;      // bit ByteClass(b) set when byte b occurs in the subtree (node included)
    uint16_t depth;        // the root is depth 0
    uint8_t byte;
  };

  static std::shared_ptr<const TokenTrie> Build(const Vocabulary& vocab);

  int32_t vocab_size() const { return vocab_size_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Bytes grouped into 32 classes: controls, space, a-z, A-Z, digits, continuation bytes,
  // lead bytes, one each for the JSON-significant punctuation (" \ , : { } [ ] . - +), and
  // the other punctuation in small groups.
  static int ByteClass(uint8_t byte);
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  // True for ids in the trie (not EOS, not special, not empty).
  bool is_text_token(int32_t id) const { return is_text_[id] != 0; }
  int max_depth() const { return max_depth_; }
  size_t memory_bytes() const;

 private:
  int32_t vocab_size_ = 0;
  int max_depth_ = 0;
  std::vector<Node> nodes_;      // nodes_[0] is the root; one sentinel at the end
  std::vector<int32_t> tokens_;  // token ids grouped by node, in node order
  std::vector<int32_t> eos_token_ids_;
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> is_text_;
};

struct TokenMaskerOptions {
  // Automaton states kept before the cache is dropped and rebuilt (each costs ~1.2 KiB plus
  // its stacks).
  int32_t max_states = 20000;
  // Cached masks (vocab_size / 8 bytes each) kept before they are all dropped.
  size_t max_mask_bytes = size_t{16} << 20;
};

struct TokenMaskerStats {
  int64_t num_states = 0;
  int64_t num_cached_masks = 0;
  int64_t mask_hits = 0;
  int64_t mask_misses = 0;
  int64_t trie_nodes_visited = 0;
  int64_t cache_resets = 0;
};

// Computes allowed-token bitsets for one (grammar, vocabulary) pair.
//
// The grammar's matcher states reached so far are interned into a lazily built byte-level
// automaton: state ids, a 256-entry transition row per state (filled on first use) and the
// mask of each state (filled on first use, cached). A mask is one preorder scan of the trie in
// which each visited node costs one transition lookup and a rejected byte skips the subtree.
// In practice states repeat (inside a string, a number, between keys), so most steps are a
// cache hit.
//
// Owned by whoever caches compiled grammars for the engine; shared by the sequences that use
// the grammar. NOT thread-safe (the caches mutate): engine thread only.
// Invariant: transitions_.size() == 256 * states_.size(); masks_.size() == states_.size().
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const TokenTrie> trie,
              const TokenMaskerOptions& options = {});

  // A sequence's position in the grammar. Value type; copy to roll back.
  struct State {
    GrammarMatcher matcher;
    int32_t id = -1;          // automaton state, valid while generation matches
    uint64_t generation = 0;
    bool finished = false;    // an EOS token was accepted
  };

  State Start();
  // The allowed tokens (bit i of word i/64 = token i) for `state`; EOS ids are set when the
  // grammar is complete. Valid until the next call on this masker.
  const std::vector<uint64_t>& Mask(State* state);
  // Advances by one token; false (state unchanged) when the token is not allowed.
  bool Advance(State* state, int32_t token_id);
  bool IsComplete(const State& state) const { return state.matcher.IsComplete(); }

  // Drops every cached state and mask (sequences re-intern on their next call).
  void Reset();
  // Drops the cached masks only (automaton states and transitions stay).
  void DropMasks();
  const TokenTrie& trie() const { return *trie_; }
  const std::shared_ptr<const CompiledGrammar>& grammar() const { return grammar_; }
  int32_t num_mask_words() const { return num_words_; }
  TokenMaskerStats stats() const;
  void check_invariants() const;

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kDead = -1;

  int32_t Intern(GrammarMatcher m);
  int32_t Next(int32_t state, uint8_t byte);
  int32_t Resolve(State* state);
  void ComputeMask(int32_t state, std::vector<uint64_t>* mask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  TokenMaskerOptions options_;
  int32_t num_words_ = 0;
  uint64_t generation_ = 1;

  std::vector<GrammarMatcher> states_;
  std::vector<uint8_t> complete_;
  std::vector<int32_t> transitions_;  // [num_states, 256]
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::vector<uint64_t>> masks_;  // empty = not computed
  size_t mask_bytes_ = 0;
  std::vector<uint64_t> masks_scratch_;
  std::vector<int32_t> walk_states_;  // scratch: automaton state per trie depth
  TokenMaskerStats stats_;
};

// Sets logits[i] to -infinity for every token not allowed by `mask` (and for i past the
// vocabulary, e.g. padded logit rows). Returns the number of tokens left allowed. When none is
// allowed (a vocabulary that cannot spell what the grammar needs), callers should end the
// sequence.
int64_t ApplyTokenMask(const std::vector<uint64_t>& mask, int32_t vocab_size, float* logits,
                       int64_t num_logits);

}  // namespace kvserve::grammar
