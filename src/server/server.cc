#include "server/server.h"

#include <httplib.h>
#include <malloc.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/logging.h"

namespace kvserve {

using openai::Json;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(500);
constexpr int kListenBacklog = 1024;  // pending connections the kernel queues for us
constexpr auto kTrimInterval = std::chrono::seconds(5);

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

uint64_t RandomSeed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

double Seconds(EngineClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// One HTTP generation request: its engine requests (one per prompt x n), their outputs so far,
// and the per-request metrics. Lives as long as the HTTP response that streams it (shared by
// the handler and the content provider); destroying it aborts unfinished engine requests and
// releases the admission slots.
struct OpenAiServer::Generation {
  struct Choice {
    int64_t index = 0;
    int64_t prompt_index = 0;
    int64_t num_prompt_tokens = 0;
    std::unique_ptr<RequestStream> stream;
    std::string text;  // all text so far
    int64_t num_tokens = 0;
    int64_t num_cached_tokens = 0;
    FinishReason finish = FinishReason::kNone;
    std::string error;
    bool done = false;
    bool sent_role = false;  // chat stream: the first delta (role) was sent
    EngineClock::time_point last_token_time{};
    openai::CompletionLogprobs completion_logprobs;
    Json chat_logprobs = Json::array();
  };

  Generation(OpenAiServer* s, int64_t num_slots) : server(s), slots(num_slots) {}
  ~Generation() {
    for (Choice& c : choices) {
      // Not done: the client went away (or the request failed): aborted with the stream.
      if (!c.done) server->metrics_.count_finished("abort");
      if (c.stream != nullptr) server->untrack(c.stream->id());
      c.stream.reset();  // aborts unfinished requests
    }
    server->release(slots);
  }

  OpenAiServer* server;
  int64_t slots;
  bool chat = false;
  std::string id;
  int64_t created = 0;
  std::string model;
  openai::GenerationParams params;
  std::vector<Choice> choices;
  std::vector<int64_t> prompt_lengths;

  bool all_done() const {
    for (const Choice& c : choices) {
      if (!c.done) return false;
    }
    return true;
  }

  // Applies one engine event to its choice (text, logprobs, metrics). Returns the new text.
  std::string apply(Choice& c, const StreamEvent& ev, Json* chat_logprobs_delta,
                    openai::CompletionLogprobs* completion_logprobs_delta) {
    ServerMetrics& m = server->metrics_;
    const Tokenizer* tok = server->tokenizer_;
    if (!ev.token_ids.empty()) {
      if (c.num_tokens == 0) {
        m.time_to_first_token_seconds.observe(Seconds(ev.time - c.stream->submit_time()));
      } else {
        m.inter_token_latency_seconds.observe(Seconds(ev.time - c.last_token_time));
      }
      c.last_token_time = ev.time;
    }
    for (size_t i = 0; i < ev.logprobs.size(); ++i) {
      const SampledLogprobs& lp = ev.logprobs[i];
      openai::TokenText sampled{lp.sampled.token, tok->TokenToPiece(lp.sampled.token, true),
                                lp.sampled.logprob};
      std::vector<openai::TokenText> top;
      for (const TokenLogprob& t : lp.top) {
        top.push_back({t.token, tok->TokenToPiece(t.token, true), t.logprob});
      }
      if (chat) {
        Json entry = openai::ChatLogprobEntry(sampled, top);
        c.chat_logprobs.push_back(entry);
        if (chat_logprobs_delta != nullptr) chat_logprobs_delta->push_back(entry);
      } else {
        const int64_t offset = static_cast<int64_t>(c.text.size());
        c.completion_logprobs.add(sampled, top, offset);
        if (completion_logprobs_delta != nullptr) {
          completion_logprobs_delta->add(sampled, top, offset);
        }
      }
    }
    c.num_tokens += static_cast<int64_t>(ev.token_ids.size());
    c.num_cached_tokens = std::max(c.num_cached_tokens, ev.num_cached_prompt_tokens);
    c.text += ev.text;
    if (ev.finished()) {
      c.done = true;
      c.finish = ev.finish_reason;
      c.error = ev.error;
      const EngineClock::time_point submitted = c.stream->submit_time();
      m.e2e_request_latency_seconds.observe(Seconds(ev.time - submitted));
      if (ev.first_scheduled_time != EngineClock::time_point{}) {
        m.request_queue_time_seconds.observe(Seconds(ev.first_scheduled_time - submitted));
      }
      m.request_prompt_tokens.observe(static_cast<double>(c.num_prompt_tokens));
      m.request_generation_tokens.observe(static_cast<double>(c.num_tokens));
      m.count_finished(FinishReasonName(ev.finish_reason));
      if (ev.first_scheduled_time != EngineClock::time_point{}) {
        m.recent_hit_rate.record(c.num_prompt_tokens, c.num_cached_tokens);
      }
    }
    return ev.text;
  }

  // Waits for the next event of any unfinished choice. Returns false when every choice is
  // done. *timed_out: nothing arrived within the poll interval.
  bool next(size_t* which, StreamEvent* ev, bool* timed_out) {
    *timed_out = false;
    const auto per_choice = choices.size() == 1 ? kPollInterval : std::chrono::milliseconds(2);
    const auto deadline = EngineClock::now() + kPollInterval;
    while (true) {
      bool any = false;
      for (size_t i = 0; i < choices.size(); ++i) {
        Choice& c = choices[i];
        if (c.done) continue;
        any = true;
        if (c.stream->NextFor(ev, per_choice) == RequestStream::WaitResult::kEvent) {
          *which = i;
          return true;
        }
      }
      if (!any) return false;
      if (EngineClock::now() >= deadline) {
        *timed_out = true;
        return true;
      }
    }
  }

  Json usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (int64_t len : prompt_lengths) prompt += len;
    std::vector<bool> counted(prompt_lengths.size(), false);
    for (const Choice& c : choices) {
      completion += c.num_tokens;
      if (!counted[static_cast<size_t>(c.prompt_index)]) {
        counted[static_cast<size_t>(c.prompt_index)] = true;
        cached += c.num_cached_tokens;
      }
    }
    return openai::Usage(prompt, completion, cached);
  }

  Json chunk_base() const {
    return Json{{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model}};
  }
};

OpenAiServer::OpenAiServer(ServerOptions options, Engine* engine, const Tokenizer* tokenizer)
    : options_(std::move(options)), engine_(engine), tokenizer_(tokenizer) {
  KV_CHECK(engine_ != nullptr && tokenizer_ != nullptr);
  max_in_flight_ = engine_->scheduler_config().max_num_seqs + std::max<int64_t>(0, options_.max_queue_len);
  created_unix_ = UnixNow();
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
  const std::string expected = "Bearer " + options_.api_key;
  if (auth == expected) return true;
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

void OpenAiServer::handle_generate(const httplib::Request& req, httplib::Response& res,
                                   bool chat) {
  if (!authorized(req, res)) return;
  if (draining_.load()) {
    reply_error(res, 503, "the server is shutting down");
    return;
  }
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    reply_error(res, 400, "the request body is not valid JSON");
    return;
  }
  openai::ParamError perr;
  openai::GenerationParams params;
  std::vector<std::vector<TokenId>> prompts;
  const int64_t vocab = tokenizer_->vocab_size();
  if (chat) {
    auto parsed = openai::ParseChatRequest(body, &perr);
    if (!parsed.ok()) {
      reply_error(res, 400, parsed.status().message(), perr.param);
      return;
    }
    if (!options_.render_chat) {
      reply_error(res, 400, "this server has no chat template");
      return;
    }
    auto text = options_.render_chat(*parsed);
    if (!text.ok()) {
      reply_error(res, 400, "chat template: " + text.status().message(), "messages");
      return;
    }
    prompts.push_back(
        tokenizer_->Encode(*text, EncodeOptions{.add_bos = false, .parse_special = true}));
    params = std::move(parsed->params);
  } else {
    auto parsed = openai::ParseCompletionRequest(body, &perr);
    if (!parsed.ok()) {
      reply_error(res, 400, parsed.status().message(), perr.param);
      return;
    }
    for (const openai::PromptInput& p : parsed->prompts) {
      if (p.text.has_value()) {
        prompts.push_back(
            tokenizer_->Encode(*p.text, EncodeOptions{.add_bos = true, .parse_special = true}));
      } else {
        for (TokenId t : p.ids) {
          if (t >= vocab) {
            reply_error(res, 400,
                        "prompt token id " + std::to_string(t) + " is outside the vocabulary (" +
                            std::to_string(vocab) + " tokens)",
                        "prompt");
            return;
          }
        }
        prompts.push_back(p.ids);
      }
    }
    params = std::move(parsed->params);
  }
  if (!params.model.empty() && params.model != options_.served_model_name) {
    reply_error(res, 400,
                "the model '" + params.model + "' does not exist; this server serves '" +
                    options_.served_model_name + "'",
                "model", "model_not_found");
    return;
  }
  for (TokenId t : params.stop_token_ids) {
    if (t >= vocab) {
      reply_error(res, 400, "stop_token_ids: " + std::to_string(t) + " is outside the vocabulary",
                  "stop_token_ids");
      return;
    }
  }
  const int64_t max_model_len = engine_->scheduler_config().max_model_len;
  for (const std::vector<TokenId>& p : prompts) {
    const int64_t len = static_cast<int64_t>(p.size());
    if (len == 0) {
      reply_error(res, 400, "the prompt is empty", chat ? "messages" : "prompt");
      return;
    }
    if (len >= max_model_len || (params.max_tokens && len + *params.max_tokens > max_model_len)) {
      reply_error(res, 400,
                  "this model's maximum context length is " + std::to_string(max_model_len) +
                      " tokens; the request has " + std::to_string(len) + " prompt tokens" +
                      (params.max_tokens ? " and asks for " + std::to_string(*params.max_tokens) +
                                               " completion tokens"
                                         : std::string()) +
                      ". Shorten the prompt or lower max_tokens",
                  chat ? "messages" : "prompt", "context_length_exceeded");
      return;
    }
  }

  const int64_t num_choices = static_cast<int64_t>(prompts.size()) * params.n;
  std::string why;
  if (!try_admit(num_choices, &why)) {
    reply_error(res, 503, why);
    return;
  }
  auto gen = std::make_shared<Generation>(this, num_choices);
  gen->chat = chat;
  gen->id = RandomId(chat ? "chatcmpl-" : "cmpl-");
  gen->created = UnixNow();
  gen->model = options_.served_model_name;
  gen->params = params;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int64_t len = static_cast<int64_t>(prompts[p].size());
    gen->prompt_lengths.push_back(len);
    for (int64_t j = 0; j < params.n; ++j) {
      RequestInput in;
      in.prompt_ids = prompts[p];
      in.sampling = params.sampling;
      in.sampling.seed = params.seed_given ? params.sampling.seed + static_cast<uint64_t>(j)
                                           : RandomSeed();
      // Default: completions 16 tokens (OpenAI); chat: the rest of the context (vLLM).
      in.max_tokens = params.max_tokens ? *params.max_tokens : (chat ? max_model_len - len : 16);
      in.stop = params.stop;
      in.stop_token_ids = params.stop_token_ids;
      in.ignore_eos = params.ignore_eos;
      in.priority = params.priority;
      in.cache_salt = params.cache_salt;
      in.logprobs = params.logprobs;
      auto stream = engine_->submit(std::move(in));
      if (!stream.ok()) {
        reply_error(res, 400, stream.status().message());
        return;  // gen's destructor aborts the choices submitted so far
      }
      Generation::Choice c;
      c.index = static_cast<int64_t>(gen->choices.size());
      c.prompt_index = static_cast<int64_t>(p);
      c.num_prompt_tokens = len;
      c.stream = std::move(stream).value();
      track(c.stream->id());
      gen->choices.push_back(std::move(c));
    }
  }

