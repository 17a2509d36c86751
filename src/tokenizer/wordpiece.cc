#include "tokenizer/wordpiece.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {


// The CJK ideograph blocks of BERT's _is_chinese_char (including its 0x2B920 quirk).
bool IsCjkIdeograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(VocabSpec spec) : VocabTokenizer(std::move(spec)) {
  for (const std::string& t : spec_.tokens) max_token_bytes_ = std::max(max_token_bytes_, t.size());
}

StatusOr<std::unique_ptr<Tokenizer>> WordPieceTokenizer::Create(VocabSpec spec) {
  if (spec.unk_id == kNoToken) {
    return InvalidArgumentError("WordPiece vocabulary needs an unknown token ([UNK])");
  }
  return std::unique_ptr<Tokenizer>(new WordPieceTokenizer(std::move(spec)));
}

std::vector<std::string> WordPieceTokenizer::SplitWords(std::string_view text) {
  std::vector<std::string> words(1);
  for (uint32_t cp : Utf8ToCodepoints(text)) {
    cp = UnicodeNfdFirst(cp);
    const CodepointFlags flags = GetCodepointFlags(cp);
    if (flags.is_whitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || flags.is_control) continue;
    std::string s;
    AppendUtf8(UnicodeToLower(cp), &s);
    if (flags.is_punctuation || (cp < 0x7F && flags.is_symbol) || IsCjkIdeograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);  // a word of its own
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WordPieceTokenizer::EncodeText(std::string_view text, bool /*after_special*/,
                                    std::vector<TokenId>* out) const {
  for (const std::string& word : SplitWords(text)) {
    if (word.empty()) continue;
    const std::string marked = std::string(kSpaceMarker) + word;
    const std::string_view view(marked);
    const size_t start_size = out->size();
    for (size_t i = 0; i < view.size();) {
      bool matched = false;
      for (size_t j = std::min(view.size(), i + max_token_bytes_ + 1); j > i; --j) {
        const TokenId id = FindToken(view.substr(i, j - i));
        if (id != kNoToken) {
          out->push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {
        out->resize(start_size);  // the whole word becomes [UNK]
        break;
      }
    }
    if (out->size() == start_size) out->push_back(spec_.unk_id);
  }
}

std::string WordPieceTokenizer::NormalPiece(TokenId id, const std::string& text) const {
  return type_of(id) == TokenType::kNormal ? ReplaceSpaceMarkers(text) : std::string();
}

}  // namespace kvserve
