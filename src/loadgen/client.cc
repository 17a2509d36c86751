#include "loadgen/client.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "loadgen/sse.h"

namespace kvserve::loadgen {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = 4096;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string Truncate(std::string s, size_t n) {
  if (s.size() > n) {
    s.resize(n);
    s += "...";
  }
  return s;
}

// The message of an error body: OpenAI {"error": {"message"}}, vLLM {"message"}, llama.cpp
// {"error": {"message"}} or a plain string; else the raw text, shortened.
std::string ErrorMessage(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded()) {
    if (j.is_object()) {
      auto e = j.find("error");
      if (e != j.end()) {
        if (e->is_string()) return e->get<std::string>();
        if (e->is_object()) {
          auto m = e->find("message");
          if (m != e->end() && m->is_string()) return m->get<std::string>();
        }
      }
      auto m = j.find("message");
      if (m != j.end() && m->is_string()) return m->get<std::string>();
    }
    if (j.is_string()) return j.get<std::string>();
  }
  std::string s = body;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return Truncate(s, 300);
}

int64_t IntOr(const json& obj, const char* key, int64_t fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (std::isfinite(v) && v >= 0 && v < 9e18) return static_cast<int64_t>(v);
  }
  return fallback;
}

// httplib's error names, said the way a user reads them.
std::string TransportError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "the connection was closed, reset or timed out while reading the response";
    case httplib::Error::Write:
      return "the connection was closed while sending the request";
    default:
      return httplib::to_string(e);
  }
}

void SetTimeouts(httplib::Client& client, const ClientOptions& o) {
  auto split = [](double s) {
    const double whole = std::floor(std::max(0.0, s));
    return std::pair<time_t, time_t>(static_cast<time_t>(whole),
                                     static_cast<time_t>((std::max(0.0, s) - whole) * 1e6));
  };
  auto c = split(o.connect_timeout_s);
  auto r = split(o.read_timeout_s);
  client.set_connection_timeout(c.first, c.second);
  client.set_read_timeout(r.first, r.second);
  client.set_write_timeout(r.first, r.second);
}

}  // namespace

StatusOr<std::pair<std::string, std::string>> SplitBaseUrl(const std::string& base_url) {
  size_t scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos) {
    return InvalidArgumentError("--base-url '" + base_url + "' must start with http:// or https://");
  }
  const std::string scheme = base_url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return InvalidArgumentError("--base-url '" + base_url + "' must start with http:// or https://");
  }
  const size_t host_begin = scheme_end + 3;
  const size_t slash = base_url.find('/', host_begin);
  std::string origin = base_url.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : base_url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (origin.size() <= host_begin) return InvalidArgumentError("--base-url '" + base_url + "' has no host");
  return std::make_pair(origin, prefix);
}

StatusOr<std::string> BuildRequestBody(const BenchRequest& r, const RequestBodyOptions& o) {
  json body = json::object();
  body["model"] = o.model;
  const bool chat = o.endpoint.find("chat") != std::string::npos;
  if (chat) {
    const std::string text =
        r.prompt_token_ids.empty() ? r.prompt_text : TokenIdsToText(r.prompt_token_ids);
    body["messages"] = json::array({json{{"role", "user"}, {"content", text}}});
  } else if (!r.prompt_token_ids.empty()) {
    body["prompt"] = r.prompt_token_ids;
  } else {
    body["prompt"] = r.prompt_text;
  }
  body["max_tokens"] = r.output_len;
  body["temperature"] = o.temperature;
  body["stream"] = true;
  body["stream_options"] = json{{"include_usage", true}};
  if (r.fixed_output_len && o.allow_ignore_eos) body["ignore_eos"] = true;
  if (!o.extra_body_json.empty()) {
    json extra = json::parse(o.extra_body_json, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      return InvalidArgumentError("--extra-body must be a JSON object");
    }
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  }
  return body.dump();
}

// ---------------------------------------------------------------------------------------------
// StreamRecorder

struct StreamRecorder::Impl {
  explicit Impl(Clock::time_point send) : send_time(send), parser([this](const SseEvent& e) { OnEvent(e); }) {}

