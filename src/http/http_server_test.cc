// HttpServer over raw sockets: framing limits, deadlines, keep-alive, pipelining, streaming,
// disconnect detection and the connection cap, each as a client on loopback would see them.
#include "http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::http {
namespace {

using Clock = std::chrono::steady_clock;

// A blocking loopback client socket.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `pred(received)` holds, the peer closes, or `timeout_s` passes.
  template <typename Pred>
  std::string ReadUntil(Pred pred, double timeout_s = 5.0) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    while (!pred(buf_) && Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return buf_;
  }
  // One whole response with a Content-Length body (removed from the buffer).
  std::string ReadResponse(double timeout_s = 5.0) {
    ReadUntil([](const std::string& b) { return Complete(b) > 0; }, timeout_s);
    const size_t n = Complete(buf_);
    if (n == 0) return "";
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }
  // The peer closes the connection within timeout_s.
  bool WaitClosed(double timeout_s) {
    ReadUntil([](const std::string&) { return false; }, timeout_s);
    return closed_;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  // The length of the first complete Content-Length response in b (0: not yet).
  static size_t Complete(const std::string& b) {
    const size_t end = b.find("\r\n\r\n");
    if (end == std::string::npos) return 0;
    size_t length = 0;
    const size_t cl = b.find("Content-Length: ");
    if (cl != std::string::npos && cl < end) length = std::stoul(b.substr(cl + 16));
    return b.size() >= end + 4 + length ? end + 4 + length : 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string buf_;
};

int Status(const std::string& response) {
  return response.size() >= 12 ? std::stoi(response.substr(9, 3)) : 0;
}

std::string Body(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions o = {}) {
    o.port = 0;
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("GET", "/hello", [](const HttpRequest& req, ResponseWriter& w) {
      w.Send({200, "text/plain", {}, "hello " + req.header("x-name")});
    });
    server_->Route("POST", "/echo", [](const HttpRequest& req, ResponseWriter& w) {
      w.Send({200, "application/octet-stream", {}, std::string(req.body)});
    });
    server_->Route("GET", "/slow", [](const HttpRequest& req, ResponseWriter& w) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(req.header("x-ms"))));
      w.Send({200, "text/plain", {}, "slept " + req.header("x-ms")});
    });
    server_->Route("GET", "/stream", [this](const HttpRequest& req, ResponseWriter& w) {
      w.StartStream(200, "text/event-stream", {});
      const int count = req.header("x-count").empty() ? 1000 : std::stoi(req.header("x-count"));
      for (int i = 0; i < count; ++i) {
        if (w.client_gone() || !w.Write("data: " + std::to_string(i) + "\n\n")) {
          stream_saw_gone_ = true;
          return;
        }
        if (i >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      w.EndStream();
    });
    server_->Route("GET", "/wait-gone", [this](const HttpRequest&, ResponseWriter& w) {
      const auto deadline = Clock::now() + std::chrono::seconds(5);
      while (!w.client_gone() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      stream_saw_gone_ = w.client_gone();
      w.Send({200, "text/plain", {}, "late"});
    });
    server_->Route("GET", "/nothing", [](const HttpRequest&, ResponseWriter&) {});
    server_->Route("GET", "/throws", [](const HttpRequest&, ResponseWriter&) {
      throw std::runtime_error("boom");
    });
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Stop();
      thread_.join();
    }
  }
  int port() const { return server_->port(); }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::atomic<bool> stream_saw_gone_{false};
};

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  StartServer();
  RawClient c(port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Name: n" + std::to_string(i) + "\r\n\r\n"));
    const std::string r = c.ReadResponse();
    EXPECT_EQ(Status(r), 200) << r;
    EXPECT_EQ(Body(r), "hello n" + std::to_string(i));
    EXPECT_EQ(r.find("Connection: close"), std::string::npos);
  }
}

