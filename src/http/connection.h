// Connection: one accepted socket of HttpServer and its request/response state machine
//   idle -> header -> body -> handling -> (next request | close)
// with one deadline per phase (HttpServerOptions). Every member runs on the connection's
// strand; the only entry points from other threads are CloseAsync() and the ResponseWriter
// (ConnectionWriter), which post to it. Owned by shared_ptr: the pending asynchronous
// operations and the writer of the request being handled keep it alive.
#pragma once

#include <atomic>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http/http_server.h"

namespace kvserve::http {

class Connection;

// A Beast body type whose bytes go into a BodyBuffer (Reserve'd up front when the
// Content-Length is known; the parser's body_limit is checked before each put).
struct MappedBody {
  using value_type = BodyBuffer;
  static std::uint64_t size(const value_type& v) { return v.size(); }
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec) {
      ec = {};
      if (content_length && !body_.Reserve(static_cast<size_t>(*content_length))) {
        ec = boost::beast::http::error::buffer_overflow;
      }
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      size_t n = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        const boost::asio::const_buffer b = *it;
        if (!body_.Append(b.data(), b.size())) {
          ec = boost::beast::http::error::buffer_overflow;
          return n;
        }
        n += b.size();
      }
      return n;
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

// What a connection needs of its server (HttpServer::Impl). Thread-safe.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  virtual const HttpServerOptions& opts() const = 0;
  // The handler of method + path; nullptr with *path_known telling 404 from 405.
  virtual const Handler* find_route(const std::string& method, const std::string& path,
                                    bool* path_known) const = 0;
  virtual std::string allowed_methods(const std::string& path) const = 0;
  virtual void run_handler(std::function<void()> task) = 0;
  virtual HttpResponse make_error(int status, const std::string& message) const = 0;
  virtual void observe(int status) const = 0;
  // The connection closed its socket (once).
  virtual void closed(Connection* c, bool counted) = 0;
  virtual bool stopping() const = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using tcp = boost::asio::ip::tcp;

  // `counted`: the connection is under the server's cap (else it is only rejected).
  Connection(ConnectionHost* host, tcp::socket socket, bool counted);

  // Starts reading the first request (posts to the strand).
  void Start();
  // Answers 503 with `message` and closes (posts to the strand).
  void Reject(std::string message);
  // Closes the socket from any thread.
  void CloseAsync();
  // Closes the socket unless a request is being answered (from any thread); one being
  // answered closes after its response (the host is stopping).
  void CloseIfIdleAsync();

  // For the writer (any thread): queues bytes; `done(ok)` runs on the strand once they are
  // written (ok) or cannot be (the connection failed or closed).
  void QueueWrite(std::string bytes, std::function<void(bool ok)> done);
  // For the writer: the response is complete after the queued bytes; `close_after`: close
  // the connection then instead of reading the next request.
  void QueueResponseEnd(bool close_after);
  bool gone() const { return gone_.load(); }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };

  void WaitForRequest();
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void OnBody(boost::beast::error_code ec);
  void OnReadError(boost::beast::error_code ec);
  void Dispatch();
  void ReadAhead();
  void WriteNext();
  void OnResponseComplete();
  // Writes an error response, then drains unread input for linger_s and closes.
  void Fail(int status, const std::string& message);
  void Linger();
  void DrainInput();
  void OnTimeout();
  void Close();
  void Arm(double seconds);
  void Disarm();

  ConnectionHost* host_;
  const HttpServerOptions& options_;
  tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<MappedBody>> parser_;
  const bool counted_;

  Phase phase_ = Phase::kHeader;
  uint64_t timer_generation_ = 0;
  bool read_ahead_pending_ = false;
  bool response_complete_ = false;  // the current response's last bytes are queued
  bool close_after_response_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool timed_out_ = false;  // the phase deadline passed: the read was cancelled for a 408
  struct PendingWrite {
    std::string bytes;
    std::function<void(bool)> done;
  };
  std::deque<PendingWrite> writes_;
  std::atomic<bool> gone_{false};
};

}  // namespace kvserve::http
