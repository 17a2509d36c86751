#include "server/server.h"

#include <httplib.h>
#include <malloc.h>
#include <sys/socket.h>

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

constexpr int kListenBacklog = 1024;  // pending connections the kernel queues for us
constexpr auto kTrimInterval = std::chrono::seconds(5);

}  // namespace

OpenAiServer::OpenAiServer(ServerOptions options, Engine* engine, const Tokenizer* tokenizer)
    : options_(std::move(options)), engine_(engine), tokenizer_(tokenizer) {
  KV_CHECK(engine_ != nullptr && tokenizer_ != nullptr);
  max_in_flight_ = engine_->scheduler_config().max_num_seqs + std::max<int64_t>(0, options_.max_queue_len);
  created_unix_ = openai::UnixNow();
  http_ = std::make_unique<httplib::Server>();
  // One thread per request that may be in flight, plus a few for quick answers (503s,
  // /metrics, /health) while all of those stream.
  const size_t threads = static_cast<size_t>(std::min<int64_t>(max_in_flight_, 1024) + 8);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(static_cast<size_t>(options_.max_request_body_bytes));
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections beyond that is
  // dropped by the kernel and clients see resets. Remember the socket to raise the backlog
  // after bind, and use SO_REUSEADDR (restart after TIME_WAIT) but not httplib's default
  // SO_REUSEPORT (which would let a second server bind the same port silently).
  http_->set_socket_options([this](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  install_routes();
}

OpenAiServer::~OpenAiServer() {
  if (http_ != nullptr) http_->stop();
}

std::string OpenAiServer::url() const {
  return "http://" + options_.host + ":" + std::to_string(port_);
}

Status OpenAiServer::Bind() {
  if (options_.port == 0) {
    const int p = http_->bind_to_any_port(options_.host);
    if (p <= 0) return UnavailableError("cannot listen on " + options_.host + " (any port)");
    port_ = p;
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return UnavailableError("cannot listen on " + options_.host + ":" +
                              std::to_string(options_.port) +
                              " (in use, or not an address of this machine)");
    }
    port_ = options_.port;
  }
  if (listen_fd_ >= 0 && ::listen(listen_fd_, kListenBacklog) != 0) {
    return UnavailableError("cannot raise the listen backlog");
  }
  return OkStatus();
}

Status OpenAiServer::Run() {
  if (port_ == 0) return FailedPreconditionError("OpenAiServer::Run before Bind");
  if (!http_->listen_after_bind() && !shut_down_.load()) {
    return UnavailableError("the HTTP listener stopped unexpectedly");
  }
  return OkStatus();
}

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
  http_->stop();
}

bool OpenAiServer::try_admit(int64_t n, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_.load()) {
    *why = "the server is shutting down";
    return false;
  }
  if (in_flight_.load() + n > max_in_flight_) {
    *why = "the server is at capacity: " + std::to_string(in_flight_.load()) +
           " requests are running or queued (--max-num-seqs " +
           std::to_string(engine_->scheduler_config().max_num_seqs) + " + --max-queue-len " +
           std::to_string(options_.max_queue_len) + "); retry later";
    return false;
  }
  in_flight_ += n;
  return true;
}

void OpenAiServer::release(int64_t n) {
  bool trim = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ -= n;
    // Idle: hand the allocator's free memory back to the OS (glibc keeps freed memory in
    // per-thread arenas, so the resident size of a server with many HTTP threads creeps up
    // after bursts and never comes back). At most once per kTrimInterval.
    const auto now = std::chrono::steady_clock::now();
    if (in_flight_.load() == 0 && now - last_trim_ >= kTrimInterval) {
      last_trim_ = now;
      trim = true;
    }
  }
  cv_.notify_all();
  if (trim) malloc_trim(0);
}

void OpenAiServer::track(SeqId id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.insert(id);
}

void OpenAiServer::untrack(SeqId id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ids_.erase(id);
}

void OpenAiServer::reply_error(httplib::Response& res, int status, const std::string& message,
                               const std::string& param, const std::string& code) {
  res.status = status;
  res.set_content(openai::Dump(openai::ErrorBody(status, message, param, code)),
                  "application/json");
}

void OpenAiServer::reply_status(httplib::Response& res, const Status& status,
                                const openai::ParamError& error) {
  int http_status = 500;
  if (status.code() == StatusCode::kInvalidArgument) http_status = 400;
  if (status.code() == StatusCode::kUnavailable) http_status = 503;
  reply_error(res, http_status, status.message(), error.param, error.code);
}

bool OpenAiServer::authorized(const httplib::Request& req, httplib::Response& res) {
  if (options_.api_key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  // "Bearer" is case-insensitive (RFC 7235 auth-scheme); the key is compared exactly.
  constexpr std::string_view kScheme = "bearer ";
  const bool bearer =
      auth.size() >= kScheme.size() &&
      std::equal(kScheme.begin(), kScheme.end(), auth.begin(), [](char a, char b) {
        return a == std::tolower(static_cast<unsigned char>(b));
      });
  if (bearer && auth.compare(kScheme.size(), std::string::npos, options_.api_key) == 0) {
    return true;
  }
  reply_error(res, 401,
              auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                           : "invalid API key");
  return false;
}

void OpenAiServer::install_routes() {
  httplib::Server& s = *http_;
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, /*chat=*/false);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, /*chat=*/true);
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) handle_models(res);
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) handle_tokenize(req, res);
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) handle_detokenize(req, res);
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_.load()) {
      reply_error(res, 503, "the server is shutting down");
      return;
    }
    res.status = 200;
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        reply_error(res, 500, what);
      });
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    metrics_.count_http_error(res.status);
    if (!res.body.empty()) return;  // our own error object
    if (res.status == 404) {
      reply_error(res, 404, "no route for " + req.method + " " + req.path);
    } else if (res.status == 413) {
      reply_error(res, 413, "the request body is larger than " +
                                std::to_string(options_.max_request_body_bytes) + " bytes");
    } else {
      reply_error(res, res.status, "HTTP error " + std::to_string(res.status));
    }
  });
}

}  // namespace kvserve
