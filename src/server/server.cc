#include "server/server.h"

#include <malloc.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string_view>
#include <utility>

#include "base/check.h"
#include "base/logging.h"

namespace kvserve {

using openai::Json;

namespace {

constexpr auto kTrimInterval = std::chrono::seconds(5);
constexpr size_t kLargeBodyBytes = 1 << 20;
// Tokens of a response-cache key the embedding model sees (the most recent ones):
// sentence-transformers' max_seq_length of all-MiniLM and most of its kind, and half the cost
// of 512 for long conversations.
constexpr int64_t kMaxCacheKeyTokens = 256;

}  // namespace

OpenAiServer::OpenAiServer(ServerOptions options, Engine* engine, const Tokenizer* tokenizer)
    : options_(std::move(options)), engine_(engine), tokenizer_(tokenizer) {
  KV_CHECK(tokenizer_ != nullptr && (engine_ != nullptr || options_.embedder != nullptr));
  // Embeddings-only: one request embeds at a time (the Embedder's lock); the rest queue.
  const int64_t running = engine_ != nullptr ? engine_->scheduler_config().max_num_seqs : 1;
  max_in_flight_ = running + std::max<int64_t>(0, options_.max_queue_len);
  if (options_.embedder != nullptr && options_.response_cache.cache != nullptr &&
      !options_.response_cache.embed) {
    // Cache keys are conversations: their last kMaxCacheKeyTokens tokens are embedded.
    options_.response_cache.embed = [this](std::string_view text) -> StatusOr<std::vector<float>> {
      const auto start = std::chrono::steady_clock::now();
      auto ids = options_.embedder->Tokenize(text, EmbedTruncation::kKeepEnd, kMaxCacheKeyTokens);
      if (!ids.ok()) return ids.status();
      const auto num_tokens = static_cast<int64_t>(ids->size());
      auto out = options_.embedder->Embed({*std::move(ids)});
      if (!out.ok()) return out.status();
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      metrics_.record_embedding(/*api=*/false, 1, num_tokens, took.count());
      return std::move(out->front());
    };
  }
  created_unix_ = openai::UnixNow();
  http::HttpServerOptions ho = options_.http;
  // One handler thread per request that may be in flight, plus a few for quick answers (503s,
  // /metrics, /health) while all of those stream. Threads start as they are needed.
  ho.max_worker_threads = static_cast<int>(std::min<int64_t>(max_in_flight_, 1024) + 8);
  ho.error_response = [](int status, const std::string& message) {
    return http::HttpResponse{status, "application/json", {},
                              openai::Dump(openai::ErrorBody(status, message))};
  };
  ho.observe_status = [this](int status) {
    if (status >= 400) metrics_.count_http_error(status);
  };
  http_ = std::make_unique<http::HttpServer>(std::move(ho));
  install_routes();
}

OpenAiServer::~OpenAiServer() {
  if (http_ != nullptr) http_->Stop();
}

std::string OpenAiServer::url() const {
  return "http://" + options_.http.host + ":" + std::to_string(port());
}

Status OpenAiServer::Bind() { return http_->Bind(); }

Status OpenAiServer::Run() { return http_->Run(); }

void OpenAiServer::Shutdown() {
  if (draining_.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(
                            std::max(0.0, options_.shutdown_timeout_s) * 1000.0));
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return in_flight_.load() == 0; })) {
    KV_LOG(WARNING) << "shutdown: aborting " << live_ids_.size()
                    << " request(s) still running after " << options_.shutdown_timeout_s << " s";
    for (SeqId id : live_ids_) engine_->abort(id);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return in_flight_.load() == 0; });
  }
  lock.unlock();
  shut_down_ = true;
  http_->Stop();
}

bool OpenAiServer::try_admit(int64_t n, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_.load()) {
    *why = "the server is shutting down";
    return false;
  }
  if (in_flight_.load() + n > max_in_flight_) {
    *why = "the server is at capacity: " + std::to_string(in_flight_.load()) +
           " requests are running or queued (" +
           (engine_ != nullptr
                ? "--max-num-seqs " + std::to_string(engine_->scheduler_config().max_num_seqs)
                : std::string("1 embedding at a time")) +
           " + --max-queue-len " + std::to_string(options_.max_queue_len) + "); retry later";
    return false;
  }
  in_flight_ += n;
  return true;
}

