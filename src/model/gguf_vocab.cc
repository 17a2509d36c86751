#include "model/gguf_vocab.h"

#include <algorithm>
#include <cmath>

namespace kvserve {
namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string Key(std::string_view name) { return std::string(kPrefix) + std::string(name); }

// Reads an optional token id key into *id (left unchanged when absent).
Status ReadId(const GgufFile& file, std::string_view name, size_t num_tokens, TokenId* id) {
  const std::string key = Key(name);
  if (file.Find(key) == nullptr) return OkStatus();
  StatusOr<int64_t> v = file.GetInt(key);
  if (!v.ok()) return v.status().WithContext(key);
  if (*v < 0 || static_cast<uint64_t>(*v) >= num_tokens) {
    return InvalidArgumentError(key + " = " + std::to_string(*v) +
                                " is out of range for a vocabulary of " +
                                std::to_string(num_tokens) + " tokens");
  }
  *id = static_cast<TokenId>(*v);
  return OkStatus();
}

Status ReadBool(const GgufFile& file, std::string_view name, bool* value) {
  const std::string key = Key(name);
  if (file.Find(key) == nullptr) return OkStatus();
  StatusOr<bool> v = file.GetBool(key);
  if (!v.ok()) return v.status().WithContext(key);
  *value = *v;
  return OkStatus();
}

// The array under `key` when present with elements of the right kind.
StatusOr<const GgufValue*> FindArray(const GgufFile& file, const std::string& key,
                                     bool (*element_ok)(GgufType)) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return static_cast<const GgufValue*>(nullptr);
  if (v->type != GgufType::kArray || !element_ok(v->array_type)) {
    return InvalidArgumentError(key + " has type " + GgufTypeName(v->type) +
                                (v->type == GgufType::kArray
                                     ? std::string(" of ") + GgufTypeName(v->array_type)
                                     : std::string()) +
                                ", expected an array of the right kind");
  }
  return v;
}

bool IsStringType(GgufType t) { return t == GgufType::kString; }
bool IsFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }
bool IsIntType(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

// Texts llama.cpp treats as end of generation (llama-vocab.cpp), marking them control.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>",   "<|end|>", "<|return|>", "<|call|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>",
};

}  // namespace

