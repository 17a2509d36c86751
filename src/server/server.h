// OpenAiServer: the HTTP front end of `kvserve serve`. OpenAI-compatible endpoints
// (/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models), vLLM's extras (/tokenize, /detokenize,
// /health) and Prometheus /metrics, on the event-driven HTTP layer of src/http (slow and idle
// connections cost no thread; framing limits, deadlines and a connection cap there); every
// generation request becomes one engine request per choice (n), streamed back as server-sent
// events or gathered. /v1/embeddings runs on the handler thread through the Embedder (its own
// thread pool, one request at a time); a server with an embedder and no engine serves
// embeddings only (`kvserve serve --model EMBEDDER.gguf`).
//
// Robustness: bad input gets an OpenAI error object (400; 401 for a missing or wrong API key;
// 503 when the queue is full or the server is shutting down); a client that disconnects
// before its answer (streaming or not) has its requests aborted (their KV blocks return); JSON
// bodies nested deeper than openai::kMaxJsonNestingDepth are refused before they are parsed;
// Shutdown() drains in-flight
// requests, aborts what is left after a timeout and stops the listener.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/status.h"
#include "grammar/grammar_cache.h"
#include "http/http_server.h"
#include "kv/kv_storage.h"
#include "kvevents/kv_events_publisher.h"
#include "kvtier/kv_tier_manager.h"
#include "runtime/embedder.h"
#include "runtime/engine.h"
#include "server/generate_request.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/response_cache.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// Facts about the KV cache fixed at start-up (for /metrics).
struct KvCacheInfo {
  std::string dtype;  // "f32", "fp8_e4m3", ...
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  int64_t bytes_per_token = 0;      // KvCacheSpec::bytes_per_token (what plan prints)
  std::string layout = "separate_kv";  // KvLayoutName
  int64_t values_per_token_per_layer = 0;
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  KvScales scales;  // fp8 per-layer, per-head scales (empty otherwise)
};

struct ServerOptions {
  // Address, port (0: any free port, see OpenAiServer::port()), connection cap, framing
  // limits (max_body_bytes: 32 MiB) and per-phase deadlines of the HTTP layer.
  http::HttpServerOptions http;
  std::string api_key;             // empty: no authentication
  std::string served_model_name;   // the model name requests must use (or omit)
  // Requests beyond the ones the engine runs at once (max_num_seqs) that may wait; more get
  // 503. Counted in engine requests (a request with n = 4 counts 4).
  int64_t max_queue_len = 256;
  double shutdown_timeout_s = 30.0;  // Shutdown(): how long in-flight requests may finish
  ChatRenderer render_chat;          // required for /v1/chat/completions
  // Tool calls and reasoning: the parser for tool_choice "auto" (null: refused), the
  // reasoning split, the id style of forced calls.
  ChatOutputConfig chat_output;
  // The response cache in front of the engine (tier 1; --semantic-cache); off by default. With
  // an embedder and no response_cache.embed, keys are embedded by the embedder (semantic hits).
  ResponseCacheConfig response_cache;
  // The embedding model behind /v1/embeddings (--embedding-model, or --model EMBEDDER) and its
  // API name; null: /v1/embeddings answers 404.
  std::shared_ptr<const Embedder> embedder;
  std::string embedding_model_name;
  // The KV events publisher the engine feeds (--kv-events-config), for /metrics; may be null.
  std::shared_ptr<const KvEventPublisher> kv_events;
  // The engine's KV tiers (disk, Redis), or null: /metrics reads their counters live (writes
  // finish after the step that offered them) and usage reports cached tokens per tier. Not
  // owned; must outlive the server.
  const KvTierManager* kv_tiers = nullptr;
  KvCacheInfo kv;
  KvEvictionPolicy kv_policy;        // the default of requests without "kv_policy"
  // The kernels' instruction-set level in use and the best this CPU has (kernels::SimdLevelName,
  // CpuSimdLevelName), for /metrics.
  std::string simd_level;
  std::string cpu_simd_level;
  bool f16_weights_as_bf16 = false;  // kernels::F16WeightsAsBf16()
};

