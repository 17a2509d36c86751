#include "tokenizer/bpe.h"

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/pre_tokenizer.h"

namespace kvserve {
namespace {

// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order. kByteToText holds the UTF-8 of each byte's character.
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 512> cpt_to_byte;  // code point (< 512) -> byte, or -1

  ByteLevelTables() {
    cpt_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cpt = printable ? b : next++;
      cpt_to_byte[cpt] = b;
      std::string& s = byte_to_text[b];
      if (cpt < 0x80) {
        s.push_back(static_cast<char>(cpt));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        s.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
      }
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables* tables = new ByteLevelTables();
  return *tables;
}

// Length of the UTF-8 sequence a lead byte announces (1 for stray continuation bytes).
size_t Utf8Len(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Separates left and right in merge-rank keys; 0xFF never occurs in UTF-8.
constexpr char kMergeSeparator = '\xff';

// Implements llama.cpp's llm_tokenizer_bpe: per pre-token, start from its characters and
// repeatedly merge the adjacent pair of lowest rank (leftmost first on ties).
// Owns the pre-tokenizer and the lookup tables, immutable after construction, and a bounded
// cache of encoded pre-tokens (sharded, each shard behind its own mutex). Thread-safe.
class ByteLevelBpeEncoder final : public BpeEncoder {
 public:
  ByteLevelBpeEncoder(std::unique_ptr<PreTokenizer> pre, bool ignore_merges,
                      bool add_prefix_space)
      : pre_(std::move(pre)), ignore_merges_(ignore_merges),
        add_prefix_space_(add_prefix_space) {}

  Status Init(const VocabSpec& spec) {
    token_to_id_.reserve(spec.tokens.size());
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
      if (spec.tokens[i].empty()) continue;
      token_to_id_[spec.tokens[i]] = static_cast<TokenId>(i);  // the last duplicate wins
    }
    merge_rank_.reserve(spec.merges.size());
    std::string key;
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& merge = spec.merges[i];
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos || space + 1 >= merge.size()) {
        return InvalidArgumentError("BPE merge " + std::to_string(i) + " ('" + merge +
                                    "') is not of the form 'left right'");
      }
      key.assign(merge, 0, space);
      key.push_back(kMergeSeparator);
      key.append(merge, space + 1, std::string::npos);
      merge_rank_.emplace(key, static_cast<int>(i));  // the first duplicate wins
    }
    return OkStatus();
  }

  void Encode(std::string_view text, std::vector<TokenId>* out) const override {
    std::string prefixed;
    if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    Scratch scratch;
    for (const std::string& piece : pre_->Split(text)) {
      scratch.word = ByteLevelEncode(piece);
      if (scratch.word.size() > kMaxCachedWordBytes) {
        EncodeWord(&scratch, out);
        continue;
      }
      CacheShard& shard = cache_[std::hash<std::string>()(scratch.word) % kNumCacheShards];
      {
        std::lock_guard<std::mutex> lock(shard.mu);
        const auto it = shard.words.find(scratch.word);
        if (it != shard.words.end()) {
          out->insert(out->end(), it->second.begin(), it->second.end());
          continue;
        }
      }
      const size_t first = out->size();
      EncodeWord(&scratch, out);
      std::lock_guard<std::mutex> lock(shard.mu);
      if (shard.words.size() >= kMaxCachedWordsPerShard) shard.words.clear();
      shard.words.emplace(scratch.word, std::vector<TokenId>(out->begin() + first, out->end()));
    }
  }

 private:
  struct Symbol {
    uint32_t start;
    uint32_t len;  // 0 once merged into its left neighbour
    int prev;
    int next;
  };
  struct Bigram {
    int rank;
    int left;
    int right;
    uint32_t left_len;
    uint32_t right_len;
  };
  struct BigramAfter {  // priority_queue top = lowest rank, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };
  struct Scratch {
    std::string word;
    std::string key;
    std::vector<Symbol> symbols;
    std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  };

  TokenId Lookup(Scratch* s, size_t start, size_t len) const {
    s->key.assign(s->word, start, len);
    const auto it = token_to_id_.find(s->key);
    return it == token_to_id_.end() ? kNoToken : it->second;
  }

  void AddBigram(Scratch* s, int left, int right) const {
    if (left < 0 || right < 0) return;
    const Symbol& l = s->symbols[left];
    const Symbol& r = s->symbols[right];
    s->key.assign(s->word, l.start, l.len);
    s->key.push_back(kMergeSeparator);
    s->key.append(s->word, r.start, r.len);
    const auto it = merge_rank_.find(s->key);
    if (it == merge_rank_.end()) return;
    s->queue.push(Bigram{it->second, left, right, l.len, r.len});
  }

