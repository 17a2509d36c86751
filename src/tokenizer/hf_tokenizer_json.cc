#include "tokenizer/hf_tokenizer_json.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;

// HF ByteLevel's regex: GPT-2's plus a final `\s+`, which yields the same pieces.
constexpr const char kHfByteLevelRegex[] =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
// Matches a whole piece: "no pre-tokenizer".
constexpr const char kWholePieceRegex[] = "(?s).+";
// Ids are dense in real vocabularies; anything far beyond the entry count is refused rather
// than allocated.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return DataLossError("cannot read '" + path + "'");
  return buffer.str();
}

StatusOr<Json> ParseJson(std::string_view text, const char* what) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidArgumentError(std::string(what) + " is not valid JSON");
  return json;
}

// Escapes `literal` for use inside a PCRE2 pattern.
std::string QuoteRegex(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

// Sizes spec.tokens for ids [0, max_id] and stores `text` at `id`.
Status PlaceToken(VocabSpec* spec, int64_t id, const std::string& text, TokenType type,
                  int64_t max_id) {
  if (id < 0 || id > max_id) {
    return InvalidArgumentError("token id " + std::to_string(id) + " for '" + text +
                                "' is out of range");
  }
  if (static_cast<int64_t>(spec->tokens.size()) <= id) {
    spec->tokens.resize(id + 1);
    spec->token_types.resize(id + 1, TokenType::kUnused);
  }
  spec->tokens[id] = text;
  spec->token_types[id] = type;
  return OkStatus();
}

Status AddVocab(const Json& vocab, int64_t num_extra, VocabSpec* spec) {
  if (!vocab.is_object()) return InvalidArgumentError("BPE vocab is not a JSON object");
  const int64_t max_id = std::min<int64_t>(kMaxTokenId, 2 * (vocab.size() + num_extra) + 1024);
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer()) {
      return InvalidArgumentError("vocab entry '" + text + "' has no integer id");
    }
    KV_RETURN_IF_ERROR(PlaceToken(spec, id.get<int64_t>(), text, TokenType::kNormal, max_id));
  }
  return OkStatus();
}

Status AddMerges(const Json& merges, VocabSpec* spec) {
  if (!merges.is_array()) return InvalidArgumentError("BPE merges is not a JSON array");
  spec->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    if (merge.is_string()) {
      spec->merges.push_back(merge.get<std::string>());
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      spec->merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      return InvalidArgumentError("BPE merge " + std::to_string(i) +
                                  " is neither \"left right\" nor [left, right]");
    }
  }
  return OkStatus();
}

TokenId FindToken(const VocabSpec& spec, std::string_view text) {
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.tokens[i] == text) return static_cast<TokenId>(i);
  }
  return kNoToken;
}

// BOS/EOS/end-of-generation ids from well-known token texts (when not set already).
void DetectSpecialTokens(VocabSpec* spec) {
  std::map<std::string_view, TokenId> by_text;
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    const std::string& t = spec->tokens[i];
    if (t.size() >= 3 && t.size() <= 40 && (t.front() == '<' || t.front() == '[')) {
      by_text.emplace(t, static_cast<TokenId>(i));
    }
  }
  auto first_of = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view name : names) {
      auto it = by_text.find(name);
      if (it != by_text.end()) return it->second;
    }
    return kNoToken;
  };
  if (spec->bos_id == kNoToken) {
    spec->bos_id = first_of({"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>",
                             "<｜begin▁of▁sentence｜>"});
  }
  if (spec->eos_id == kNoToken) {
    spec->eos_id = first_of({"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>",
                             "<｜end▁of▁sentence｜>"});
  }
  // GPT-2 style: one <|endoftext|> token serves as both.
  if (spec->bos_id == kNoToken && spec->eos_id != kNoToken &&
      spec->tokens[spec->eos_id] == "<|endoftext|>") {
    spec->bos_id = spec->eos_id;
  }
  for (std::string_view name : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
                                "<end_of_turn>", "<|endoftext|>"}) {
    auto it = by_text.find(name);
    if (it != by_text.end() && it->second != spec->eos_id) spec->eog_ids.push_back(it->second);
  }
}