TEST_F(HttpServerTest, UnknownPathIs404AndOtherMethodIs405) {
  StartServer();
  RawClient c(port());
  c.Send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(c.ReadResponse()), 404);
  c.Send("POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  const std::string r = c.ReadResponse();
  EXPECT_EQ(Status(r), 405);
  EXPECT_NE(r.find("Allow: GET"), std::string::npos) << r;
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  RawClient c(port());
  std::string burst;
  for (int i = 0; i < 10; ++i) {
    burst += "GET /slow HTTP/1.1\r\nHost: x\r\nX-Ms: " + std::to_string((9 - i) * 3) + "\r\n\r\n";
  }
  ASSERT_TRUE(c.Send(burst));
  for (int i = 0; i < 10; ++i) {
    const std::string r = c.ReadResponse();
    EXPECT_EQ(Body(r), "slept " + std::to_string((9 - i) * 3)) << "response " << i;
  }
}

TEST_F(HttpServerTest, ChunkedBodyIsDecodedAndItsLimitEnforced) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  StartServer(o);
  {
    RawClient c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    const std::string r = c.ReadResponse();
    EXPECT_EQ(Status(r), 200);
    EXPECT_EQ(Body(r), "hello world");
  }
  {
    RawClient c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "100\r\n" + std::string(256, 'a') + "\r\n";
    for (int i = 0; i < 3; ++i) c.Send(chunk);  // 768 bytes: under the limit
    EXPECT_EQ(c.ReadResponse(0.2), "");
    // The limit is passed while the client still sends: answered at once, then closed.
    for (int i = 0; i < 8 && c.Send(chunk); ++i) {
    }
    const std::string r = c.ReadResponse();
    EXPECT_EQ(Status(r), 413) << r;
    EXPECT_NE(r.find("Connection: close"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(3.0));
  }
}

TEST_F(HttpServerTest, ContentLengthOverTheLimitIsRefusedBeforeTheBody) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  StartServer(o);
  RawClient c(port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nx");
  EXPECT_EQ(Status(c.ReadResponse(2.0)), 413);
  EXPECT_TRUE(c.WaitClosed(3.0));
}

TEST_F(HttpServerTest, MalformedFramingIs400AndCloses) {
  StartServer();
  const std::vector<std::string> bad = {
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000000000000000\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nabcd\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GARBAGE\r\n\r\n",
  };
  for (const std::string& request : bad) {
    RawClient c(port());
    c.Send(request);
    const std::string r = c.ReadResponse(2.0);
    EXPECT_EQ(Status(r), 400) << request << " -> " << r;
    EXPECT_TRUE(c.WaitClosed(3.0)) << request;
  }
}

TEST_F(HttpServerTest, LargeHeaderIs431) {
  HttpServerOptions o;
  o.max_header_bytes = 4096;
  StartServer(o);
  RawClient c(port());
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'b') + "\r\n\r\n");
  EXPECT_EQ(Status(c.ReadResponse(2.0)), 431);
  EXPECT_TRUE(c.WaitClosed(3.0));
}

TEST_F(HttpServerTest, PhaseDeadlinesCloseStalledConnections) {
  HttpServerOptions o;
  o.header_timeout_s = 0.3;
  o.body_timeout_s = 0.3;
  o.idle_timeout_s = 0.3;
  o.linger_s = 0.1;
  StartServer(o);
  RawClient silent(port());
  RawClient header(port());
  header.Send("GET /hello HTTP/1.1\r\nHost: x\r\n");  // no end of header
  RawClient body(port());
  body.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
  RawClient idle(port());
  idle.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(idle.ReadResponse()), 200);
  const auto start = Clock::now();
  EXPECT_TRUE(silent.WaitClosed(3.0));
  EXPECT_EQ(Status(header.ReadResponse(3.0)), 408);
  EXPECT_EQ(Status(body.ReadResponse(3.0)), 408);
  EXPECT_TRUE(header.WaitClosed(3.0));
  EXPECT_TRUE(body.WaitClosed(3.0));
  EXPECT_TRUE(idle.WaitClosed(3.0));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST_F(HttpServerTest, ManyStalledConnectionsDoNotDelayOthers) {
  StartServer();
  std::vector<std::unique_ptr<RawClient>> stalled;
  for (int i = 0; i < 300; ++i) {
    stalled.push_back(std::make_unique<RawClient>(port()));
    stalled.back()->Send(i % 2 ? "GET /hello HTTP/1.1\r\nHost: x\r\n"
                               : "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab");
  }
  RawClient c(port());
  c.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(c.ReadResponse(2.0)), 200);
  EXPECT_GE(server_->num_connections(), 301);
}