  void EncodeWord(Scratch* s, std::vector<TokenId>* out) const {
    const std::string& word = s->word;
    if (word.empty()) return;
    if (ignore_merges_) {
      const TokenId id = Lookup(s, 0, word.size());
      if (id != kNoToken) {
        out->push_back(id);
        return;
      }
    }
    std::vector<Symbol>& symbols = s->symbols;
    symbols.clear();
    for (size_t pos = 0; pos < word.size();) {
      const size_t len = std::min(word.size() - pos, Utf8Len(static_cast<uint8_t>(word[pos])));
      const int index = static_cast<int>(symbols.size());
      symbols.push_back(Symbol{static_cast<uint32_t>(pos), static_cast<uint32_t>(len),
                               index - 1, pos + len == word.size() ? -1 : index + 1});
      pos += len;
    }
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) AddBigram(s, i - 1, i);
    while (!s->queue.empty()) {
      const Bigram bigram = s->queue.top();
      s->queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      // Stale entry: one side has changed (or was merged away) since it was queued.
      if (left.len != bigram.left_len || right.len != bigram.right_len || right.len == 0 ||
          left.len == 0) {
        continue;
      }
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      AddBigram(s, left.prev, bigram.left);
      AddBigram(s, bigram.left, left.next);
    }
    for (int i = 0; i >= 0; i = symbols[i].next) {
      const Symbol& sym = symbols[i];
      const TokenId id = Lookup(s, sym.start, sym.len);
      if (id != kNoToken) {
        out->push_back(id);
        continue;
      }
      // Not in the vocabulary (a merge whose result is missing): fall back to single-byte
      // entries, as llama.cpp does; bytes without one are dropped.
      for (uint32_t k = 0; k < sym.len; ++k) {
        const TokenId byte_id = Lookup(s, sym.start + k, 1);
        if (byte_id != kNoToken) out->push_back(byte_id);
      }
    }
  }

  static constexpr size_t kNumCacheShards = 16;
  static constexpr size_t kMaxCachedWordsPerShard = 4096;
  static constexpr size_t kMaxCachedWordBytes = 64;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>> words;  // byte-level word -> ids
  };

  std::unique_ptr<PreTokenizer> pre_;
  mutable std::array<CacheShard, kNumCacheShards> cache_;
  bool ignore_merges_;
  bool add_prefix_space_;
  std::unordered_map<std::string, TokenId> token_to_id_;
  std::unordered_map<std::string, int> merge_rank_;  // "left\xffright" -> rank
};

}  // namespace

StatusOr<std::unique_ptr<BpeEncoder>> BpeEncoder::Create(const VocabSpec& spec) {
  if (spec.model != VocabSpec::Model::kBpe) {
    return InvalidArgumentError("BpeEncoder needs a byte-level BPE vocabulary");
  }
  if (spec.tokens.empty()) return InvalidArgumentError("BPE vocabulary has no tokens");
  if (spec.merges.empty()) return InvalidArgumentError("BPE vocabulary has no merges");
  std::vector<std::string> regexes = spec.pre_regexes;
  bool ignore_merges = spec.bpe_ignore_merges;
  if (regexes.empty()) {
    auto named = PreTokenizerRegexes(spec.pre);
    if (!named.ok()) return InvalidArgumentError(named.status().message());
    regexes = std::move(named).value();
    ignore_merges = ignore_merges || PreTokenizerIgnoresMerges(spec.pre);
  }
  KV_ASSIGN_OR_RETURN(auto pre, PreTokenizer::Create(regexes));
  auto encoder = std::make_unique<ByteLevelBpeEncoder>(std::move(pre), ignore_merges,
                                                       spec.bpe_add_prefix_space);
  KV_RETURN_IF_ERROR(encoder->Init(spec));
  return std::unique_ptr<BpeEncoder>(std::move(encoder));
}

std::string ByteLevelEncode(std::string_view bytes) {
  const ByteLevelTables& t = Tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += t.byte_to_text[static_cast<uint8_t>(c)];
  return out;
}

std::string ByteLevelDecode(std::string_view token_text) {
  const ByteLevelTables& t = Tables();
  std::string out;
  out.reserve(token_text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(token_text.data());
  const size_t n = token_text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      const int b = t.cpt_to_byte[c];
      out.push_back(static_cast<char>(b >= 0 ? b : c));
      ++i;
      continue;
    }
    // Two-byte characters cover U+0080..U+07FF, which includes the whole alphabet.
    if ((c & 0xE0) == 0xC0 && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
      const uint32_t cpt = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
      if (cpt < 512 && t.cpt_to_byte[cpt] >= 0) {
        out.push_back(static_cast<char>(t.cpt_to_byte[cpt]));
        i += 2;
        continue;
      }
    }
    // Outside the alphabet: pass the character (or stray byte) through unchanged.
    const size_t len = std::min(n - i, Utf8Len(c));
    out.append(token_text.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace kvserve
