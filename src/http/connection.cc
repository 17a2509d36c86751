#include "http/connection.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <utility>

namespace kvserve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

// The status line and header fields of a response.
std::string ResponseHead(int status, const std::string& content_type, const Headers& headers,
                         std::optional<size_t> content_length, bool chunked, bool close,
                         int request_version) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(ReasonPhrase(status)) + "\r\n";
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (content_length.has_value()) out += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  if (close) {
    out += "Connection: close\r\n";
  } else if (request_version == 10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

std::string FullResponse(const HttpResponse& r, bool close, int request_version) {
  return ResponseHead(r.status, r.content_type, r.headers, r.body.size(), false, close,
                      request_version) +
         r.body;
}

bool IsBeastHttpError(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
}

// The ResponseWriter of one request: turns Send / Write into bytes queued on the connection.
// Write blocks its caller until the bytes are written, so a stream's producer runs at the
// pace of its client (and learns at once that it went away).
class ConnectionWriter final : public ResponseWriter {
 public:
  ConnectionWriter(std::shared_ptr<Connection> conn, ConnectionHost* host, int version,
                   bool keep_alive)
      : conn_(std::move(conn)), host_(host), version_(version), keep_alive_(keep_alive) {}

  bool Send(HttpResponse r) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (responded_) return false;
    responded_ = true;
    ended_ = true;
    const bool close = !keep_alive_ || conn_->gone() || host_->stopping();
    host_->observe(r.status);
    conn_->QueueWrite(FullResponse(r, close, version_), nullptr);
    conn_->QueueResponseEnd(close);
    return !conn_->gone();
  }

  bool StartStream(int status, std::string content_type, Headers headers) override {
    std::string head;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (responded_) return false;
      responded_ = true;
      streaming_ = true;
      chunked_ = version_ >= 11;
      // HTTP/1.0 has no chunked coding: the end of the stream is the close.
      close_ = !keep_alive_ || !chunked_ || host_->stopping();
      host_->observe(status);
      head = ResponseHead(status, content_type, headers, std::nullopt, chunked_, close_, version_);
    }
    return WriteAndWait(std::move(head));
  }

  bool Write(std::string_view data) override {
    std::string bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!streaming_ || ended_) return false;
      if (data.empty()) return !conn_->gone();
      if (chunked_) {
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        bytes.reserve(data.size() + 32);
        bytes += size;
        bytes += data;
        bytes += "\r\n";
      } else {
        bytes.assign(data);
      }
    }
    return WriteAndWait(std::move(bytes));
  }

  bool EndStream() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streaming_ || ended_) return false;
    ended_ = true;
    if (chunked_) conn_->QueueWrite("0\r\n\r\n", nullptr);
    conn_->QueueResponseEnd(close_);
    return !conn_->gone();
  }

  bool client_gone() const override { return conn_->gone(); }
  bool responded() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return responded_;
  }

  // After the handler returned (or threw `error`): a response it did not send is a 500; a
  // stream it did not end is cut.
  void Finish(const std::string& error) {
    bool responded, open_stream;
    {
      std::lock_guard<std::mutex> lock(mu_);
      responded = responded_;
      open_stream = streaming_ && !ended_;
      if (open_stream) ended_ = true;
    }
    if (!responded) {
      Send(host_->make_error(500, error.empty() ? "the handler sent no response" : error));
    } else if (open_stream) {
      conn_->QueueResponseEnd(/*close_after=*/true);
    }
  }

 private:
  bool WriteAndWait(std::string bytes) {
    if (conn_->gone()) return false;
    struct Wait {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      bool ok = false;
    };
    auto wait = std::make_shared<Wait>();
    conn_->QueueWrite(std::move(bytes), [wait](bool ok) {
      std::lock_guard<std::mutex> lock(wait->mu);
      wait->done = true;
      wait->ok = ok;
      wait->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(wait->mu);
    wait->cv.wait(lock, [&] { return wait->done; });
    return wait->ok && !conn_->gone();
  }

  std::shared_ptr<Connection> conn_;
  ConnectionHost* host_;
  const int version_;
  const bool keep_alive_;
  mutable std::mutex mu_;
  bool responded_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool close_ = false;
  bool ended_ = false;
};

}  // namespace

Connection::Connection(ConnectionHost* host, tcp::socket socket, bool counted)
    : host_(host), options_(host->opts()), socket_(std::move(socket)),
      timer_(socket_.get_executor()), counted_(counted) {}

void Connection::Start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->socket_.set_option(tcp::no_delay(true), ignored);
    self->phase_ = Phase::kHeader;
    self->Arm(self->options_.header_timeout_s);
    self->ReadHeader();
  });
}

void Connection::Reject(std::string message) {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this(), m = std::move(message)] {
    self->Fail(503, m);
  });
}