  if (!params.stream) {
    size_t which = 0;
    StreamEvent ev;
    bool timed_out = false;
    while (gen->next(&which, &ev, &timed_out)) {
      if (!timed_out) gen->apply(gen->choices[which], ev, nullptr, nullptr);
    }
    Json choices = Json::array();
    for (Generation::Choice& c : gen->choices) {
      if (c.finish == FinishReason::kError) {
        reply_error(res, 500, "generation failed: " + c.error);
        return;
      }
      Json choice = {{"index", c.index}, {"finish_reason", FinishReasonName(c.finish)}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        choice["logprobs"] = params.logprobs >= 0 ? Json{{"content", c.chat_logprobs}} : Json();
      } else {
        choice["text"] = c.text;
        choice["logprobs"] = params.logprobs >= 0 ? c.completion_logprobs.json() : Json();
      }
      choices.push_back(std::move(choice));
    }
    Json out = {{"id", gen->id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", gen->created},
                {"model", gen->model},
                {"choices", choices},
                {"usage", gen->usage()}};
    res.set_content(openai::Dump(out), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [gen](size_t, httplib::DataSink& sink) -> bool {
        auto send = [&](const Json& j) {
          const std::string line = "data: " + openai::Dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        const bool include_usage = gen->params.include_usage;
        const bool want_logprobs = gen->params.logprobs >= 0;
        if (gen->chat) {
          // The role comes first, in its own chunk per choice (as OpenAI sends it).
          for (Generation::Choice& c : gen->choices) {
            Json chunk = gen->chunk_base();
            chunk["choices"] = Json::array({{{"index", c.index},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
            if (include_usage) chunk["usage"] = nullptr;
            if (!send(chunk)) return false;
            c.sent_role = true;
          }
        }
        size_t which = 0;
        StreamEvent ev;
        bool timed_out = false;
        while (gen->next(&which, &ev, &timed_out)) {
          if (timed_out) {
            // Nothing to say yet (queued): an SSE comment keeps the connection alive and
            // notices a client that went away (its requests are aborted on return).
            static const char kPing[] = ": ping\n\n";
            if (!sink.write(kPing, sizeof(kPing) - 1)) return false;
            continue;
          }
          Generation::Choice& c = gen->choices[which];
          Json chat_lp = Json::array();
          openai::CompletionLogprobs completion_lp;
          const std::string text = gen->apply(c, ev, &chat_lp, &completion_lp);
          if (c.finish == FinishReason::kError) {
            send(Json{{"error", openai::ErrorBody(500, "generation failed: " + c.error)["error"]}});
            sink.done();
            return true;
          }
          const bool has_tokens = !ev.token_ids.empty();
          if (text.empty() && !ev.finished() && !(want_logprobs && has_tokens)) continue;
          Json choice = {{"index", c.index}};
          if (gen->chat) {
            choice["delta"] = text.empty() && ev.finished() ? Json::object()
                                                            : Json{{"content", text}};
            choice["logprobs"] = want_logprobs && has_tokens ? Json{{"content", chat_lp}} : Json();
          } else {
            choice["text"] = text;
            choice["logprobs"] = want_logprobs && has_tokens ? completion_lp.json() : Json();
          }
          choice["finish_reason"] = ev.finished() ? Json(FinishReasonName(c.finish)) : Json();
          Json chunk = gen->chunk_base();
          chunk["choices"] = Json::array({choice});
          if (include_usage) chunk["usage"] = nullptr;
          if (!send(chunk)) return false;
        }
        if (include_usage) {
          Json chunk = gen->chunk_base();
          chunk["choices"] = Json::array();
          chunk["usage"] = gen->usage();
          if (!send(chunk)) return false;
        }
        static const char kDone[] = "data: [DONE]\n\n";
        if (!sink.write(kDone, sizeof(kDone) - 1)) return false;
        sink.done();
        return true;
      });
}

}  // namespace kvserve