int64_t OpenAiServer::max_model_len() const {
  return engine_ != nullptr ? engine_->scheduler_config().max_model_len
                            : options_.embedder->max_tokens();
}

void OpenAiServer::release(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ -= n;
  }
  cv_.notify_all();
  trim_if_idle();
}

void OpenAiServer::trim_if_idle() {
  // Idle: hand the allocator's free memory back to the OS (glibc keeps freed memory in
  // per-thread arenas, so the resident size of a server with many HTTP threads creeps up
  // after bursts and large requests, and never comes back). At most once per kTrimInterval.
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (in_flight_.load() != 0 || now - last_trim_ < kTrimInterval) return;
    last_trim_ = now;
  }
  malloc_trim(0);
}

void OpenAiServer::track(SeqId id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.insert(id);
}

void OpenAiServer::untrack(SeqId id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.erase(id);
}

void OpenAiServer::reply_error(Response& res, int status, const std::string& message,
                               const std::string& param, const std::string& code) {
  res.status = status;
  res.content_type = "application/json";
  res.body = openai::Dump(openai::ErrorBody(status, message, param, code));
}

void OpenAiServer::reply_status(Response& res, const Status& status,
                                const openai::ParamError& error) {
  int http_status = 500;
  if (status.code() == StatusCode::kInvalidArgument) http_status = 400;
  if (status.code() == StatusCode::kUnavailable) http_status = 503;
  // nginx's "client closed request": nobody reads it, but /metrics counts it.
  if (status.code() == StatusCode::kCancelled) http_status = 499;
  reply_error(res, http_status, status.message(), error.param, error.code);
}

bool OpenAiServer::authorized(const Request& req, Response& res) {
  if (options_.api_key.empty()) return true;
  const std::string auth = req.header("Authorization");
  // "Bearer" is case-insensitive (RFC 7235 auth-scheme); the key is compared exactly.
  constexpr std::string_view kScheme = "bearer ";
  const std::string_view given(auth);
  if (given.size() >= kScheme.size() &&
      http::EqualsIgnoreCase(given.substr(0, kScheme.size()), kScheme) &&
      given.substr(kScheme.size()) == options_.api_key) {
    return true;
  }
  reply_error(res, 401,
              auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                           : "invalid API key");
  return false;
}

void OpenAiServer::install_routes() {
  // Every route fills a Response that is sent when it returns, unless it streamed.
  using Fn = std::function<void(const Request&, Response&, Writer&)>;
  auto route = [this](const char* method, const char* path, Fn fn) {
    http_->Route(method, path, [this, fn = std::move(fn)](const Request& req, Writer& writer) {
      Response res;
      fn(req, res, writer);
      if (!writer.responded()) writer.Send(std::move(res));
      // A large body leaves large parsed values (JSON, prompt text) freed in this thread's arena.
      if (req.body.size() >= kLargeBodyBytes) trim_if_idle();
    });
  };
  route("POST", "/v1/completions", [this](const Request& req, Response& res, Writer& w) {
    handle_generate(req, res, w, /*chat=*/false);
  });
  route("POST", "/v1/chat/completions", [this](const Request& req, Response& res, Writer& w) {
    handle_generate(req, res, w, /*chat=*/true);
  });
  route("POST", "/v1/embeddings", [this](const Request& req, Response& res, Writer& w) {
    if (authorized(req, res)) handle_embeddings(req, res, w);
  });
  route("POST", "/reset_prefix_cache", [this](const Request& req, Response& res, Writer&) {
    if (authorized(req, res)) handle_reset_prefix_cache(res);
  });
  route("GET", "/v1/models", [this](const Request& req, Response& res, Writer&) {
    if (authorized(req, res)) handle_models(res);
  });
  route("POST", "/tokenize", [this](const Request& req, Response& res, Writer&) {
    if (authorized(req, res)) handle_tokenize(req, res);
  });
  route("POST", "/detokenize", [this](const Request& req, Response& res, Writer&) {
    if (authorized(req, res)) handle_detokenize(req, res);
  });
  route("GET", "/health", [this](const Request&, Response& res, Writer&) {
    if (draining_.load()) reply_error(res, 503, "the server is shutting down");
  });
  route("GET", "/metrics", [this](const Request&, Response& res, Writer&) {
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = RenderMetrics();
  });
}

}  // namespace kvserve
