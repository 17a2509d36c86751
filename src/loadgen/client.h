// The HTTP side of `kvserve bench serve`: one streaming request to an OpenAI-compatible server
// (vLLM, llama.cpp's llama-server, `kvserve serve`, ...), timed chunk by chunk, plus the
// GET requests a benchmark needs (/v1/models, /metrics).
//
// OpenAiClient owns one HTTP connection (kept alive between requests). Not thread-safe: use
// one client per thread. cpp-httplib stays inside client.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/dataset.h"

namespace kvserve::loadgen {

using Clock = std::chrono::steady_clock;

struct ClientOptions {
  // Scheme, host, port and an optional path prefix: "http://127.0.0.1:8000",
  // "https://host/prefix". Endpoint paths are appended to it.
  std::string base_url = "http://127.0.0.1:8000";
  std::string api_key;  // sent as "Authorization: Bearer KEY" when non-empty
  double connect_timeout_s = 10.0;
  double read_timeout_s = 600.0;  // longest silence while waiting for a response or chunk
};

// What goes into each request body besides the prompt.
struct RequestBodyOptions {
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;
  double temperature = 0.0;
  bool allow_ignore_eos = true;  // send ignore_eos for requests with a fixed output length
  std::string extra_body_json;   // a JSON object merged into every body (may be empty)
};

// The outcome of one request. Times in ms; send_ms is relative to the benchmark's start.
struct RequestResult {
  bool success = false;
  int http_status = 0;  // 0: no HTTP response (connection failed)
  std::string error;    // empty on success
  double scheduled_ms = 0.0;  // planned send time (arrival)
  double send_ms = 0.0;       // actual send time (later when --max-concurrency held it back)
  double ttft_ms = 0.0;       // first chunk with text or tokens
  double e2e_ms = 0.0;        // send to end of stream
  std::vector<double> itl_ms;  // gaps between consecutive chunks with text or tokens
  int64_t expected_prompt_len = 0;  // the dataset's prompt length (estimate for text)
  int64_t prompt_tokens = -1;       // from usage; -1 when not reported
  int64_t output_tokens = 0;        // from usage when reported, else content chunks
  int64_t cached_tokens = -1;       // usage.prompt_tokens_details.cached_tokens; -1: absent
  // The response's x-kvserve-cache header (kvserve's response cache: "miss", "exact",
  // "semantic"); "" when the server sent none.
  std::string cache_tier;
  int64_t num_content_chunks = 0;
  int64_t output_chars = 0;
  bool usage_reported = false;
  bool done_received = false;  // saw `data: [DONE]`

  // Prompt tokens the report counts: usage when reported, else the dataset's length.
  int64_t prompt_len() const { return prompt_tokens >= 0 ? prompt_tokens : expected_prompt_len; }
};

// Splits "http://host:port/prefix" into "http://host:port" and "/prefix" (no trailing '/').
// InvalidArgument for a URL without http:// or https://.
StatusOr<std::pair<std::string, std::string>> SplitBaseUrl(const std::string& base_url);

// The JSON body for one request: stream=true, stream_options.include_usage, max_tokens,
// temperature, ignore_eos (when the request fixes its length and it is allowed), prompt
// (token ids or text) or messages (chat; token ids are turned into text), then the extra
// body's keys (which win).
StatusOr<std::string> BuildRequestBody(const BenchRequest& request, const RequestBodyOptions& options);

// Collects one streamed response: feed it the bytes as they arrive, with their arrival time.
// Handles completions (`choices[0].text`) and chat (`choices[0].delta.content`, also
// `reasoning_content`) chunks, `usage` (the last one seen wins), error events, `[DONE]`.
class StreamRecorder {
 public:
  explicit StreamRecorder(Clock::time_point send_time);
  ~StreamRecorder();
  StreamRecorder(const StreamRecorder&) = delete;
  StreamRecorder& operator=(const StreamRecorder&) = delete;

  void OnBytes(std::string_view bytes, Clock::time_point now);
  // Ends the stream; fills everything in `result` but the schedule fields and http_status.
  void Finish(Clock::time_point now, RequestResult* result);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class OpenAiClient {
 public:
  static StatusOr<std::unique_ptr<OpenAiClient>> Create(const ClientOptions& options);
  ~OpenAiClient();
  OpenAiClient(const OpenAiClient&) = delete;
  OpenAiClient& operator=(const OpenAiClient&) = delete;

  // GET base_url + path; the body on HTTP 200, else Unavailable naming the status or the
  // connection error.
  StatusOr<std::string> Get(const std::string& path);

  // The first model id of GET /v1/models.
  StatusOr<std::string> FirstModelId();

  // POSTs `body_json` to base_url + path and records the stream. Never fails as a call: a
  // transport error, an HTTP error status or an error event make result.success false.
  // A reused keep-alive connection that the server closed before any response byte is retried
  // once on a new connection (see client.cc).
  RequestResult StreamRequest(const std::string& path, const std::string& body_json);

 private:
  // One send; *stale_connection says whether it failed on a reused, server-closed connection.
  RequestResult StreamRequestOnce(const std::string& path, const std::string& body_json,
                                  bool* stale_connection);
  struct Impl;
  explicit OpenAiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::loadgen
