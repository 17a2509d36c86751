// Byte-level BPE tokenizer (GPT-2 family): special tokens are split out here, the ordinary
// text goes through a BpeEncoder (bpe.h), pieces are decoded with ByteLevelDecode.
// Immutable after Create: thread-safe.
#pragma once

#include <memory>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer_impl.h"

namespace kvserve {

class BpeTokenizer final : public VocabTokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);


 protected:
  std::string NormalPiece(TokenId id, const std::string& text) const override;
  void EncodeText(std::string_view text, bool after_special,
                  std::vector<TokenId>* out) const override;

 private:
  explicit BpeTokenizer(VocabSpec spec) : VocabTokenizer(std::move(spec)) {}

  std::unique_ptr<BpeEncoder> encoder_;  // owned; encodes text without special tokens
};

}  // namespace kvserve