void Connection::CloseAsync() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

void Connection::CloseIfIdleAsync() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->phase_ != Phase::kHandling) self->Close();
  });
}

void Connection::QueueWrite(std::string bytes, std::function<void(bool)> done) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), b = std::move(bytes), d = std::move(done)]() mutable {
               if (self->closed_) {
                 if (d) d(false);
                 return;
               }
               self->writes_.push_back({std::move(b), std::move(d)});
               if (!self->writing_) self->WriteNext();
             });
}

void Connection::QueueResponseEnd(bool close_after) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), close_after] {
    if (self->closed_) return;
    self->close_after_response_ = self->close_after_response_ || close_after;
    self->response_complete_ = true;
    if (!self->writing_) self->OnResponseComplete();
  });
}

void Connection::WaitForRequest() {
  if (buffer_.size() > 0) {  // a pipelined request, read ahead
    phase_ = Phase::kHeader;
    Arm(options_.header_timeout_s);
    ReadHeader();
    return;
  }
  phase_ = Phase::kIdle;
  Arm(options_.idle_timeout_s);
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    if (self->closed_) return;
    if (ec) return self->Close();
    self->phase_ = Phase::kHeader;
    self->Arm(self->options_.header_timeout_s);
    self->ReadHeader();
  });
}

void Connection::ReadHeader() {
  timed_out_ = false;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(
      std::clamp<int64_t>(options_.max_header_bytes, 256, int64_t{1} << 30)));
  parser_->body_limit(static_cast<std::uint64_t>(std::max<int64_t>(0, options_.max_body_bytes)));
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->OnHeader(ec);
                           });
}

void Connection::OnHeader(beast::error_code ec) {
  if (closed_) return;
  if (ec) return OnReadError(ec);
  if (parser_->is_done()) return Dispatch();
  const beast::string_view expect = parser_->get()[bhttp::field::expect];
  if (EqualsIgnoreCase(std::string_view(expect.data(), expect.size()), "100-continue")) {
    writes_.push_back({"HTTP/1.1 100 Continue\r\n\r\n", nullptr});
    if (!writing_) WriteNext();
  }
  phase_ = Phase::kBody;
  Arm(options_.body_timeout_s);
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code e, size_t) { self->OnBody(e); });
}

void Connection::OnBody(beast::error_code ec) {
  if (closed_) return;
  if (ec) return OnReadError(ec);
  Dispatch();
}

void Connection::OnReadError(beast::error_code ec) {
  if (closed_) return;
  Disarm();
  if (timed_out_) {
    return Fail(408, phase_ == Phase::kBody ? "the request body was not received in time"
                                            : "the request header was not received in time");
  }
  if (ec == bhttp::error::header_limit) {
    return Fail(431, "the request header is larger than " +
                         std::to_string(options_.max_header_bytes) + " bytes");
  }
  if (ec == bhttp::error::body_limit) {
    return Fail(413, "the request body is larger than " +
                         std::to_string(options_.max_body_bytes) + " bytes");
  }
  // The client closed (between requests or mid-message) or the connection failed.
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      !IsBeastHttpError(ec)) {
    return Close();
  }
  Fail(400, "malformed HTTP request: " + ec.message());
}

