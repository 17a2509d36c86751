// The OpenAI embeddings API (POST /v1/embeddings): the request parsed and checked into a plain
// struct, and the response's JSON. No HTTP and no model here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/openai_api.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve::openai {

// One input: text, or token ids used as they are.
struct EmbeddingInput {
  std::optional<std::string> text;
  std::vector<TokenId> ids;
};

struct EmbeddingsRequest {
  std::string model;  // may be empty (then the served embedding model)
  std::vector<EmbeddingInput> inputs;  // "input": a string, an array of strings, ids or id arrays
  bool base64 = false;                 // "encoding_format": "float" (default) or "base64"
  std::optional<int64_t> dimensions;   // must equal the model's when given
};

// Most inputs one request may carry (OpenAI's limit).
inline constexpr int64_t kMaxEmbeddingInputs = 2048;

// Errors: InvalidArgument with *error naming the field.
StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(const Json& body, ParamError* error);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage":
// {"prompt_tokens", "total_tokens"}}; with base64 each embedding is the base64 of its
// little-endian float32 values (what the openai clients decode).
Json EmbeddingsResponse(const std::vector<std::vector<float>>& embeddings, bool base64,
                        const std::string& model, int64_t prompt_tokens);

// Standard base64 (RFC 4648, with padding).
std::string Base64Encode(const void* data, size_t num_bytes);

}  // namespace kvserve::openai
