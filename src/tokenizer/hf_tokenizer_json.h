// Hugging Face tokenizer files -> VocabSpec: byte-level BPE, and BERT's WordPiece. LoadHfTokenizerJson
// (declared in tokenizer.h) reads tokenizer.json; these read the older layouts (GPT-2's
// vocab.json + merges.txt, BERT's vocab.txt) and in-memory text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// GPT-2 layout: `vocab_json_path` maps token text -> id; `merges_txt_path` holds one
// "left right" merge per line in rank order, with or without a leading "#version" line.
// Pre-tokenizer "gpt-2"; <|endoftext|> (when present) is a control token and both BOS and EOS.
StatusOr<VocabSpec> LoadHfVocabAndMerges(const std::string& vocab_json_path,
                                         const std::string& merges_txt_path);

// BERT's vocab.txt: one token per line, the line number its id.
StatusOr<VocabSpec> LoadHfWordPieceVocabTxt(const std::string& vocab_txt_path);

// WordPiece tokens in Hugging Face's form (continuations "##x", words bare), by id -> the
// VocabSpec llama.cpp's converter writes (words "\u2581x", continuations bare, bracketed
// special tokens as they are), with [UNK], [CLS] (as BOS), [SEP], [PAD], [MASK] found by text
// and marked control. The tokenizer lowercases and strips accents (as llama.cpp's WPM):
// `lowercase` false (a cased model) is refused. `token_types` may be empty (all normal).
StatusOr<VocabSpec> WordPieceVocabFromHf(std::vector<std::string> tokens,
                                         std::vector<TokenType> token_types,
                                         const std::string& continuing_subword_prefix,
                                         bool lowercase);

// The text forms of the above (no file access).
StatusOr<VocabSpec> ParseHfVocabAndMerges(std::string_view vocab_json, std::string_view merges_txt);
StatusOr<VocabSpec> ParseHfTokenizerJson(std::string_view tokenizer_json);

}  // namespace kvserve