void Connection::Dispatch() {
  Disarm();
  phase_ = Phase::kHandling;
  response_complete_ = false;
  close_after_response_ = false;
  bhttp::request<MappedBody> msg = parser_->release();
  parser_.reset();
  auto req = std::make_shared<HttpRequest>();
  req->method = std::string(msg.method_string());
  req->target = std::string(msg.target());
  req->path = req->target.substr(0, req->target.find('?'));
  req->version = static_cast<int>(msg.version());
  for (const auto& field : msg) {
    req->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  auto storage = std::make_shared<BodyBuffer>(std::move(msg.body()));
  req->body = storage->view();
  req->body_storage = std::move(storage);
  auto writer = std::make_shared<ConnectionWriter>(shared_from_this(), host_, req->version,
                                                   msg.keep_alive());
  ReadAhead();  // notices a client that goes away; reads what it pipelines
  bool path_known = false;
  const Handler* handler = host_->find_route(req->method, req->path, &path_known);
  if (handler == nullptr) {
    HttpResponse r;
    if (path_known) {
      r = host_->make_error(405, "method " + req->method + " is not allowed for " + req->path);
      r.headers.emplace_back("Allow", host_->allowed_methods(req->path));
    } else {
      r = host_->make_error(404, "no route for " + req->method + " " + req->path);
    }
    writer->Send(std::move(r));
    return;
  }
  host_->run_handler([writer, req, handler] {
    std::string error;
    try {
      (*handler)(*req, *writer);
    } catch (const std::exception& e) {
      error = std::string("internal error: ") + e.what();
    } catch (...) {
      error = "internal error";
    }
    writer->Finish(error);
  });
}

void Connection::ReadAhead() {
  if (read_ahead_pending_ || closed_ || gone_.load()) return;
  if (buffer_.size() >= static_cast<size_t>(options_.max_read_ahead_bytes)) return;
  read_ahead_pending_ = true;
  socket_.async_read_some(
      buffer_.prepare(16 << 10), [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->read_ahead_pending_ = false;
        if (self->closed_) return;
        const bool response_done = self->response_complete_ && !self->writing_;
        if (!ec) {
          self->buffer_.commit(n);
          if (response_done) return self->OnResponseComplete();
          return self->ReadAhead();
        }
        if (ec == asio::error::operation_aborted) {  // cancelled to read the next request
          if (response_done) self->OnResponseComplete();
          return;
        }
        self->gone_ = true;  // EOF or reset: the client went away
        if (response_done) self->Close();
      });
}

void Connection::WriteNext() {
  if (writes_.empty()) {
    writing_ = false;
    if (response_complete_) OnResponseComplete();
    return;
  }
  writing_ = true;
  if (phase_ == Phase::kHandling) Arm(options_.write_timeout_s);
  asio::async_write(
      socket_, asio::buffer(writes_.front().bytes),
      [self = shared_from_this()](beast::error_code ec, size_t) {
        if (self->phase_ == Phase::kHandling) self->Disarm();
        if (self->writes_.empty()) return;  // failed and cleared by Close()
        PendingWrite w = std::move(self->writes_.front());
        self->writes_.pop_front();
        const bool ok = !ec && !self->closed_;
        if (!ok) {
          self->gone_ = true;
          self->writing_ = false;
          if (w.done) w.done(false);
          self->Close();
          return;
        }
        if (w.done) w.done(true);
        self->WriteNext();
      });
}

void Connection::OnResponseComplete() {
  if (closed_ || phase_ != Phase::kHandling) return;
  if (close_after_response_ || gone_.load() || host_->stopping()) return Close();
  if (read_ahead_pending_) {  // its completion comes back here
    beast::error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  response_complete_ = false;
  WaitForRequest();
}

void Connection::Fail(int status, const std::string& message) {
  Disarm();
  phase_ = Phase::kLinger;
  parser_.reset();  // frees the part of a body read so far (no read is pending here)
  host_->observe(status);
  writes_.push_back({FullResponse(host_->make_error(status, message), /*close=*/true, 11),
                     [self = shared_from_this()](bool ok) {
                       if (ok) {
                         self->Linger();
                       } else {
                         self->Close();
                       }
                     }});
  Arm(options_.write_timeout_s);
  if (!writing_) WriteNext();
}

// After an error response: the client may still be sending (a body over the limit). Closing
// with unread input makes the kernel send a reset, which can destroy the response before the
// client reads it; so the send side is shut and input is read and dropped for linger_s.
void Connection::Linger() {
  if (closed_) return;
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  Arm(options_.linger_s);
  DrainInput();
}

void Connection::DrainInput() {
  buffer_.clear();
  socket_.async_read_some(buffer_.prepare(16 << 10),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (self->closed_) return;
                            if (ec) return self->Close();
                            self->DrainInput();
                          });
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  gone_ = true;
  phase_ = Phase::kClosed;
  ++timer_generation_;
  timer_.cancel();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  // Writers waiting on queued bytes learn that they will not be written. A write in flight
  // (writing_) completes with an error and is answered there.
  std::deque<PendingWrite> pending;
  pending.swap(writes_);
  if (writing_ && !pending.empty()) {
    writes_.push_back(std::move(pending.front()));
    pending.pop_front();
  }
  for (PendingWrite& w : pending) {
    if (w.done) w.done(false);
  }
  host_->closed(this, counted_);
}

void Connection::Arm(double seconds) {
  const uint64_t generation = ++timer_generation_;
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::max(0.0, seconds))));
  timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    if (ec || generation != self->timer_generation_ || self->closed_) return;
    self->OnTimeout();
  });
}

void Connection::Disarm() {
  ++timer_generation_;
  timer_.cancel();
}

void Connection::OnTimeout() {
  switch (phase_) {
    case Phase::kHeader:
      if (buffer_.size() == 0) return Close();  // never sent a byte
      [[fallthrough]];
    case Phase::kBody: {
      // The pending read ends with operation_aborted; OnReadError answers 408.
      timed_out_ = true;
      beast::error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    case Phase::kIdle:
    case Phase::kHandling:  // a write the client does not read
    case Phase::kLinger:
    case Phase::kClosed:
      return Close();
  }
}

}  // namespace kvserve::http
