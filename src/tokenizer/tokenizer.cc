#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/wordpiece.h"

namespace kvserve {
namespace {

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

Status CheckId(const char* name, TokenId id, size_t num_tokens) {
  if (id == kNoToken) return OkStatus();
  if (id < 0 || static_cast<size_t>(id) >= num_tokens) {
    return InvalidArgumentError(std::string(name) + " id " + std::to_string(id) +
                                " is out of range for a vocabulary of " +
                                std::to_string(num_tokens) + " tokens");
  }
  return OkStatus();
}

Status ValidateSpec(VocabSpec* spec) {
  const size_t n = spec->tokens.size();
  if (n == 0) return InvalidArgumentError("vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgumentError("vocabulary too large");
  if (spec->token_types.empty()) spec->token_types.assign(n, TokenType::kNormal);
  if (spec->token_types.size() != n) {
    return InvalidArgumentError("vocabulary has " + std::to_string(spec->token_types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
  }
  for (TokenType t : spec->token_types) {
    const auto v = static_cast<int32_t>(t);
    if (v < 0 || v > static_cast<int32_t>(TokenType::kByte)) {
      return InvalidArgumentError("invalid token type " + std::to_string(v));
    }
  }
  if (!spec->scores.empty() && spec->scores.size() != n) {
    return InvalidArgumentError("vocabulary has " + std::to_string(spec->scores.size()) +
                                " scores for " + std::to_string(n) + " tokens");
  }
  KV_RETURN_IF_ERROR(CheckId("BOS", spec->bos_id, n));
  KV_RETURN_IF_ERROR(CheckId("EOS", spec->eos_id, n));
  KV_RETURN_IF_ERROR(CheckId("UNK", spec->unk_id, n));
  KV_RETURN_IF_ERROR(CheckId("PAD", spec->pad_id, n));
  KV_RETURN_IF_ERROR(CheckId("SEP", spec->sep_id, n));
  KV_RETURN_IF_ERROR(CheckId("CLS", spec->cls_id, n));
  KV_RETURN_IF_ERROR(CheckId("MASK", spec->mask_id, n));
  for (TokenId id : spec->eog_ids) KV_RETURN_IF_ERROR(CheckId("end-of-generation", id, n));
  if (spec->add_bos && spec->bos_id == kNoToken &&
      !(spec->model == VocabSpec::Model::kWpm && spec->cls_id != kNoToken)) {
    return InvalidArgumentError("vocabulary asks for BOS but has no BOS token");
  }
  if (spec->add_eos && spec->eos_id == kNoToken) {
    return InvalidArgumentError("vocabulary asks for EOS but has no EOS token");
  }
  return OkStatus();
}

}  // namespace

TokenIndex BuildTokenIndex(const std::vector<std::string>& tokens) {
  TokenIndex index;
  index.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index[tokens[i]] = static_cast<TokenId>(i);
  return index;
}

std::vector<TextFragment> SplitSpecialTokens(std::string_view text, const VocabSpec& spec,
                                             const std::vector<TokenId>& special_ids,
                                             bool parse_special) {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text, kNoToken});
  std::vector<TextFragment> next;
  for (TokenId id : special_ids) {
    const TokenType type = spec.token_types[static_cast<size_t>(id)];
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string& needle = spec.tokens[static_cast<size_t>(id)];
    if (needle.empty()) continue;
    next.clear();
    bool changed = false;
    for (const TextFragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t pos; (pos = rest.find(needle)) != std::string_view::npos;) {
        changed = true;
        if (pos > 0) next.push_back({rest.substr(0, pos), kNoToken});
        next.push_back({{}, id});
        rest.remove_prefix(pos + needle.size());
      }
      if (!rest.empty()) next.push_back({rest, kNoToken});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

Tokenizer::Tokenizer(VocabSpec spec) : spec_(std::move(spec)) {
  max_bytes_per_token_ = 4;
  for (const std::string& t : spec_.tokens) {
    max_bytes_per_token_ = std::max<int64_t>(max_bytes_per_token_, static_cast<int64_t>(t.size()));
  }
  if (spec_.model == VocabSpec::Model::kWpm) max_bytes_per_token_ = INT64_MAX;
}

VocabTokenizer::VocabTokenizer(VocabSpec spec)
    : Tokenizer(std::move(spec)), token_index_(BuildTokenIndex(spec_.tokens)) {
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    if (IsSpecialType(spec_.token_types[i])) special_ids_.push_back(static_cast<TokenId>(i));
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(), [this](TokenId a, TokenId b) {
    return spec_.tokens[static_cast<size_t>(a)].size() > spec_.tokens[static_cast<size_t>(b)].size();
  });
}

std::vector<TokenId> VocabTokenizer::Encode(std::string_view text,
                                            const EncodeOptions& options) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  const bool wpm = spec_.model == VocabSpec::Model::kWpm;
  const TokenId bos = (wpm && spec_.bos_id == kNoToken) ? spec_.cls_id : spec_.bos_id;
  const bool add_bos = options.add_bos && spec_.add_bos && bos != kNoToken;
  if (add_bos) out.push_back(bos);
  bool after_special = true;
  for (const TextFragment& f :
       SplitSpecialTokens(text, spec_, special_ids_, options.parse_special)) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
    } else {
      EncodeText(f.text, after_special, &out);
      after_special = false;
    }
  }
  // BERT: [CLS] text [SEP], whatever add_eos says (llama.cpp's WPM ignores it: the current
  // converter writes add_eos with eos = [SEP], which must not give a second [SEP]). Others: EOS
  // with the special tokens when the vocabulary asks for it (llama.cpp's add_special).
  if (wpm && add_bos && spec_.sep_id != kNoToken) out.push_back(spec_.sep_id);
  if (!wpm && options.add_bos && spec_.add_eos && spec_.eos_id != kNoToken) {
    out.push_back(spec_.eos_id);
  }
  return out;
}

std::string ReplaceSpaceMarkers(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      i += kSpaceMarker.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

std::string VocabTokenizer::TokenToPiece(TokenId id, bool special) const {
  if (!in_range(id)) return {};
  const std::string& text = spec_.tokens[static_cast<size_t>(id)];
  switch (type_of(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return special ? text : std::string();
    case TokenType::kUserDefined:
      return text;
    default:
      return NormalPiece(id, text);
  }
}

std::string VocabTokenizer::Decode(const std::vector<TokenId>& ids, bool special) const {
  std::string out;
  bool strip = DecodeStripsLeadingSpace();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = TokenToPiece(ids[i], special);
    if (i == 0 && ids[i] == spec_.bos_id) {
      out += piece;  // the dummy-prefix space to strip is on the piece after BOS
      continue;
    }
    if (strip && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip = false;
    out += piece;
  }
  return out;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(VocabSpec spec) {
  KV_RETURN_IF_ERROR(ValidateSpec(&spec));
  switch (spec.model) {
    case VocabSpec::Model::kSpm:
      return SpmTokenizer::Create(std::move(spec));
    case VocabSpec::Model::kBpe:
      return BpeTokenizer::Create(std::move(spec));
    case VocabSpec::Model::kWpm:
      return WordPieceTokenizer::Create(std::move(spec));
  }
  return InvalidArgumentError("unknown vocabulary model");
}

bool Tokenizer::IsEndOfGeneration(TokenId id) const {
  if (id == kNoToken) return false;
  if (id == spec_.eos_id) return true;
  return std::find(spec_.eog_ids.begin(), spec_.eog_ids.end(), id) != spec_.eog_ids.end();
}

}  // namespace kvserve
