// The OpenAI API's request bodies, parsed and validated into plain structs, and the JSON shapes
// of its responses (completions, chat completions, their stream chunks, errors). No HTTP and
// no engine here: server.cc glues them together.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "base/status.h"
#include "grammar/grammar_cache.h"
#include "sampling/sampler.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve::openai {

using Json = nlohmann::ordered_json;

// Serializes without throwing on invalid UTF-8 (a token's bytes may be part of a character):
// such bytes become U+FFFD.
std::string Dump(const Json& j);

// Request bodies nest at most kMaxJsonNestingDepth deep (base/json_depth.h).
using ::kvserve::JsonNestingDepth;
using ::kvserve::kMaxJsonNestingDepth;

// A request body that must be one JSON object: InvalidArgument naming what is wrong (not
// JSON, not an object, nested deeper than kMaxJsonNestingDepth).
StatusOr<Json> ParseJsonObject(std::string_view body);

// A request parameter the client got wrong: a Status (InvalidArgument) whose message names it.
// `param` (and `code`, e.g. "context_length_exceeded", where the OpenAI API has one) are
// reported in the error object.
struct ParamError {
  std::string param;
  std::string message;
  std::string code;
};

// The sampling and stopping fields shared by /v1/completions and /v1/chat/completions.
struct GenerationParams {
  std::string model;                   // may be empty (then the served model)
  int64_t n = 1;                       // choices per prompt, 1..kMaxN
  // Completions generated per prompt, of which the n with the highest mean token logprob are
  // returned (OpenAI's legacy best_of); >= n, not with stream.
  int64_t best_of = 1;
  // max_tokens / max_completion_tokens; 0 only for completions with echo (the prompt scored,
  // nothing generated).
  std::optional<int64_t> max_tokens;
  SamplingParams sampling;
  bool seed_given = false;             // else each request draws a random seed
  std::vector<std::string> stop;       // strings (string or array in the body)
  std::vector<TokenId> stop_token_ids;
  int32_t logprobs = -1;               // -1 off; else top alternatives (0..kMaxLogprobs)
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool ignore_eos = false;
  int64_t priority = 0;
  std::string cache_salt;
  // "kv_policy": {"method", "budget_tokens", "sink_tokens", "window_tokens",
  // "observation_window"}: token eviction fields overriding the server's default
  // (--kv-eviction ...); absent fields keep the default. Checked against the merged policy by
  // ApplyKvPolicy.
  struct KvPolicyFields {
    std::optional<std::string> method;
    std::optional<int64_t> budget_tokens, sink_tokens, window_tokens, observation_window;
  };
  std::optional<KvPolicyFields> kv_policy;
  // Structured output: the grammar the output must match, from response_format
  // ({"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": ...}}),
  // vLLM's guided_json / guided_regex / guided_choice / guided_grammar, or llama.cpp's
  // grammar (GBNF) / json_schema: at most one of them. Compiled and checked by
  // BuildEngineInputs.
  std::optional<grammar::GrammarSpec> guided;
  std::string guided_param;  // the field it came from (for errors)
  // "semantic_cache": {"mode": "on"|"off"|"exact", "threshold": 0..1} (kvserve's extension):
  // opts the request in or out of the server's response cache (--semantic-cache).
  struct SemanticCacheFields {
    std::optional<std::string> mode;
    std::optional<float> threshold;
  };
  std::optional<SemanticCacheFields> semantic_cache;
};
inline constexpr int64_t kMaxN = 128;

// One prompt of /v1/completions: text, or token ids used as they are.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<TokenId> ids;
};

struct CompletionRequest {
  GenerationParams params;
  std::vector<PromptInput> prompts;  // a string, an array of ids, or an array of either
  bool echo = false;  // the response text starts with the prompt (with logprobs: its logprobs)
};

// tool_choice: "none" (no calls parsed), "auto" (the server's --tool-call-parser reads the
// output), "required" (at least one call: the output is constrained to a JSON array of calls
// of the given tools) or {"type": "function", "function": {"name": ...}} (the output is
// constrained to that function's arguments).
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };
const char* ToolChoiceName(ToolChoice choice);

struct ChatRequest {
  GenerationParams params;
  // array of {role, content, ...} as the client sent it (content: a string, null or text
  // parts; the chat template's renderer normalises it for the template)
  Json messages;
  // null when absent; else an array of {"type": "function", "function": {"name",
  // "description"?, "parameters"?}} (checked: names unique, parameters an object).
  Json tools;
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string tool_choice_function;            // with kFunction: a name in tools
  bool parallel_tool_calls = true;             // false: at most one call (required)
  bool add_generation_prompt = true;
  Json chat_template_kwargs;  // object or null
};

// Parse and validate (types, ranges, required fields). Unknown fields are ignored, as the
// OpenAI API ignores them; fields we cannot honour (e.g. best_of > n) are errors.
StatusOr<CompletionRequest> ParseCompletionRequest(const Json& body, ParamError* error);
StatusOr<ChatRequest> ParseChatRequest(const Json& body, ParamError* error);

// The "created" field of responses: seconds since the Unix epoch, now.
int64_t UnixNow();

// {"error": {"message", "type", "param", "code"}}. type is derived from the HTTP status:
// 400 invalid_request_error, 401 authentication_error, 404 not_found_error, 503
// service_unavailable, others server_error.
Json ErrorBody(int http_status, const std::string& message, const std::string& param = "",
               const std::string& code = "");

// usage: {"prompt_tokens", "completion_tokens", "total_tokens",
// "prompt_tokens_details": {"cached_tokens"}}.
// kv_tokens_evicted: tokens whose KV token eviction dropped (kvserve's extension; 0 without it).
// cached_by_tier (a server with KV tiers): prompt_tokens_details also gets
// "cached_tokens_by_tier": {"memory", "disk", "redis"}, where each cached token was held
// before the request ran (kvserve's extension; they sum to cached_tokens).
Json Usage(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
           int64_t kv_tokens_evicted = 0, const int64_t* cached_by_tier = nullptr);

// A token's logprob entry for chat ({"token", "logprob", "bytes", "top_logprobs"}).
struct TokenText {
  TokenId id = kNoToken;
  std::string text;  // the token's bytes
  float logprob = 0.0f;
};
Json ChatLogprobEntry(const TokenText& sampled, const std::vector<TokenText>& top);

// Completions logprobs, accumulated token by token.
class CompletionLogprobs {
 public:
  void add(const TokenText& sampled, const std::vector<TokenText>& top, int64_t text_offset);
  // The first prompt token of an echo: no logprob (null), no alternatives (null).
  void add_unscored(const std::string& text, int64_t text_offset);
  Json json() const;
  bool empty() const { return tokens_.empty(); }

 private:
  Json tokens_ = Json::array();
  Json token_logprobs_ = Json::array();
  Json top_logprobs_ = Json::array();
  Json text_offset_ = Json::array();
};

}  // namespace kvserve::openai
