// HttpServer: an event-driven HTTP/1.1 server (Boost.Beast over Asio) for `kvserve serve`.
//
// Reading and writing are asynchronous on a few I/O threads, so an idle, slow or stalled
// connection costs a socket and a small buffer, never a thread. Handlers run on a worker pool
// (they may block: a generation waits on the engine) once a request has been read whole.
//
// Limits enforced while reading, each answered at once and the connection closed:
//   header larger than max_header_bytes           -> 431
//   body (Content-Length or chunked) over the limit -> 413 (as soon as it is known)
//   malformed framing (bad or conflicting Content-Length, bad chunk, bad request line) -> 400
// Per-phase deadlines close a connection that stalls: header (from the first byte or accept),
// body, idle keep-alive between requests, and writes a client does not read. More than
// max_connections open connections: the next ones get 503 and are closed.
// Keep-alive and pipelining: requests on one connection are answered in order, one at a time;
// bytes of the next request that arrive while one runs are read ahead (bounded), which is
// also how a client that goes away mid-request is noticed (ResponseWriter::client_gone()).
// TCP_NODELAY is set and each response head goes out in the same write as its body.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "http/body_buffer.h"

namespace kvserve::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// One request, read whole.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, e.g. "/v1/models?x=1"
  std::string path;    // target without the query
  int version = 11;    // 10 (HTTP/1.0) or 11
  Headers headers;     // as sent
  std::string_view body;  // de-chunked; the bytes live in body_storage
  std::shared_ptr<const BodyBuffer> body_storage;
  // The value of header `name` (case-insensitive), "" when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no Content-Type header
  Headers headers;           // extra headers
  std::string body;
};

// The way back to one request's client. Thread-safe; used by the handler's thread. A handler
// calls Send once, or StartStream, any number of Write and EndStream. A handler that returns
// without a response gets a 500 sent for it; a stream it leaves open is cut (the connection
// closes).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A whole response. Returns false when the client is gone.
  virtual bool Send(HttpResponse response) = 0;
  // A streamed response (chunked transfer coding; to an HTTP/1.0 client: until the close).
  virtual bool StartStream(int status, std::string content_type, Headers headers) = 0;
  // Blocks until the bytes are written to the socket (or the write failed / timed out).
  // Returns false when the client is gone.
  virtual bool Write(std::string_view data) = 0;
  virtual bool EndStream() = 0;
  // The client closed its side or the connection failed: nothing more will reach it.
  virtual bool client_gone() const = 0;
  // Send or StartStream was called.
  virtual bool responded() const = 0;
};

using Handler = std::function<void(const HttpRequest&, ResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (HttpServer::port())
  int listen_backlog = 1024;
  int64_t max_connections = 10000;  // open connections; more get 503 (lowered to fit RLIMIT_NOFILE)
  int64_t max_header_bytes = 64 << 10;   // request line + header fields
  int64_t max_body_bytes = 32 << 20;     // after de-chunking
  int64_t max_read_ahead_bytes = 1 << 20;  // pipelined bytes read while a request runs
  double header_timeout_s = 10.0;  // from accept / the first byte to the end of the header
  double body_timeout_s = 60.0;    // from the end of the header to the end of the body
  double idle_timeout_s = 30.0;    // keep-alive: between the end of a response and the next byte
  double write_timeout_s = 60.0;   // one write the client does not read
  double linger_s = 1.0;
  // Stop(): how long requests being answered may finish before their connections are cut.
  double stop_grace_s = 10.0;  // after a framing error: how long unread input is drained before close
  int num_io_threads = 1;
  int max_worker_threads = 64;  // handler threads, started as needed
  // The response for the server's own errors (404, 405, 408, 413, 431, 400, 503, 500).
  std::function<HttpResponse(int status, const std::string& message)> error_response;
  // Called with the status of every response (handlers' and the server's own), on any thread.
  std::function<void(int status)> observe_status;
};

// Owns the listening socket, the connections, the I/O threads and the worker pool.
// Route() before Bind(); Bind() then Run() (blocks until Stop() has finished); Stop() from
// another thread (not from a handler): closes the listener and the idle connections, lets the
// responses being written finish for up to stop_grace_s, then cuts what is left and waits for
// the handlers.
class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for exact `method` and `path` (unknown path: 404; known path, other
  // method: 405).
  void Route(std::string method, std::string path, Handler handler);
  Status Bind();
  int port() const { return port_; }
  // The connection cap in force (options.max_connections, lowered to what file descriptors allow).
  int64_t max_connections() const;
  Status Run();
  void Stop();
  // Open connections now (for tests and /metrics).
  int64_t num_connections() const;

  struct Impl;

 private:
  void WaitStopped();

  HttpServerOptions options_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// ASCII case-insensitive equality (header names, tokens such as "100-continue", auth schemes).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// The status line's reason phrase ("OK", "Not Found", ...).
std::string_view ReasonPhrase(int status);

}  // namespace kvserve::http
