// WordPiece (BERT) tokenizer as llama.cpp's WPM: the GGUF vocabulary stores word-initial
// pieces with a U+2581 prefix and continuation pieces bare ("##" removed). Text is
// normalized (accents stripped to the NFD base letter, lowercased, controls dropped), split
// on whitespace, punctuation, ASCII symbols and CJK ideographs, then each word is matched
// greedily longest-first; a word with an unmatched position becomes [UNK].
// Immutable after Create: thread-safe.
#pragma once

#include <memory>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

namespace kvserve {

class WordPieceTokenizer final : public VocabTokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);


  // The normalized words of `text` (exposed for tests).
  static std::vector<std::string> SplitWords(std::string_view text);

 protected:
  std::string NormalPiece(TokenId id, const std::string& text) const override;
  void EncodeText(std::string_view text, bool after_special,
                  std::vector<TokenId>* out) const override;
  bool DecodeStripsLeadingSpace() const override { return true; }

 private:
  explicit WordPieceTokenizer(VocabSpec spec);

  size_t max_token_bytes_ = 0;
};

}  // namespace kvserve
