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

std::string BpeTokenizer::NormalPiece(TokenId id, const std::string& text) const {
  return type_of(id) == TokenType::kNormal ? ByteLevelDecode(text) : std::string();
}

}  // namespace kvserve
