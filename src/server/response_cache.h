// Tier 1 in the server: which generation requests the response cache (semcache::SemanticCache,
// `serve --semantic-cache`) serves, under which scope and key, and how a hit is answered.
//
//   PlanResponseCache:  request + headers -> mode (off / exact / semantic), lookup and store
//                       flags (Cache-Control no-cache / no-store), scope hash, key text and,
//                       in semantic mode, its embedding
//   CachedBody / CachedStreamChunks: a stored response replayed, gathered or as SSE chunks
//
// No HTTP and no engine here; generate_handler.cc runs the lookup before admission and stores
// finished responses after.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "semcache/semantic_cache.h"
#include "server/generate_request.h"
#include "server/openai_api.h"

namespace kvserve {

// The server's cache settings (ServerOptions::response_cache).
struct ResponseCacheConfig {
  std::shared_ptr<semcache::SemanticCache> cache;  // null: off (no --semantic-cache)
  float threshold = 0.96f;                          // --semantic-cache-threshold
  // Embeds a key text for semantic lookups (thread-safe); null: exact repeats only.
  std::function<StatusOr<std::vector<float>>(std::string_view)> embed;
};

enum class ResponseCacheMode { kOff, kExact, kSemantic };

// What the cache does for one request.
struct ResponseCachePlan {
  ResponseCacheMode mode = ResponseCacheMode::kOff;
  bool lookup = false;  // off with Cache-Control: no-cache
  bool store = false;   // off with Cache-Control: no-store
  float threshold = 1.0f;
  semcache::Hash128 scope;
  std::string key_text;
  std::vector<float> embedding;  // semantic mode, once EmbedCacheKey ran
};

// The mode: the request's "semantic_cache.mode" if given ("on" is semantic, or exact without an
// embedding model); else, by default, semantic (or exact) only for requests whose answer is
// reproducible: temperature 0 or a seed, n == 1, best_of == n, one prompt. The scope hashes
// exactly everything the answer depends on besides the conversation: model, cache_salt, the
// API key presented (when keys are on), system and developer messages, tools, tool_choice,
// parallel_tool_calls, structured-output spec, chat template arguments, sampling settings
// (seed too, unless greedy), max_tokens, stops, logprobs, ignore_eos, echo. The key is the
// conversation after the system prompt, every turn (tool calls and results included); for
// completions, the prompt. The key is not embedded here (see EmbedCacheKey).
ResponseCachePlan PlanResponseCache(const GenerateRequest& request,
                                    const ResponseCacheConfig& config,
                                    std::string_view cache_control, std::string_view api_key,
                                    std::string_view served_model_name);

// Semantic mode: embeds the key once (later calls do nothing). The server calls it only after
// an exact lookup missed, so a repeat never waits for the embedding model. An embedding
// failure turns the plan into exact mode.
void EmbedCacheKey(const ResponseCacheConfig& config, ResponseCachePlan* plan);

// The non-streamed body of a hit: the stored body with a new id and created time, and a
// "kvserve_cache" object ({"tier", "similarity", "original_id"}).
openai::Json CachedBody(const semcache::CachedResponse& stored, const semcache::LookupResult& hit,
                        const std::string& new_id);

// The SSE chunks (without "data: " framing) of a streamed hit: per choice, the role (chat),
// the reasoning, content and tool calls each in one delta, then the finish reason; a usage
// chunk when `include_usage`.
std::vector<openai::Json> CachedStreamChunks(const openai::Json& body, bool chat,
                                             bool include_usage);

}  // namespace kvserve