// Appends the regexes of one HF pre_tokenizer (recursing into Sequence).
Status AddPreTokenizer(const Json& pre, VocabSpec* spec, std::vector<std::string>* regexes) {
  if (pre.is_null()) return OkStatus();
  if (!pre.is_object() || !pre.contains("type") || !pre["type"].is_string()) {
    return InvalidArgumentError("pre_tokenizer has no type");
  }
  const std::string type = pre["type"].get<std::string>();
  if (type == "Sequence") {
    const Json& list = pre.value("pretokenizers", Json::array());
    if (!list.is_array()) return InvalidArgumentError("Sequence.pretokenizers is not an array");
    for (const Json& item : list) KV_RETURN_IF_ERROR(AddPreTokenizer(item, spec, regexes));
    return OkStatus();
  }
  if (type == "ByteLevel") {
    if (pre.value("add_prefix_space", false)) spec->bpe_add_prefix_space = true;
    if (pre.value("use_regex", true)) regexes->push_back(kHfByteLevelRegex);
    return OkStatus();
  }
  if (type == "Split") {
    const std::string behavior = pre.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") {
      return UnimplementedError("Split pre-tokenizer behavior '" + behavior +
                                "' is not supported (only Isolated)");
    }
    if (pre.value("invert", false)) {
      return UnimplementedError("Split pre-tokenizer with invert=true is not supported");
    }
    const Json& pattern = pre.value("pattern", Json::object());
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regexes->push_back(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      regexes->push_back(QuoteRegex(pattern["String"].get<std::string>()));
    } else {
      return InvalidArgumentError("Split pre-tokenizer has no Regex or String pattern");
    }
    return OkStatus();
  }
  if (type == "Digits") {
    regexes->push_back(pre.value("individual_digits", false) ? R"re(\p{N})re" : R"re(\p{N}+)re");
    return OkStatus();
  }
  return UnimplementedError("pre_tokenizer type '" + type +
                            "' is not supported (supported: ByteLevel, Split, Digits, Sequence)");
}

// add_bos / add_eos from a TemplateProcessing (possibly inside a Sequence) post-processor.
Status ApplyPostProcessor(const Json& post, VocabSpec* spec) {
  if (post.is_null()) return OkStatus();
  const std::string type = post.value("type", std::string());
  if (type == "Sequence") {
    for (const Json& item : post.value("processors", Json::array())) {
      KV_RETURN_IF_ERROR(ApplyPostProcessor(item, spec));
    }
    return OkStatus();
  }
  if (type == "TemplateProcessing") {
    const Json& single = post.value("single", Json::array());
    if (!single.is_array() || single.empty()) return OkStatus();
    auto special_id = [&](const Json& item) -> TokenId {
      if (!item.is_object() || !item.contains("SpecialToken")) return kNoToken;
      const std::string name = item["SpecialToken"].value("id", std::string());
      const Json& specials = post.value("special_tokens", Json::object());
      if (specials.contains(name)) {
        const Json& ids = specials[name].value("ids", Json::array());
        if (ids.is_array() && ids.size() == 1 && ids[0].is_number_integer()) {
          const int64_t id = ids[0].get<int64_t>();
          if (id >= 0 && id < static_cast<int64_t>(spec->tokens.size())) {
            return static_cast<TokenId>(id);
          }
        }
      }
      return FindToken(*spec, name);
    };
    const TokenId first = special_id(single.front());
    if (first != kNoToken) {
      spec->add_bos = true;
      spec->bos_id = first;
    }
    const TokenId last = single.size() > 1 ? special_id(single.back()) : kNoToken;
    if (last != kNoToken) {
      spec->add_eos = true;
      if (spec->eos_id == kNoToken) spec->eos_id = last;
    }
    return OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json& pair = post.value(key, Json::array());
      if (pair.is_array() && pair.size() == 2 && pair[1].is_number_integer()) {
        const int64_t id = pair[1].get<int64_t>();
        if (id < 0 || id >= static_cast<int64_t>(spec->tokens.size())) continue;
        if (std::string_view(key) == "cls") {
          spec->add_bos = true;
          spec->bos_id = static_cast<TokenId>(id);
        } else {
          spec->add_eos = true;
          spec->eos_id = static_cast<TokenId>(id);
        }
      }
    }
    return OkStatus();
  }
  // ByteLevel (offsets only) and unknown post-processors do not change the ids we produce.
  return OkStatus();
}