  void OnEvent(const SseEvent& e) {
    ++num_events;
    if (e.data == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(e.data, nullptr, false);
    if (e.type == "error") {
      if (error.empty()) error = "error event: " + (j.is_discarded() ? Truncate(e.data, 300) : ErrorMessage(e.data));
      return;
    }
    if (j.is_discarded() || !j.is_object()) {
      if (error.empty()) error = "malformed stream chunk: " + Truncate(e.data, 200);
      return;
    }
    if (j.contains("error") && !j["error"].is_null()) {
      if (error.empty()) error = "error in stream: " + ErrorMessage(e.data);
      return;
    }
    auto usage = j.find("usage");
    if (usage != j.end() && usage->is_object()) {
      usage_reported = true;
      prompt_tokens = IntOr(*usage, "prompt_tokens", prompt_tokens);
      completion_tokens = IntOr(*usage, "completion_tokens", completion_tokens);
      auto details = usage->find("prompt_tokens_details");
      if (details != usage->end()) cached_tokens = IntOr(*details, "cached_tokens", cached_tokens);
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return;
    const json& c = (*choices)[0];
    if (!c.is_object()) return;
    size_t chars = 0;
    bool has_tokens = false;
    auto add_text = [&](const json& obj, const char* key) {
      auto t = obj.find(key);
      if (t != obj.end() && t->is_string()) chars += t->get_ref<const std::string&>().size();
    };
    add_text(c, "text");
    auto delta = c.find("delta");
    if (delta != c.end() && delta->is_object()) {
      add_text(*delta, "content");
      add_text(*delta, "reasoning_content");
      add_text(*delta, "reasoning");
    }
    auto ids = c.find("token_ids");
    if (ids != c.end() && ids->is_array() && !ids->empty()) has_tokens = true;
    if (chars == 0 && !has_tokens) return;
    if (num_content_chunks == 0) {
      ttft_ms = MsBetween(send_time, event_time);
    } else {
      itl_ms.push_back(MsBetween(last_content_time, event_time));
    }
    last_content_time = event_time;
    ++num_content_chunks;
    output_chars += static_cast<int64_t>(chars);
  }

  Clock::time_point send_time;
  Clock::time_point event_time;
  Clock::time_point last_content_time;
  SseParser parser;
  int64_t num_events = 0;
  int64_t num_content_chunks = 0;
  int64_t output_chars = 0;
  double ttft_ms = 0.0;
  std::vector<double> itl_ms;
  bool usage_reported = false;
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;
  bool done = false;
  std::string error;
};

StreamRecorder::StreamRecorder(Clock::time_point send_time)
    : impl_(std::make_unique<Impl>(send_time)) {}
StreamRecorder::~StreamRecorder() = default;

void StreamRecorder::OnBytes(std::string_view bytes, Clock::time_point now) {
  impl_->event_time = now;
  impl_->parser.Feed(bytes);
}

void StreamRecorder::Finish(Clock::time_point now, RequestResult* result) {
  impl_->event_time = now;
  impl_->parser.Finish();
  Impl& s = *impl_;
  result->e2e_ms = MsBetween(s.send_time, now);
  result->ttft_ms = s.ttft_ms;
  result->itl_ms = std::move(s.itl_ms);
  result->num_content_chunks = s.num_content_chunks;
  result->output_chars = s.output_chars;
  result->usage_reported = s.usage_reported;
  result->prompt_tokens = s.prompt_tokens;
  result->cached_tokens = s.cached_tokens;
  result->output_tokens = s.completion_tokens >= 0 ? s.completion_tokens : s.num_content_chunks;
  result->done_received = s.done;
  result->error = s.error;
  if (result->error.empty() && s.num_events == 0) {
    result->error = "no server-sent events in the response (does the server stream?)";
  }
  if (result->error.empty() && s.num_content_chunks == 0 && result->output_tokens == 0) {
    result->error = "the stream carried no output";
  }
  result->success = result->error.empty();
  if (s.num_content_chunks == 0 && result->success) result->ttft_ms = result->e2e_ms;
}

// ---------------------------------------------------------------------------------------------
// OpenAiClient

struct OpenAiClient::Impl {
  Impl(const std::string& origin, std::string prefix_in) : client(origin), prefix(std::move(prefix_in)) {}
  httplib::Client client;
  std::string prefix;
  double read_timeout_s = 0;
};

OpenAiClient::OpenAiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiClient::~OpenAiClient() = default;

StatusOr<std::unique_ptr<OpenAiClient>> OpenAiClient::Create(const ClientOptions& options) {
  KV_ASSIGN_OR_RETURN(auto parts, SplitBaseUrl(options.base_url));
  auto impl = std::make_unique<Impl>(parts.first, parts.second);
  if (!impl->client.is_valid()) {
    return InvalidArgumentError("--base-url '" + options.base_url + "': cannot create an HTTP client");
  }
  SetTimeouts(impl->client, options);
  impl->read_timeout_s = options.read_timeout_s;
  impl->client.set_keep_alive(true);
  // One request is a header and a body write: without TCP_NODELAY the second waits for the
  // server's delayed ACK (40 ms on Linux), which would be measured as server latency.
  impl->client.set_tcp_nodelay(true);
  if (!options.api_key.empty()) impl->client.set_bearer_token_auth(options.api_key);
  return std::unique_ptr<OpenAiClient>(new OpenAiClient(std::move(impl)));
}

StatusOr<std::string> OpenAiClient::Get(const std::string& path) {
  const std::string full = impl_->prefix + path;
  httplib::Result res = impl_->client.Get(full);
  if (!res) {
    return UnavailableError("GET " + full + ": " + TransportError(res.error()));
  }
  if (res->status != 200) {
    return UnavailableError("GET " + full + ": HTTP " + std::to_string(res->status) + ": " +
                            ErrorMessage(res->body));
  }
  return res->body;
}

StatusOr<std::string> OpenAiClient::FirstModelId() {
  KV_ASSIGN_OR_RETURN(std::string body, Get("/v1/models"));
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    auto data = j.find("data");
    if (data != j.end() && data->is_array() && !data->empty() && (*data)[0].is_object()) {
      auto id = (*data)[0].find("id");
      if (id != (*data)[0].end() && id->is_string()) return id->get<std::string>();
    }
  }
  return UnavailableError("GET /v1/models: no model id in the response; pass --model");
}

RequestResult OpenAiClient::StreamRequest(const std::string& path, const std::string& body_json) {
  // A keep-alive connection the server has just closed (httplib-based servers such as
  // llama-server close one after a fixed number of requests) fails the next request at once,
  // before any response byte; like HTTP client libraries, that one case is sent again, once, on a
  // fresh connection. Nothing else is retried: a reply, a timeout or a refused connection stands.
  for (int attempt = 0;; ++attempt) {
    bool stale_connection = false;
    RequestResult result = StreamRequestOnce(path, body_json, &stale_connection);
    if (!stale_connection || attempt > 0) return result;
    impl_->client.stop();  // closes the dead socket; the next send connects anew
  }
}

RequestResult OpenAiClient::StreamRequestOnce(const std::string& path,
                                              const std::string& body_json,
                                              bool* stale_connection) {
  RequestResult result;
  const Clock::time_point send_time = Clock::now();
  StreamRecorder recorder(send_time);
  int status = 0;
  std::string error_body;
  bool received = false;

  httplib::Request req;
  req.method = "POST";
  req.path = impl_->prefix + path;
  req.body = body_json;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  std::string cache_tier;
  req.response_handler = [&](const httplib::Response& res) {
    received = true;
    status = res.status;
    cache_tier = res.get_header_value("x-kvserve-cache");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t /*offset*/, uint64_t /*total*/) {
    received = true;
    if (status == 200) {
      recorder.OnBytes(std::string_view(data, n), Clock::now());
    } else if (error_body.size() < kMaxErrorBodyBytes) {
      error_body.append(data, std::min(n, kMaxErrorBodyBytes - error_body.size()));
    }
    return true;
  };
  const bool reused = impl_->client.is_socket_open();
  httplib::Result res = impl_->client.send(req);
  const Clock::time_point end = Clock::now();
  *stale_connection = !res && reused && !received &&
                      (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write) &&
                      MsBetween(send_time, end) < 1000 * impl_->read_timeout_s;
  recorder.Finish(end, &result);
  result.http_status = status;
  result.cache_tier = cache_tier;
  if (!res) {
    result.success = false;
    result.error = "connection error: " + TransportError(res.error());
    if (status != 0) result.error += " (after HTTP " + std::to_string(status) + ")";
  } else if (status != 200) {
    result.success = false;
    if (error_body.empty()) error_body = res->body;
    result.error = "HTTP " + std::to_string(status) + ": " + ErrorMessage(error_body);
  }
  if (!result.success && result.error.empty()) result.error = "unknown error";
  return result;
}

}  // namespace kvserve::loadgen
