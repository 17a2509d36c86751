// Tokenizer: text <-> token ids for SentencePiece-style BPE, byte-level BPE and WordPiece
// vocabularies, with special tokens. Immutable after Create: safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

struct EncodeOptions {
  // The special tokens the vocabulary asks for (llama.cpp's add_special): BOS
  // (VocabSpec::add_bos), EOS (add_eos), BERT's [CLS] ... [SEP].
  bool add_bos = true;
  bool parse_special = false;  // recognise control/user-defined token texts like <|eot_id|>
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Validates the spec (ids in range, merges well-formed, byte tokens present where needed).
  static StatusOr<std::unique_ptr<Tokenizer>> Create(VocabSpec spec);

  virtual std::vector<TokenId> Encode(std::string_view text, const EncodeOptions& options) const = 0;
  // The bytes this token contributes to the output (byte tokens give their byte; control
  // tokens give "" unless `special` is true; SPM U+2581 becomes a space). May be part of a
  // UTF-8 character.
  virtual std::string TokenToPiece(TokenId id, bool special = false) const = 0;
  // Decodes a whole sequence (SPM: the leading dummy-prefix space after BOS is removed).
  virtual std::string Decode(const std::vector<TokenId>& ids, bool special = false) const = 0;

  const VocabSpec& spec() const { return spec_; }
  int64_t vocab_size() const { return static_cast<int64_t>(spec_.tokens.size()); }
  TokenId bos_id() const { return spec_.bos_id; }
  TokenId eos_id() const { return spec_.eos_id; }
  // EOS or any other end-of-generation token.
  bool IsEndOfGeneration(TokenId id) const;
  // The most text bytes one token can stand for: the longest stored token text (stored forms
  // are never shorter than the bytes they encode), at least 4 (one UTF-8 character mapped to
  // an unknown token). So Encode(text) has at least ceil(text.size() / this) tokens, which
  // refuses an oversized prompt before tokenizing it. INT64_MAX for WordPiece, whose unknown
  // token can stand for a word of any length.
  int64_t max_bytes_per_token() const { return max_bytes_per_token_; }

 protected:
  explicit Tokenizer(VocabSpec spec);
  VocabSpec spec_;

 private:
  int64_t max_bytes_per_token_ = 0;
};

// Turns a stream of token ids into text pieces that are always valid UTF-8: bytes of an
// incomplete character are held back until the character completes (invalid sequences are
// replaced by U+FFFD once they can no longer complete). Not thread-safe; one per sequence.
class IncrementalDetokenizer {
 public:
  // render_special (optional, borrowed; indexed by token id): control tokens with a non-zero
  // entry give their text (Tokenizer::TokenToPiece(id, true)); others give none.
  explicit IncrementalDetokenizer(const Tokenizer* tokenizer,
                                  const std::vector<uint8_t>* render_special = nullptr)
      : tokenizer_(tokenizer), render_special_(render_special) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string Push(TokenId id);
  // Returns whatever is held back, with incomplete characters replaced by U+FFFD.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  const std::vector<uint8_t>* render_special_;
  std::string pending_;
  bool first_ = true;       // no token other than BOS pushed yet
  bool after_bos_ = false;  // the previous token was BOS (SPM: drop the next leading space)
};

// llama2.c tokenizer file (tok512.bin, tokenizer.bin): int32 max_token_length, then per token
// {float32 score, int32 len, bytes}. BOS=1, EOS=2, bytes at 3..258.
StatusOr<VocabSpec> LoadLlama2cTokenizer(const std::string& path, int64_t vocab_size);

// Hugging Face tokenizer.json (BPE with ByteLevel / Split pre-tokenizers, added tokens).
StatusOr<VocabSpec> LoadHfTokenizerJson(const std::string& path);

}  // namespace kvserve