// tokenizer.json's added_tokens (special ones are control tokens) placed at their ids.
Status AddAddedTokens(const Json& added, VocabSpec* spec) {
  const int64_t max_id = std::min<int64_t>(
      kMaxTokenId, 2 * static_cast<int64_t>(spec->tokens.size() + added.size()) + 1024);
  for (const Json& token : added) {
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string()) {
      return InvalidArgumentError("added_tokens entry without integer id and string content");
    }
    const TokenType type =
        token.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    KV_RETURN_IF_ERROR(PlaceToken(spec, token["id"].get<int64_t>(),
                                  token["content"].get<std::string>(), type, max_id));
  }
  return OkStatus();
}

// BERT's tokenizer.json: a WordPiece model, BertNormalizer, BertPreTokenizer, [CLS] $A [SEP].
StatusOr<VocabSpec> ParseWordPieceTokenizerJson(const Json& root, const Json& model) {
  const Json& normalizer = root.value("normalizer", Json());
  bool lowercase = true;
  if (!normalizer.is_null()) {
    const std::string type = normalizer.value("type", std::string());
    if (type != "BertNormalizer") {
      return UnimplementedError("tokenizer.json: WordPiece with normalizer '" + type +
                                "' is not supported (only BertNormalizer)");
    }
    lowercase = normalizer.value("lowercase", true);
  }
  const Json& pre = root.value("pre_tokenizer", Json());
  if (!pre.is_null() && pre.value("type", std::string()) != "BertPreTokenizer") {
    return UnimplementedError("tokenizer.json: WordPiece with pre_tokenizer '" +
                              pre.value("type", std::string()) +
                              "' is not supported (only BertPreTokenizer)");
  }
  if (!model.contains("vocab")) return InvalidArgumentError("tokenizer.json model has no vocab");
  const Json& added = root.value("added_tokens", Json::array());
  if (!added.is_array()) return InvalidArgumentError("added_tokens is not an array");
  VocabSpec raw;
  KV_RETURN_IF_ERROR(AddVocab(model["vocab"], static_cast<int64_t>(added.size()), &raw));
  KV_RETURN_IF_ERROR(AddAddedTokens(added, &raw));
  for (size_t i = 0; i < raw.tokens.size(); ++i) {
    if (raw.token_types[i] == TokenType::kUnused) {
      return InvalidArgumentError("tokenizer.json: the WordPiece vocabulary has no token " +
                                  std::to_string(i) + " (ids must be dense)");
    }
  }
  return WordPieceVocabFromHf(std::move(raw.tokens), std::move(raw.token_types),
                              model.value("continuing_subword_prefix", std::string("##")),
                              lowercase);
}

