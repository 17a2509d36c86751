// Hugging Face tokenizer files -> VocabSpec (byte-level BPE). LoadHfTokenizerJson (declared in
// tokenizer.h) reads tokenizer.json; these read the older GPT-2 layout and in-memory text.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve {

// GPT-2 layout: `vocab_json_path` maps token text -> id; `merges_txt_path` holds one
// "left right" merge per line in rank order, with or without a leading "#version" line.
// Pre-tokenizer "gpt-2"; <|endoftext|> (when present) is a control token and both BOS and EOS.
StatusOr<VocabSpec> LoadHfVocabAndMerges(const std::string& vocab_json_path,
                                         const std::string& merges_txt_path);

// The text forms of the above (no file access).
StatusOr<VocabSpec> ParseHfVocabAndMerges(std::string_view vocab_json, std::string_view merges_txt);
StatusOr<VocabSpec> ParseHfTokenizerJson(std::string_view tokenizer_json);

}  // namespace kvserve
