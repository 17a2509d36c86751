// SentencePiece-style BPE (llama.cpp's SPM tokenizer; also llama2.c tokenizer files): the text
// gets a dummy-prefix space, spaces become U+2581 (not for llama2.c files), then adjacent
// symbols (UTF-8 characters at first) are merged, always the pair whose merged text is the
// vocabulary token with the best score (leftmost on ties), until no pair forms a token.
// Symbols that are not tokens become byte tokens (<0xXX>, or 3 + byte for llama2.c files) or
// unk. Immutable after Create: thread-safe.
#pragma once

#include <array>
#include <memory>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

namespace kvserve {

class SpmTokenizer final : public VocabTokenizer {
 public:
  // `spec.model` must be kSpm; validated by Tokenizer::Create before this is called.
  static StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);


 protected:
  std::string NormalPiece(TokenId id, const std::string& text) const override;
  void EncodeText(std::string_view text, bool after_special,
                  std::vector<TokenId>* out) const override;
  bool DecodeStripsLeadingSpace() const override { return spec_.add_space_prefix; }

 private:
  explicit SpmTokenizer(VocabSpec spec);
  // The byte of a byte token (from its <0xXX> text, or id - 3 for llama2.c files); -1 if none.
  int TokenByte(TokenId id) const;

  std::array<TokenId, 256> byte_tokens_{};  // byte -> token used for byte fallback
};

}  // namespace kvserve
