#include "tokenizer/spm.h"

#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {


// A symbol of the merge loop: a span of the (escaped) text, linked to its neighbours.
struct Symbol {
  size_t offset = 0;
  size_t num_bytes = 0;  // 0 once merged into its left neighbour
  int prev = -1;
  int next = -1;
  bool mergeable = true;
};

struct Bigram {
  int left = 0;
  int right = 0;
  float score = 0.0f;
  size_t num_bytes = 0;
  TokenId id = kNoToken;
};

// Best score first; on ties the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    value = value * 16 + d;
  }
  return value;
}

}  // namespace

SpmTokenizer::SpmTokenizer(VocabSpec spec) : VocabTokenizer(std::move(spec)) {
  byte_tokens_.fill(kNoToken);
  for (int b = 0; b < 256; ++b) {
    if (spec_.llama2c_format) {
      byte_tokens_[b] = 3 + b;
      continue;
    }
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    TokenId id = FindToken(name);
    if (id == kNoToken) id = FindToken(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_tokens_[b] = id;
  }
}

StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizer::Create(VocabSpec spec) {
  if (spec.scores.size() != spec.tokens.size()) {
    return InvalidArgumentError("SPM vocabulary needs one score per token (" +
                                std::to_string(spec.scores.size()) + " scores for " +
                                std::to_string(spec.tokens.size()) + " tokens)");
  }
  if (spec.llama2c_format && spec.tokens.size() < 259) {
    return InvalidArgumentError("llama2.c vocabulary needs byte tokens 3..258 but has only " +
                                std::to_string(spec.tokens.size()) + " tokens");
  }
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer(std::move(spec)));
  for (int b = 0; b < 256; ++b) {
    if (t->byte_tokens_[b] == kNoToken && t->spec_.unk_id == kNoToken) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      return InvalidArgumentError(std::string("SPM vocabulary has no byte token ") + name +
                                  " and no unknown token to fall back to");
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void SpmTokenizer::EncodeText(std::string_view raw, bool after_special,
                              std::vector<TokenId>* out) const {
  std::string text;
  if (spec_.add_space_prefix && after_special) text = " ";
  text.append(raw);
  if (!spec_.llama2c_format) {
    std::string escaped;
    escaped.reserve(text.size() + text.size() / 2);
    for (char c : text) {
      if (c == ' ') escaped.append(kSpaceMarker);
      else escaped.push_back(c);
    }
    text = std::move(escaped);
  }
  if (text.empty()) return;
  const std::string_view view(text);

  // One symbol per UTF-8 character (judged by its lead byte, like llama.cpp).
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    Symbol s;
    s.offset = offset;
    s.num_bytes = std::min(Utf8SequenceLength(static_cast<uint8_t>(text[offset])),
                           text.size() - offset);
    offset += s.num_bytes;
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = offset == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
    // llama2.c turns characters that are not tokens into byte tokens before merging, so
    // they never merge; SentencePiece (llama.cpp) may still merge them.
    if (spec_.llama2c_format) s.mergeable = FindToken(view.substr(s.offset, s.num_bytes)) != kNoToken;
    symbols.push_back(s);
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    if (!l.mergeable || !r.mergeable) return;
    const TokenId id = FindToken(view.substr(l.offset, l.num_bytes + r.num_bytes));
    if (id == kNoToken) return;
    queue.push(Bigram{left, right, spec_.scores[static_cast<size_t>(id)],
                      l.num_bytes + r.num_bytes, id});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(b.left)];
    Symbol& r = symbols[static_cast<size_t>(b.right)];
    // Stale: one side was merged away or grew since this pair was queued.
    if (l.num_bytes == 0 || r.num_bytes == 0 || l.num_bytes + r.num_bytes != b.num_bytes) continue;
    l.num_bytes += r.num_bytes;
    r.num_bytes = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = view.substr(s.offset, s.num_bytes);
    const TokenId id = FindToken(piece);
    if (id != kNoToken && (!spec_.llama2c_format || s.mergeable)) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      out->push_back(byte_id != kNoToken ? byte_id : spec_.unk_id);
    }
  }
}

int SpmTokenizer::TokenByte(TokenId id) const {
  if (spec_.llama2c_format && id >= 3 && id < 259) return id - 3;
  return ParseByteToken(spec_.tokens[static_cast<size_t>(id)]);
}

std::string SpmTokenizer::NormalPiece(TokenId id, const std::string& text) const {
  switch (type_of(id)) {
    case TokenType::kByte: {
      const int b = TokenByte(id);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : std::string();
    }
    case TokenType::kNormal: {
      if (spec_.llama2c_format) {
        // llama2.c decode(): pieces that look like <0xXX> are raw bytes too.
        const int b = ParseByteToken(text);
        return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
      }
      return ReplaceSpaceMarkers(text);
    }
    default:
      return {};  // unused / undefined tokens render as nothing (llama.cpp)
  }
}

}  // namespace kvserve
