#include "grammar/token_masker.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "base/check.h"

namespace kvserve::grammar {

int TokenTrie::ByteClass(uint8_t b) {
  static const auto table = [] {
    std::array<uint8_t, 256> t{};
    const std::string significant = "\"\\,:{}[].-+";
    int other = 0;
    for (int c = 0; c < 256; ++c) {
      const size_t k = significant.find(static_cast<char>(c));
      if (c < 0x20 || c == 0x7F) t[c] = 0;
      else if (c == ' ') t[c] = 1;
      else if (c >= 'a' && c <= 'z') t[c] = 2;
      else if (c >= 'A' && c <= 'Z') t[c] = 3;
      else if (c >= '0' && c <= '9') t[c] = 4;
      else if (c >= 0x80 && c < 0xC0) t[c] = 5;
      else if (c >= 0xC0) t[c] = 6;
      else if (k != std::string::npos) t[c] = static_cast<uint8_t>(7 + k);  // 7..17
      else t[c] = static_cast<uint8_t>(18 + (other++ % 14));                  // 18..31
    }
    return t;
  }();
  return table[b];
}

std::shared_ptr<const TokenTrie> TokenTrie::Build(const Vocabulary& vocab) {
  auto t = std::make_shared<TokenTrie>();
  const auto n = static_cast<int32_t>(vocab.token_bytes.size());
  t->vocab_size_ = n;
  t->token_bytes_ = vocab.token_bytes;
  t->is_text_.assign(n, 1);
  for (int32_t id : vocab.eos_token_ids) {
    if (id >= 0 && id < n) {
      t->is_text_[id] = 0;
      t->eos_token_ids_.push_back(id);
    }
  }
  for (int32_t id : vocab.special_token_ids) {
    if (id >= 0 && id < n) t->is_text_[id] = 0;
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n; ++id) {
    if (t->is_text_[id] && vocab.token_bytes[id].empty()) t->is_text_[id] = 0;
    if (t->is_text_[id]) order.push_back(id);
  }
  const auto& bytes = vocab.token_bytes;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  // Preorder construction from sorted strings: a token's nodes past its common prefix with
  // the previous token are new, and its terminal node is always the newest node.
  t->nodes_.push_back({0, 0, 0, 0, 0, 0});
  std::vector<uint32_t> path = {0};
  auto close = [&]() {
    const uint32_t node = path.back();
    t->nodes_[node].subtree_end = static_cast<uint32_t>(t->nodes_.size());
    t->nodes_[node].subtree_token_end = static_cast<uint32_t>(t->tokens_.size());
    path.pop_back();
    if (!path.empty()) t->nodes_[path.back()].classes |= t->nodes_[node].classes;
  };
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view s = bytes[id];
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp + 1) close();
    for (size_t d = lcp; d < s.size(); ++d) {
      KV_CHECK(d + 1 < 65535) << "token too long";
      t->nodes_.push_back({0, static_cast<uint32_t>(t->tokens_.size()), 0,
                           uint32_t{1} << ByteClass(static_cast<uint8_t>(s[d])), static_cast<uint16_t>(d + 1),
                           static_cast<uint8_t>(s[d])});
      path.push_back(static_cast<uint32_t>(t->nodes_.size()) - 1);
    }
    t->max_depth_ = std::max(t->max_depth_, static_cast<int>(s.size()));
    t->tokens_.push_back(id);
    prev = s;
  }
  while (!path.empty()) close();
  // Sentinel: closes the last node's token range.
  t->nodes_.push_back({static_cast<uint32_t>(t->nodes_.size()) + 1, static_cast<uint32_t>(t->tokens_.size()),
                       static_cast<uint32_t>(t->tokens_.size()), 0, 0, 0});
  return t;
}

size_t TokenTrie::memory_bytes() const {
  size_t b = nodes_.size() * sizeof(Node) + tokens_.size() * sizeof(int32_t) + is_text_.size();
  for (const auto& s : token_bytes_) b += s.size() + sizeof(s);
  return b;
}

TokenMasker::TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
                         std::shared_ptr<const TokenTrie> trie, const TokenMaskerOptions& options)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), options_(options) {
  KV_CHECK(grammar_ != nullptr && trie_ != nullptr);
  num_words_ = (trie_->vocab_size() + 63) / 64;
  walk_states_.resize(static_cast<size_t>(trie_->max_depth()) + 2);
}

void TokenMasker::DropMasks() {
  for (auto& m : masks_) std::vector<uint64_t>().swap(m);
  mask_bytes_ = 0;
}

void TokenMasker::Reset() {
  states_.clear();
  complete_.clear();
  transitions_.clear();
  ids_.clear();
  masks_.clear();
  mask_bytes_ = 0;
  ++generation_;
  ++stats_.cache_resets;
}

int32_t TokenMasker::Intern(GrammarMatcher m) {
  std::string key;
  m.AppendKey(&key);
  auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (inserted) {
    complete_.push_back(m.IsComplete() ? 1 : 0);
    states_.push_back(std::move(m));
    transitions_.resize(transitions_.size() + 256, kUnknown);
    masks_.emplace_back();
  }
  return it->second;
}

int32_t TokenMasker::Next(int32_t state, uint8_t byte) {
  const size_t slot = static_cast<size_t>(state) * 256 + byte;
  int32_t t = transitions_[slot];
  if (t != kUnknown) return t;
  GrammarMatcher m = states_[state];
  t = m.AcceptByte(byte) ? Intern(std::move(m)) : kDead;
  transitions_[slot] = t;
  return t;
}

TokenMasker::State TokenMasker::Start() {
  State s{GrammarMatcher(grammar_), -1, 0, false};
  Resolve(&s);
  return s;
}

