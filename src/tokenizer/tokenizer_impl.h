// Shared machinery of the Tokenizer implementations (SPM, byte-level BPE, WordPiece): the
// token-text index, special-token splitting, BOS/EOS handling. Internal to src/tokenizer.
// Immutable after construction: thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvserve {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, TokenId, StringViewHash, std::equal_to<>>;

// Text -> id for every token (a later duplicate text wins, as in llama.cpp).
TokenIndex BuildTokenIndex(const std::vector<std::string>& tokens);

// A piece of the input: either raw text to run through the model, or a special token.
struct TextFragment {
  std::string_view text;      // raw text (when token == kNoToken)
  TokenId token = kNoToken;   // a special token matched in the input
};

// Splits `text` on the texts of special tokens the way llama.cpp does: tokens are tried in
// order of decreasing text length, each one splitting every remaining raw fragment at all of
// its non-overlapping occurrences. User-defined tokens always split; control and unknown
// tokens only when `parse_special`.
std::vector<TextFragment> SplitSpecialTokens(std::string_view text, const VocabSpec& spec,
                                             const std::vector<TokenId>& special_ids,
                                             bool parse_special);

// SentencePiece's word-boundary marker U+2581, which SPM and WordPiece vocabularies use for
// a space.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";
// `text` with every U+2581 replaced by a space.
std::string ReplaceSpaceMarkers(std::string_view text);

// Base of the three implementations. Subclasses encode raw text fragments and render the
// pieces of normal and byte tokens.
class VocabTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string Decode(const std::vector<TokenId>& ids, bool special) const override;
  // Out-of-range ids render as nothing; control and unknown tokens as their text only when
  // `special`; user-defined tokens as their text; the rest through NormalPiece.
  std::string TokenToPiece(TokenId id, bool special) const override;

 protected:
  explicit VocabTokenizer(VocabSpec spec);

  // Appends the ids of a raw fragment. `after_special` is true for the first fragment and
  // for fragments that follow a special token (SPM adds its dummy-prefix space then).
  virtual void EncodeText(std::string_view text, bool after_special,
                          std::vector<TokenId>* out) const = 0;
  // The bytes of a token of type kNormal, kByte or another non-special type (unused and
  // undefined tokens render as nothing, as in llama.cpp).
  virtual std::string NormalPiece(TokenId id, const std::string& text) const = 0;
  // Whether Decode drops one leading space of the first piece (after a leading BOS).
  virtual bool DecodeStripsLeadingSpace() const { return false; }

  TokenId FindToken(std::string_view text) const {
    auto it = token_index_.find(text);
    return it == token_index_.end() ? kNoToken : it->second;
  }
  TokenType type_of(TokenId id) const { return spec_.token_types[static_cast<size_t>(id)]; }
  bool in_range(TokenId id) const { return id >= 0 && id < vocab_size(); }

  TokenIndex token_index_;
  std::vector<TokenId> special_ids_;  // control / user-defined / unknown, longest text first
};

}  // namespace kvserve
