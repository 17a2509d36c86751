// VocabSpec: everything a tokenizer needs, independent of the file it came from (GGUF
// `tokenizer.ggml.*` metadata, a llama2.c tokenizer file, or HF tokenizer.json). Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/ids.h"

namespace kvserve {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabSpec {
  enum class Model {
    kSpm,  // SentencePiece-style BPE: merges chosen by token score, byte fallback <0xXX>
    kBpe,  // byte-level BPE (GPT-2 style): merge ranks, pre-tokenizer regexes
    kWpm,  // WordPiece (BERT)
  };
  Model model = Model::kSpm;

  std::vector<std::string> tokens;      // token text as stored (SPM uses U+2581 for space;
                                        // byte-level BPE uses the GPT-2 byte-to-unicode map)
  std::vector<float> scores;            // SPM merge priority (may be empty for BPE/WPM)
  std::vector<TokenType> token_types;   // same size as tokens (kNormal when unknown)
  std::vector<std::string> merges;      // BPE: "left right" in rank order

  // BPE pre-tokenizer: a llama.cpp `tokenizer.ggml.pre` name ("gpt-2", "llama-bpe", "qwen2",
  // "falcon", "mpt", "starcoder", "deepseek-llm", "deepseek-coder", ...), or, when
  // pre_regexes is not empty, these regexes (from HF tokenizer.json Split pre-tokenizers)
  // applied in order.
  std::string pre = "default";
  std::vector<std::string> pre_regexes;
  // BPE: a pre-token that is itself a vocabulary entry is emitted without merges (HF
  // `model.ignore_merges`; llama.cpp implies it for the llama-3 family and tekken).
  bool bpe_ignore_merges = false;
  // BPE: prepend a space to text not starting with one (HF ByteLevel add_prefix_space).
  bool bpe_add_prefix_space = false;

  TokenId bos_id = kNoToken;
  TokenId eos_id = kNoToken;
  TokenId unk_id = kNoToken;
  TokenId pad_id = kNoToken;
  TokenId sep_id = kNoToken;
  TokenId cls_id = kNoToken;  // BERT
  TokenId mask_id = kNoToken;
  std::vector<TokenId> eog_ids;  // end-of-generation tokens besides eos (e.g. <|eot_id|>)

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend a space ("dummy prefix") before encoding
  bool byte_fallback = true;     // SPM: unknown characters become <0xXX> byte tokens
  // llama2.c tokenizer files: byte b is token 3 + b and pieces are plain text (no U+2581).
  bool llama2c_format = false;
};

}  // namespace kvserve