StatusOr<VocabSpec> VocabSpecFromGguf(const GgufFile& file) {
  VocabSpec spec;
  const std::string model_key = Key("model");
  StatusOr<std::string> model = file.GetString(model_key);
  if (!model.ok()) return model.status().WithContext("GGUF vocabulary");
  if (*model == "llama") {
    spec.model = VocabSpec::Model::kSpm;
    spec.bos_id = 1;
    spec.eos_id = 2;
    spec.unk_id = 0;
    spec.add_bos = true;
    spec.add_space_prefix = true;
  } else if (*model == "gpt2") {
    spec.model = VocabSpec::Model::kBpe;
    spec.bos_id = 11;  // llama.cpp's defaults for gpt2 files without the keys
    spec.eos_id = 11;
    spec.add_bos = false;
    spec.add_space_prefix = false;
    spec.byte_fallback = false;
  } else if (*model == "bert") {
    spec.model = VocabSpec::Model::kWpm;
    spec.bos_id = 101;
    spec.unk_id = 100;
    spec.sep_id = 102;
    spec.pad_id = 0;
    spec.mask_id = 103;
    spec.add_bos = true;
    spec.add_space_prefix = false;
    spec.byte_fallback = false;
  } else {
    return UnimplementedError(model_key + " \"" + *model +
                              "\" is not supported (supported: llama, gpt2, bert)");
  }

  const std::string tokens_key = Key("tokens");
  KV_ASSIGN_OR_RETURN(const GgufValue* tokens, FindArray(file, tokens_key, IsStringType));
  if (tokens == nullptr) return InvalidArgumentError("GGUF vocabulary: " + tokens_key + " is missing");
  if (tokens->strings.empty()) return InvalidArgumentError(tokens_key + " is empty");
  if (tokens->strings.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError(tokens_key + " has too many tokens");
  }
  spec.tokens = tokens->strings;
  const size_t n = spec.tokens.size();
  // Defaults that do not fit a small vocabulary are dropped rather than refused.
  for (TokenId* id : {&spec.bos_id, &spec.eos_id, &spec.unk_id, &spec.sep_id, &spec.pad_id,
                      &spec.mask_id}) {
    if (*id != kNoToken && static_cast<size_t>(*id) >= n) *id = kNoToken;
  }

  const std::string scores_key = Key("scores");
  KV_ASSIGN_OR_RETURN(const GgufValue* scores, FindArray(file, scores_key, IsFloatType));
  if (scores != nullptr) {
    if (scores->floats.size() != n) {
      return InvalidArgumentError(scores_key + " has " + std::to_string(scores->floats.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    spec.scores.reserve(n);
    for (double s : scores->floats) {
      if (std::isnan(s)) return InvalidArgumentError(scores_key + " contains NaN");
      spec.scores.push_back(static_cast<float>(s));
    }
  } else if (spec.model == VocabSpec::Model::kSpm) {
    return InvalidArgumentError("GGUF vocabulary: " + scores_key + " is missing (needed by llama/SPM)");
  }

  const std::string types_key = Key("token_type");
  KV_ASSIGN_OR_RETURN(const GgufValue* types, FindArray(file, types_key, IsIntType));
  if (types != nullptr) {
    if (types->ints.size() != n) {
      return InvalidArgumentError(types_key + " has " + std::to_string(types->ints.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    spec.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->ints[i];
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
        return InvalidArgumentError(types_key + "[" + std::to_string(i) + "] = " +
                                    std::to_string(t) + " is not a token type");
      }
      spec.token_types.push_back(static_cast<TokenType>(t));
    }
  } else {
    spec.token_types.assign(n, TokenType::kNormal);
  }

  const std::string merges_key = Key("merges");
  KV_ASSIGN_OR_RETURN(const GgufValue* merges, FindArray(file, merges_key, IsStringType));
  if (merges != nullptr) spec.merges = merges->strings;
  if (spec.model == VocabSpec::Model::kBpe && spec.merges.empty()) {
    return InvalidArgumentError("GGUF vocabulary: " + merges_key + " is missing (needed by gpt2/BPE)");
  }

  if (file.Find(Key("pre")) != nullptr) {
    StatusOr<std::string> pre = file.GetString(Key("pre"));
    if (!pre.ok()) return pre.status().WithContext(Key("pre"));
    spec.pre = *pre;
  }

  KV_RETURN_IF_ERROR(ReadId(file, "bos_token_id", n, &spec.bos_id));
  KV_RETURN_IF_ERROR(ReadId(file, "eos_token_id", n, &spec.eos_id));
  KV_RETURN_IF_ERROR(ReadId(file, "unknown_token_id", n, &spec.unk_id));
  KV_RETURN_IF_ERROR(ReadId(file, "padding_token_id", n, &spec.pad_id));
  KV_RETURN_IF_ERROR(ReadId(file, "seperator_token_id", n, &spec.sep_id));  // sic (llama.cpp)
  KV_RETURN_IF_ERROR(ReadId(file, "separator_token_id", n, &spec.sep_id));
  KV_RETURN_IF_ERROR(ReadId(file, "cls_token_id", n, &spec.cls_id));
  KV_RETURN_IF_ERROR(ReadId(file, "mask_token_id", n, &spec.mask_id));
  TokenId eot_id = kNoToken, eom_id = kNoToken;
  KV_RETURN_IF_ERROR(ReadId(file, "eot_token_id", n, &eot_id));
  KV_RETURN_IF_ERROR(ReadId(file, "eom_token_id", n, &eom_id));
  KV_RETURN_IF_ERROR(ReadBool(file, "add_bos_token", &spec.add_bos));
  KV_RETURN_IF_ERROR(ReadBool(file, "add_eos_token", &spec.add_eos));
  KV_RETURN_IF_ERROR(ReadBool(file, "add_space_prefix", &spec.add_space_prefix));
  if (spec.model == VocabSpec::Model::kWpm && spec.cls_id == kNoToken) spec.cls_id = spec.bos_id;

  // End of generation, as llama.cpp infers it: eot/eom ids, then tokens by text (forced to
  // control type). EOS itself is not repeated in eog_ids.
  auto add_eog = [&](TokenId id) {
    if (id == kNoToken || id == spec.eos_id) return;
    if (std::find(spec.eog_ids.begin(), spec.eog_ids.end(), id) == spec.eog_ids.end()) {
      spec.eog_ids.push_back(id);
    }
  };
  add_eog(eot_id);
  add_eog(eom_id);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    if (text.empty() || text.size() > 20) continue;
    for (std::string_view eog : kEogTexts) {
      if (text == eog) {
        add_eog(static_cast<TokenId>(i));
        spec.token_types[i] = TokenType::kControl;
        break;
      }
    }
  }
  return spec;
}

}  // namespace kvserve