int32_t TokenMasker::Resolve(State* state) {
  if (state->generation != generation_ || state->id < 0) {
    if (static_cast<int32_t>(states_.size()) >= options_.max_states) Reset();
    state->id = Intern(state->matcher);
    state->generation = generation_;
  }
  return state->id;
}

void TokenMasker::ComputeMask(int32_t state, std::vector<uint64_t>* mask) {
  mask->assign(num_words_, 0);
  uint64_t* words = mask->data();
  const auto& nodes = trie_->nodes();
  const auto& tokens = trie_->tokens();
  int32_t* st = walk_states_.data();
  st[0] = state;
  // Byte classes on which `state` loops to itself: a subtree whose bytes all lie in them
  // (inside a JSON string, most of the vocabulary) is accepted whole without walking it.
  // The trie's first level has nearly every byte, so this costs no extra transitions.
  uint32_t self_loop = ~uint32_t{0};
  for (int b = 0; b < 256; ++b) {
    if (Next(state, static_cast<uint8_t>(b)) != state) self_loop &= ~(uint32_t{1} << TokenTrie::ByteClass(b));
  }
  const uint32_t num_nodes = static_cast<uint32_t>(nodes.size()) - 1;  // minus the sentinel
  uint32_t i = 1;
  int64_t visited = 0;
  while (i < num_nodes) {
    const TokenTrie::Node& node = nodes[i];
    // The next node is either i + 1 or, when this subtree is skipped, subtree_end: start
    // loading the latter now (the walk is bound by memory latency on large vocabularies).
    __builtin_prefetch(&nodes[node.subtree_end]);
    ++visited;
    const int32_t parent = st[node.depth - 1];
    int32_t t = transitions_[static_cast<size_t>(parent) * 256 + node.byte];
    if (t == kUnknown) t = Next(parent, node.byte);
    if (t < 0) {
      i = node.subtree_end;
      continue;
    }
    if (t == state && parent == state && (node.classes & ~self_loop) == 0) {
      for (uint32_t k = node.token_begin, e = node.subtree_token_end; k < e; ++k) {
        const int32_t id = tokens[k];
        words[id >> 6] |= uint64_t{1} << (id & 63);
      }
      i = node.subtree_end;
      continue;
    }
    st[node.depth] = t;
    for (uint32_t k = node.token_begin, e = nodes[i + 1].token_begin; k < e; ++k) {
      const int32_t id = tokens[k];
      words[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
  stats_.trie_nodes_visited += visited;
  if (complete_[state]) {
    for (int32_t id : trie_->eos_token_ids()) words[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

const std::vector<uint64_t>& TokenMasker::Mask(State* state) {
  if (state->finished) {
    // Nothing may follow EOS.
    masks_scratch_.assign(num_words_, 0);
    return masks_scratch_;
  }
  const int32_t s = Resolve(state);
  if (!masks_[s].empty()) {
    ++stats_.mask_hits;
    return masks_[s];
  }
  ++stats_.mask_misses;
  const size_t bytes = static_cast<size_t>(num_words_) * sizeof(uint64_t);
  if (mask_bytes_ + bytes > options_.max_mask_bytes) DropMasks();
  ComputeMask(s, &masks_[s]);
  mask_bytes_ += bytes;
  return masks_[s];
}

bool TokenMasker::Advance(State* state, int32_t token_id) {
  if (state->finished || token_id < 0 || token_id >= trie_->vocab_size()) return false;
  int32_t s = Resolve(state);
  if (!trie_->is_text_token(token_id)) {
    const auto& eos = trie_->eos_token_ids();
    if (complete_[s] && std::find(eos.begin(), eos.end(), token_id) != eos.end()) {
      state->finished = true;
      return true;
    }
    return false;
  }
  for (char c : trie_->token_bytes(token_id)) {
    s = Next(s, static_cast<uint8_t>(c));
    if (s < 0) return false;
  }
  state->matcher = states_[s];
  state->id = s;
  return true;
}

TokenMaskerStats TokenMasker::stats() const {
  TokenMaskerStats s = stats_;
  s.num_states = static_cast<int64_t>(states_.size());
  s.num_cached_masks = 0;
  for (const auto& m : masks_) s.num_cached_masks += m.empty() ? 0 : 1;
  return s;
}

void TokenMasker::check_invariants() const {
  KV_CHECK_EQ(transitions_.size(), 256 * states_.size());
  KV_CHECK_EQ(masks_.size(), states_.size());
  KV_CHECK_EQ(complete_.size(), states_.size());
  KV_CHECK_EQ(ids_.size(), states_.size());
  size_t bytes = 0;
  for (const auto& m : masks_) bytes += m.size() * sizeof(uint64_t);
  KV_CHECK_EQ(bytes, mask_bytes_);
}

}  // namespace kvserve::grammar

namespace kvserve::grammar {

int64_t ApplyTokenMask(const std::vector<uint64_t>& mask, int32_t vocab_size, float* logits,
                       int64_t num_logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t allowed = 0;
  const int64_t n = std::min<int64_t>(num_logits, vocab_size);
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = mask[w];
    const int64_t end = std::min<int64_t>(n, (w + 1) * 64);
    if (end - w * 64 == 64) {
      if (bits == ~uint64_t{0}) {
        allowed += 64;
        continue;
      }
      if (bits == 0) {
        std::fill(logits + w * 64, logits + end, kNegInf);
        continue;
      }
    }
    for (int64_t i = w * 64; i < end; ++i) {
      if ((bits >> (i & 63)) & 1) {
        ++allowed;
      } else {
        logits[i] = kNegInf;
      }
    }
  }
  for (int64_t i = n; i < num_logits; ++i) logits[i] = kNegInf;
  return allowed;
}

}  // namespace kvserve::grammar
