// BERT's WordPiece vocabularies in Hugging Face's layouts (tokenizer.json's WordPiece model is
// parsed in hf_tokenizer_json.cc; vocab.txt here) -> the VocabSpec llama.cpp's converter
// writes, which the WordPiece tokenizer (wordpiece.h) runs.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/hf_tokenizer_json.h"

namespace kvserve {

StatusOr<VocabSpec> WordPieceVocabFromHf(std::vector<std::string> tokens,
                                         std::vector<TokenType> token_types,
                                         const std::string& continuing_subword_prefix,
                                         bool lowercase) {
  if (!lowercase) {
    return UnimplementedError(
        "a cased WordPiece tokenizer (lowercase false) is not supported: the WordPiece "
        "tokenizer lowercases and strips accents, as llama.cpp's does");
  }
  if (tokens.empty()) return InvalidArgumentError("the WordPiece vocabulary is empty");
  if (token_types.empty()) token_types.assign(tokens.size(), TokenType::kNormal);
  if (token_types.size() != tokens.size()) {
    return InvalidArgumentError("WordPiece token types do not match the tokens");
  }
  VocabSpec spec;
  spec.model = VocabSpec::Model::kWpm;
  spec.add_bos = true;
  spec.add_space_prefix = false;
  spec.byte_fallback = false;
  const std::string kWordStart = "\xE2\x96\x81";  // U+2581
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    const bool bracketed = t.size() >= 2 && t.front() == '[' && t.back() == ']';
    if (bracketed) continue;  // [CLS], [unused0], ... as they are
    if (!continuing_subword_prefix.empty() && t.starts_with(continuing_subword_prefix) &&
        t.size() > continuing_subword_prefix.size()) {
      t.erase(0, continuing_subword_prefix.size());
    } else {
      t = kWordStart + t;
    }
  }
  auto find = [&](const char* text) -> TokenId {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<TokenId>(i);
    }
    return kNoToken;
  };
  spec.unk_id = find("[UNK]");
  spec.cls_id = find("[CLS]");
  spec.bos_id = spec.cls_id;
  spec.sep_id = find("[SEP]");
  spec.pad_id = find("[PAD]");
  spec.mask_id = find("[MASK]");
  if (spec.cls_id == kNoToken || spec.sep_id == kNoToken || spec.unk_id == kNoToken) {
    return InvalidArgumentError("the WordPiece vocabulary lacks [CLS], [SEP] or [UNK]");
  }
  for (TokenId id : {spec.unk_id, spec.cls_id, spec.sep_id, spec.pad_id, spec.mask_id}) {
    if (id != kNoToken) token_types[static_cast<size_t>(id)] = TokenType::kControl;
  }
  spec.tokens = std::move(tokens);
  spec.token_types = std::move(token_types);
  return spec;
}

StatusOr<VocabSpec> LoadHfWordPieceVocabTxt(const std::string& vocab_txt_path) {
  std::ifstream in(vocab_txt_path, std::ios::binary);
  if (!in) return NotFoundError("cannot open '" + vocab_txt_path + "'");
  std::vector<std::string> tokens;
  std::string line;
  constexpr size_t kMaxTokens = size_t{1} << 22;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {
      return InvalidArgumentError(vocab_txt_path + ": line " + std::to_string(tokens.size() + 1) +
                                  " is empty");
    }
    tokens.push_back(std::move(line));
    if (tokens.size() > kMaxTokens) {
      return InvalidArgumentError(vocab_txt_path + ": more than 4M tokens");
    }
  }
  if (in.bad()) return DataLossError("cannot read '" + vocab_txt_path + "'");
  auto spec = WordPieceVocabFromHf(std::move(tokens), {}, "##", /*lowercase=*/true);
  if (!spec.ok()) return spec.status().WithContext(vocab_txt_path);
  return spec;
}

}  // namespace kvserve
