#include "tokenizer/bpe_tokenizer.h"

namespace kvserve {

StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(VocabSpec spec) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<BpeEncoder> encoder, BpeEncoder::Create(spec));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(spec)));
  t->encoder_ = std::move(encoder);
  return std::unique_ptr<Tokenizer>(std::move(t));
}

void BpeTokenizer::EncodeText(std::string_view text, bool /*after_special*/,
                              std::vector<TokenId>* out) const {
  encoder_->Encode(text, out);
}

std::string BpeTokenizer::TokenToPiece(TokenId id, bool special) const {
  if (!in_range(id)) return {};
  const std::string& text = spec_.tokens[static_cast<size_t>(id)];
  switch (type_of(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return special ? text : std::string();
    case TokenType::kUserDefined:
      return text;
    case TokenType::kNormal:
      return ByteLevelDecode(text);
    default:
      return {};
  }
}

}  // namespace kvserve