// Owns the HTTP server and its metrics; borrows the engine and the tokenizer (must outlive it).
// The engine may be null when options.embedder is set: an embeddings-only server (the
// generation routes answer 400; /tokenize uses the embedder's tokenizer, passed as `tokenizer`).
// Bind() then Run() (blocks) on one thread; Shutdown() from any other thread (e.g. a signal
// watcher). Handlers run on the HTTP thread pool and talk to the engine only through its
// thread-safe submit/abort/stats.
class OpenAiServer {
 public:
  OpenAiServer(ServerOptions options, Engine* engine, const Tokenizer* tokenizer);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the listening socket (errors: address in use, bad host).
  Status Bind();
  int port() const { return http_->port(); }
  // The HTTP layer's connection cap in force (lowered to fit the file-descriptor limit).
  int64_t max_connections() const { return http_->max_connections(); }
  std::string url() const;
  // Serves until Shutdown(). Returns an error when the listener failed.
  Status Run();
  // Stops taking requests (new ones get 503), lets in-flight requests finish for up to
  // shutdown_timeout_s, aborts the rest, then stops the listener so that Run() returns.
  // Thread-safe; later calls do nothing.
  void Shutdown();

  // Engine requests admitted and not yet finished (for tests).
  int64_t num_in_flight() const { return in_flight_.load(); }
  // The /metrics document.
  std::string RenderMetrics() const;

 private:
  struct Generation;
  friend struct Generation;
  using Request = http::HttpRequest;
  using Response = http::HttpResponse;
  using Writer = http::ResponseWriter;

  void install_routes();
  // The generator's max_model_len, else the embedder's max_tokens.
  int64_t max_model_len() const;
  bool authorized(const Request& req, Response& res);
  void reply_error(Response& res, int status, const std::string& message,
                   const std::string& param = "", const std::string& code = "");
  // reply_error for a Status: InvalidArgument 400, Unavailable 503, anything else 500.
  void reply_status(Response& res, const Status& status, const openai::ParamError& error = {});
  // The generation routes (generate_handler.cc): parse -> build engine inputs
  // (generate_request.h) -> submit_generation -> respond_gathered or respond_streaming.
  // `res` is sent by the route unless the handler streamed through `writer`.
  void handle_generate(const Request& req, Response& res, Writer& writer, bool chat);
  // Admits one engine request per choice (Unavailable: the queue is full or the server is
  // draining) and submits them; the Generation holds their streams and admission slots.
  StatusOr<std::shared_ptr<Generation>> submit_generation(const GenerateRequest& request,
                                                          EngineInputs inputs,
                                                          ChatOutputPlan plan);
  // Waits for every choice, then one JSON body (500 when a choice failed). A client that
  // goes away first has its requests aborted.
  void respond_gathered(Generation& gen, Response& res, const Writer& writer);
  // Server-sent events written on this thread: the generation (and its engine requests) ends
  // when the stream ends or its client goes away.
  void respond_streaming(Generation& gen, Writer& writer, const http::Headers& extra_headers);
  // A response-cache hit: the stored response with a new id and the x-kvserve-cache headers,
  // as one body or replayed as SSE chunks.
  void respond_from_cache(const GenerateRequest& request, const semcache::LookupResult& hit,
                          Response& res, Writer& writer);
  // POST /v1/embeddings (embeddings_handler.cc).
  void handle_embeddings(const Request& req, Response& res, const Writer& writer);
  void handle_tokenize(const Request& req, Response& res);
  // POST /reset_prefix_cache (vLLM's): empties the prefix cache when no request holds it.
  void handle_reset_prefix_cache(Response& res);
  void handle_detokenize(const Request& req, Response& res);
  void handle_models(Response& res);
  // Admission: reserves `n` in-flight slots or returns false (queue full / draining).
  bool try_admit(int64_t n, std::string* why);
  void release(int64_t n);
  // malloc_trim when nothing is in flight, at most every few seconds.
  void trim_if_idle();
  void track(SeqId id);
  void untrack(SeqId id);

  ServerOptions options_;
  Engine* engine_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<http::HttpServer> http_;
  int64_t max_in_flight_ = 0;
  int64_t created_unix_ = 0;
  ServerMetrics metrics_;
  grammar::GrammarCache grammar_cache_;  // structured-output grammars, compiled once per spec

  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> shut_down_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;  // in_flight_ changed
  std::set<SeqId> live_ids_;    // engine requests of in-flight HTTP requests
  std::chrono::steady_clock::time_point last_trim_{};  // last malloc_trim (when idle)
};

}  // namespace kvserve
