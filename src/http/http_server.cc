#include "http/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "base/check.h"
#include "base/logging.h"
#include "http/connection.h"
#include "http/worker_pool.h"

namespace kvserve::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// File descriptors kept for everything that is not a connection (model files, logs, pipes).
constexpr int64_t kReservedFds = 128;

}  // namespace

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

std::string_view ReasonPhrase(int status) {
  namespace bhttp = boost::beast::http;
  if (status == 499) return "Client Closed Request";  // nginx's, for /metrics
  const boost::beast::string_view r =
      bhttp::obsolete_reason(static_cast<bhttp::status>(static_cast<unsigned>(status)));
  if (r.starts_with("<")) return "Unknown";  // "<unknown-status>"
  return std::string_view(r.data(), r.size());
}

// The server's shared state: routes, the acceptor, the connection registry, the threads.
struct HttpServer::Impl final : public ConnectionHost {
  explicit Impl(const HttpServerOptions& o)
      : options(o), io(std::max(1, o.num_io_threads)), acceptor(asio::make_strand(io)),
        retry_timer(acceptor.get_executor()), pool(o.max_worker_threads),
        work(asio::make_work_guard(io)) {}

  // ConnectionHost.
  const HttpServerOptions& opts() const override { return options; }
  const Handler* find_route(const std::string& method, const std::string& path,
                            bool* path_known) const override {
    auto it = routes.find(path);
    *path_known = it != routes.end();
    if (!*path_known) return nullptr;
    for (const auto& [m, h] : it->second) {
      if (m == method) return &h;
    }
    return nullptr;
  }
  std::string allowed_methods(const std::string& path) const override {
    std::string out;
    auto it = routes.find(path);
    if (it == routes.end()) return out;
    for (const auto& [m, h] : it->second) out += (out.empty() ? "" : ", ") + m;
    return out;
  }
  void run_handler(std::function<void()> task) override { pool.Submit(std::move(task)); }
  HttpResponse make_error(int status, const std::string& message) const override {
    if (options.error_response) return options.error_response(status, message);
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain; charset=utf-8";
    r.body = message + "\n";
    return r;
  }
  void observe(int status) const override {
    if (options.observe_status) options.observe_status(status);
  }
  void closed(Connection* c, bool counted) override {
    std::lock_guard<std::mutex> lock(mu);
    conns.erase(c);
    if (counted) --num_counted;
  }
  bool stopping() const override { return stop_requested.load(); }

  void Accept() {
    acceptor.async_accept(asio::make_strand(io), [this](boost::system::error_code ec,
                                                         tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of file descriptors (EMFILE/ENFILE) or a transient error: wait, then go on.
        const auto now = std::chrono::steady_clock::now();
        if (now - last_accept_warning > std::chrono::seconds(10)) {
          last_accept_warning = now;
          KV_LOG(WARNING) << "http: accept failed: " << ec.message() << "; retrying";
        }
        retry_timer.expires_after(std::chrono::milliseconds(50));
        retry_timer.async_wait([this](boost::system::error_code e) {
          if (!e) Accept();
        });
        return;
      }
      bool counted = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (num_counted < max_connections) {
          ++num_counted;
          counted = true;
        }
      }
      auto conn = std::make_shared<Connection>(this, std::move(socket), counted);
      {
        std::lock_guard<std::mutex> lock(mu);
        conns[conn.get()] = conn;
      }
      if (stop_requested.load()) {
        conn->CloseAsync();
      } else if (counted) {
        conn->Start();
      } else {
        conn->Reject("too many open connections (" + std::to_string(max_connections) +
                     "); retry later");
      }
      Accept();
    });
  }

  HttpServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;
  WorkerPool pool;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::map<std::string, std::vector<std::pair<std::string, Handler>>> routes;
  int64_t max_connections = 0;
  std::chrono::steady_clock::time_point last_accept_warning{};

  mutable std::mutex mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;
  int64_t num_counted = 0;  // connections under the cap (rejected ones are not counted)
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> running{false};
  // Stop() has finished (guarded by mu): Run() and the destructor wait for it, so that the
  // server is never destroyed under a Stop() still running on another thread.
  bool stop_done = false;
  std::condition_variable stop_done_cv;
};

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {}

