#include "server/embeddings_api.h"

#include <cstring>
#include <limits>

namespace kvserve::openai {

namespace {

Status Fail(ParamError* error, const std::string& param, const std::string& message) {
  if (error != nullptr) *error = {param, message, ""};
  return InvalidArgumentError(message);
}

bool IdArray(const Json& v, std::vector<TokenId>* out) {
  if (!v.is_array() || v.empty()) return false;
  for (const Json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<TokenId>::max()) {
      return false;
    }
    out->push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  return true;
}

}  // namespace

StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(const Json& body, ParamError* error) {
  if (!body.is_object()) return Fail(error, "", "the request body must be a JSON object");
  EmbeddingsRequest req;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Fail(error, "model", "'model' must be a string");
    req.model = body["model"].get<std::string>();
  }
  if (!body.contains("input") || body["input"].is_null()) {
    return Fail(error, "input", "'input' is required");
  }
  const char* kShape =
      "'input' must be a string, an array of strings, an array of token ids or an array of "
      "token-id arrays (none empty)";
  const Json& in = body["input"];
  if (in.is_string()) {
    req.inputs.push_back({in.get<std::string>(), {}});
  } else if (in.is_array() && !in.empty() && in[0].is_number()) {
    EmbeddingInput x;
    if (!IdArray(in, &x.ids)) return Fail(error, "input", kShape);
    req.inputs.push_back(std::move(x));
  } else if (in.is_array() && !in.empty()) {
    for (const Json& item : in) {
      EmbeddingInput x;
      if (item.is_string()) {
        x.text = item.get<std::string>();
      } else if (!IdArray(item, &x.ids)) {
        return Fail(error, "input", kShape);
      }
      req.inputs.push_back(std::move(x));
    }
  } else {
    return Fail(error, "input", kShape);
  }
  for (const EmbeddingInput& x : req.inputs) {
    if (x.text.has_value() && x.text->empty()) return Fail(error, "input", kShape);
  }
  if (static_cast<int64_t>(req.inputs.size()) > kMaxEmbeddingInputs) {
    return Fail(error, "input", "'input' may hold at most " + std::to_string(kMaxEmbeddingInputs) +
                                    " items");
  }
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const Json& f = body["encoding_format"];
    if (f != "float" && f != "base64") {
      return Fail(error, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    }
    req.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    if (!body["dimensions"].is_number_integer() || body["dimensions"].get<int64_t>() < 1) {
      return Fail(error, "dimensions", "'dimensions' must be a positive integer");
    }
    req.dimensions = body["dimensions"].get<int64_t>();
  }
  return req;
}

std::string Base64Encode(const void* data, size_t num_bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((num_bytes + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < num_bytes; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < num_bytes) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < num_bytes) v |= uint32_t{p[i + 1]} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < num_bytes ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Json EmbeddingsResponse(const std::vector<std::vector<float>>& embeddings, bool base64,
                        const std::string& model, int64_t prompt_tokens) {
  static_assert(sizeof(float) == 4, "float32");
  Json data = Json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& e = embeddings[i];
    Json item{{"object", "embedding"}, {"index", i}};
    if (base64) {
      // x86 and ARM are little-endian: the bytes as they are.
      item["embedding"] = Base64Encode(e.data(), e.size() * sizeof(float));
    } else {
      item["embedding"] = e;
    }
    data.push_back(std::move(item));
  }
  return Json{{"object", "list"},
              {"data", std::move(data)},
              {"model", model},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace kvserve::openai