StatusOr<VocabSpec> ParseTokenizerJsonImpl(const Json& root) {
  if (!root.is_object()) return InvalidArgumentError("tokenizer.json is not a JSON object");
  const Json& model = root.value("model", Json::object());
  const std::string model_type = model.value("type", std::string("BPE"));
  if (model_type == "WordPiece") return ParseWordPieceTokenizerJson(root, model);
  if (model_type != "BPE") {
    return UnimplementedError("tokenizer.json model type '" + model_type +
                              "' is not supported (only BPE and WordPiece)");
  }
  if (model.value("byte_fallback", false)) {
    return UnimplementedError(
        "tokenizer.json BPE with byte_fallback (SentencePiece-style) is not supported");
  }
  const Json& normalizer = root.value("normalizer", Json());
  if (!normalizer.is_null()) {
    const std::string type = normalizer.value("type", std::string());
    // llama.cpp ignores NFC too: the vectors it is checked against are NFC already.
    if (type != "NFC") {
      return UnimplementedError("tokenizer.json normalizer type '" + type + "' is not supported");
    }
  }
  VocabSpec spec;
  spec.model = VocabSpec::Model::kBpe;
  spec.add_space_prefix = false;
  spec.byte_fallback = false;
  const Json& added = root.value("added_tokens", Json::array());
  if (!added.is_array()) return InvalidArgumentError("added_tokens is not an array");
  if (!model.contains("vocab")) return InvalidArgumentError("tokenizer.json model has no vocab");
  KV_RETURN_IF_ERROR(AddVocab(model["vocab"], static_cast<int64_t>(added.size()), &spec));
  if (!model.contains("merges")) return InvalidArgumentError("tokenizer.json model has no merges");
  KV_RETURN_IF_ERROR(AddMerges(model["merges"], &spec));
  spec.bpe_ignore_merges = model.value("ignore_merges", false);
  KV_RETURN_IF_ERROR(AddAddedTokens(added, &spec));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    spec.unk_id = FindToken(spec, model["unk_token"].get<std::string>());
  }

  std::vector<std::string> regexes;
  KV_RETURN_IF_ERROR(AddPreTokenizer(root.value("pre_tokenizer", Json()), &spec, &regexes));
  if (regexes.size() == 1 && regexes[0] == kHfByteLevelRegex) {
    spec.pre = "gpt-2";
  } else {
    spec.pre = "custom";
    spec.pre_regexes = regexes.empty() ? std::vector<std::string>{kWholePieceRegex} : regexes;
  }
  // Validate the regexes now so that a bad file fails at load time.
  KV_ASSIGN_OR_RETURN(auto pre_tokenizer, PreTokenizer::Create(spec.pre_regexes));
  (void)pre_tokenizer;

  KV_RETURN_IF_ERROR(ApplyPostProcessor(root.value("post_processor", Json()), &spec));
  DetectSpecialTokens(&spec);
  return spec;
}

}  // namespace

StatusOr<VocabSpec> ParseHfTokenizerJson(std::string_view tokenizer_json) {
  KV_ASSIGN_OR_RETURN(Json root, ParseJson(tokenizer_json, "tokenizer.json"));
  try {
    return ParseTokenizerJsonImpl(root);
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("malformed tokenizer.json: ") + e.what());
  }
}

StatusOr<VocabSpec> LoadHfTokenizerJson(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto spec = ParseHfTokenizerJson(text);
  if (!spec.ok()) return spec.status().WithContext(path);
  return spec;
}

StatusOr<VocabSpec> ParseHfVocabAndMerges(std::string_view vocab_json,
                                          std::string_view merges_txt) {
  KV_ASSIGN_OR_RETURN(Json vocab, ParseJson(vocab_json, "vocab.json"));
  VocabSpec spec;
  spec.model = VocabSpec::Model::kBpe;
  spec.pre = "gpt-2";
  spec.add_space_prefix = false;
  spec.byte_fallback = false;
  try {
    KV_RETURN_IF_ERROR(AddVocab(vocab, 0, &spec));
  } catch (const Json::exception& e) {
    return InvalidArgumentError(std::string("malformed vocab.json: ") + e.what());
  }
  size_t line_number = 0;
  size_t pos = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_number == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ', 1);
    if (space == std::string_view::npos || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return InvalidArgumentError("merges.txt line " + std::to_string(line_number) +
                                  " is not 'left right'");
    }
    spec.merges.emplace_back(line);
  }
  if (spec.merges.empty()) return InvalidArgumentError("merges.txt holds no merges");
  const TokenId eot = FindToken(spec, "<|endoftext|>");
  if (eot != kNoToken) spec.token_types[eot] = TokenType::kControl;
  DetectSpecialTokens(&spec);
  return spec;
}

StatusOr<VocabSpec> LoadHfVocabAndMerges(const std::string& vocab_json_path,
                                         const std::string& merges_txt_path) {
  KV_ASSIGN_OR_RETURN(std::string vocab, ReadFile(vocab_json_path));
  KV_ASSIGN_OR_RETURN(std::string merges, ReadFile(merges_txt_path));
  auto spec = ParseHfVocabAndMerges(vocab, merges);
  if (!spec.ok()) return spec.status().WithContext(vocab_json_path + ", " + merges_txt_path);
  return spec;
}

}  // namespace kvserve