TEST_F(HttpServerTest, ConnectionsPastTheCapGet503) {
  HttpServerOptions o;
  o.max_connections = 4;
  StartServer(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(port()));
    held.back()->Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(Status(held.back()->ReadResponse()), 200);
  }
  RawClient extra(port());
  extra.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(extra.ReadResponse()), 503);
  held.pop_back();  // one closes: room again
  for (int i = 0; i < 100 && server_->num_connections() > 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  RawClient again(port());
  again.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(again.ReadResponse()), 200);
}

TEST_F(HttpServerTest, StreamsChunksAndNoticesAClientThatLeaves) {
  StartServer();
  {
    RawClient c(port());
    c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string got = c.ReadUntil(
        [](const std::string& b) { return b.find("data: 2\n\n") != std::string::npos; });
    EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos);
    EXPECT_NE(got.find("data: 0\n\n"), std::string::npos);
  }  // closed mid-stream
  for (int i = 0; i < 200 && !stream_saw_gone_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(stream_saw_gone_);
}

TEST_F(HttpServerTest, NoticesAClientThatLeavesBeforeAWholeResponse) {
  StartServer();
  {
    RawClient c(port());
    c.Send("GET /wait-gone HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int i = 0; i < 200 && !stream_saw_gone_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(stream_saw_gone_);
}

TEST_F(HttpServerTest, StopLetsAResponseBeingAnsweredFinish) {
  StartServer();
  RawClient c(port());
  c.Send("GET /slow HTTP/1.1\r\nHost: x\r\nX-Ms: 300\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server_->Stop();
  thread_.join();
  server_.reset();
  const std::string r = c.ReadResponse();
  EXPECT_EQ(Body(r), "slept 300") << r;
  EXPECT_TRUE(c.WaitClosed(2.0));
}

TEST_F(HttpServerTest, HandlerWithoutResponseOrThatThrowsGets500) {
  StartServer();
  RawClient c(port());
  c.Send("GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(c.ReadResponse()), 500);
  c.Send("GET /throws HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string r = c.ReadResponse();
  EXPECT_EQ(Status(r), 500);
  EXPECT_NE(r.find("boom"), std::string::npos);
}

TEST_F(HttpServerTest, ExpectContinueAndHttp10) {
  StartServer();
  {
    RawClient c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    const std::string cont = c.ReadUntil(
        [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << cont;
  }
  {
    RawClient c(port());
    c.Send("GET /hello HTTP/1.0\r\n\r\n");
    const std::string r = c.ReadResponse();
    EXPECT_EQ(Status(r), 200);
    EXPECT_NE(r.find("Connection: close"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(2.0));
  }
  {
    RawClient c(port());
    c.Send("GET /stream HTTP/1.0\r\nX-Count: 5\r\n\r\n");
    const std::string got = c.ReadUntil([](const std::string&) { return false; }, 5.0);
    EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos);
    EXPECT_NE(got.find("data: 4\n\n"), std::string::npos) << got;
  }
}

TEST_F(HttpServerTest, StopClosesIdleAndBusyConnections) {
  HttpServerOptions o;
  o.stop_grace_s = 0.2;  // the stream would run 20 s
  StartServer(o);
  RawClient idle(port());
  idle.Send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(Status(idle.ReadResponse()), 200);
  RawClient streaming(port());
  streaming.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  streaming.ReadUntil([](const std::string& b) { return b.find("data: 1\n\n") != std::string::npos; });
  const auto start = Clock::now();
  server_->Stop();
  thread_.join();
  server_.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(idle.WaitClosed(2.0));
  EXPECT_TRUE(streaming.WaitClosed(2.0));
}

}  // namespace
}  // namespace kvserve::http