HttpServer::~HttpServer() {
  Stop();
  WaitStopped();
}

void HttpServer::WaitStopped() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->stop_done_cv.wait(lock, [&] { return impl_->stop_done; });
}

void HttpServer::Route(std::string method, std::string path, Handler handler) {
  impl_->routes[std::move(path)].emplace_back(std::move(method), std::move(handler));
}

int64_t HttpServer::max_connections() const { return impl_->max_connections; }

int64_t HttpServer::num_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->num_counted;
}

Status HttpServer::Bind() {
  // Connections are file descriptors: raise the soft limit to the hard one, and keep the cap
  // below what is left after the descriptors the rest of the process needs.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    if (lim.rlim_cur < lim.rlim_max) {
      rlimit raised = lim;
      raised.rlim_cur = lim.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
    }
  }
  impl_->max_connections = options_.max_connections;
  if (lim.rlim_cur != RLIM_INFINITY) {
    const int64_t fit = std::max<int64_t>(16, static_cast<int64_t>(lim.rlim_cur) - kReservedFds);
    if (fit < impl_->max_connections) {
      KV_LOG(WARNING) << "http: at most " << fit << " connections fit the file-descriptor limit ("
                      << lim.rlim_cur << "); the connection cap is lowered from "
                      << options_.max_connections;
      impl_->max_connections = fit;
    }
  }
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options_.host, ec);
  if (ec) return InvalidArgumentError("'" + options_.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(options_.listen_backlog, ec);
  if (ec) {
    boost::system::error_code ignored;
    a.close(ignored);
    return UnavailableError("cannot listen on " + options_.host + ":" +
                            std::to_string(options_.port) + ": " + ec.message());
  }
  port_ = a.local_endpoint().port();
  return OkStatus();
}

Status HttpServer::Run() {
  {
    // Under the lock with Stop()'s check: either Stop() sees running (and closes through the
    // I/O threads, which this call then runs) or this call sees the stop and returns.
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stop_requested.load()) return OkStatus();
    if (!impl_->acceptor.is_open()) return FailedPreconditionError("HttpServer::Run before Bind");
    impl_->running = true;
  }
  asio::post(impl_->acceptor.get_executor(), [this] { impl_->Accept(); });
  std::vector<std::thread> extra;
  for (int i = 1; i < options_.num_io_threads; ++i) {
    extra.emplace_back([this] { impl_->io.run(); });
  }
  impl_->io.run();
  for (std::thread& t : extra) t.join();
  impl_->running = false;
  WaitStopped();  // io.run() returns before Stop() has finished with the server
  return OkStatus();
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  bool running = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stop_requested.exchange(true)) return;
    running = s.running.load();
  }
  auto each_connection = [&s](auto fn) {
    std::vector<std::shared_ptr<Connection>> conns;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto& [p, w] : s.conns) {
        if (auto c = w.lock()) conns.push_back(std::move(c));
      }
    }
    for (auto& c : conns) fn(*c);
  };
  if (running) {
    // 1. No new connections; idle ones close; the ones answering close after their response.
    std::promise<void> closed;
    asio::post(s.acceptor.get_executor(), [&] {
      boost::system::error_code ignored;
      s.acceptor.close(ignored);
      s.retry_timer.cancel();
      closed.set_value();
    });
    closed.get_future().wait();
    each_connection([](Connection& c) { c.CloseIfIdleAsync(); });
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(
                              std::max(0.0, options_.stop_grace_s) * 1000.0));
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.conns.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // 2. Cut the rest: handlers blocked in a write see it fail and return.
    each_connection([](Connection& c) { c.CloseAsync(); });
  } else {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
  }
  s.pool.Stop();
  s.work.reset();
  s.io.stop();
  // Notified under the lock: a waiter that wakes may destroy the server at once.
  std::lock_guard<std::mutex> lock(s.mu);
  s.stop_done = true;
  s.stop_done_cv.notify_all();
}

}  // namespace kvserve::http
