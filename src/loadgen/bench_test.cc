// End-to-end: RunBenchmark against a small fake OpenAI-compatible server on 127.0.0.1.
#include "loadgen/bench.h"

#include <httplib.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace kvserve::loadgen {
namespace {

using json = nlohmann::json;

struct FakeServerOptions {
  bool with_usage = true;
  bool with_metrics = true;
  int chunk_delay_ms = 2;
  std::string api_key;  // required when non-empty
};

// Streams max_tokens one-character chunks per request (completions or chat), then a usage
// chunk (cached_tokens = half the prompt) and [DONE]. Prompts "fail-500" / "fail-400" get
// that HTTP error. /metrics exposes kvserve: prefix-cache counters that grow with every
// request (hits = half the prompt). Tracks the most requests it had in flight at once.
class FakeServer {
 public:
  explicit FakeServer(FakeServerOptions o) : o_(std::move(o)) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    server_.set_keep_alive_timeout(1);
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                      "application/json");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      if (!o_.with_metrics) {
        res.status = 404;
        res.set_content("not found", "text/plain");
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      res.set_content(
          "# TYPE kvserve:prefix_cache_queries_total counter\n"
          "kvserve:prefix_cache_queries_total " + std::to_string(queries_) + "\n"
          "# TYPE kvserve:prefix_cache_hits_total counter\n"
          "kvserve:prefix_cache_hits_total " + std::to_string(hits_) + "\n",
          "text/plain; version=0.0.4");
    });
    auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
    server_.Post("/v1/completions", handler);
    server_.Post("/v1/chat/completions", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Counters as if the server had served other traffic before.
    queries_ = 1000;
    hits_ = 100;
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() const { return max_in_flight_.load(); }
  int num_posts() const { return num_posts_.load(); }
  json last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }

 private:
  void Enter() {
    const int now = in_flight_.fetch_add(1) + 1;
    int m = max_in_flight_.load();
    while (now > m && !max_in_flight_.compare_exchange_weak(m, now)) {
    }
  }

  void Handle(const httplib::Request& req, httplib::Response& res) {
    ++num_posts_;
    Enter();
    if (!o_.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + o_.api_key) {
      --in_flight_;
      res.status = 401;
      res.set_content(R"({"error":{"message":"bad api key","type":"auth"}})", "application/json");
      return;
    }
    json body = json::parse(req.body, nullptr, false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = body;
    }
    const bool chat = req.path.find("chat") != std::string::npos;
    std::string prompt_text;
    int64_t prompt_len = 0;
    if (chat) {
      prompt_text = body["messages"][0]["content"].get<std::string>();
      prompt_len = static_cast<int64_t>(std::count(prompt_text.begin(), prompt_text.end(), ' ') + 1);
    } else if (body["prompt"].is_string()) {
      prompt_text = body["prompt"].get<std::string>();
      prompt_len = static_cast<int64_t>(std::count(prompt_text.begin(), prompt_text.end(), ' ') + 1);
    } else {
      prompt_len = static_cast<int64_t>(body["prompt"].size());
    }
    if (prompt_text == "fail-500" || prompt_text == "fail-400") {
      --in_flight_;
      res.status = prompt_text == "fail-500" ? 500 : 400;
      res.set_content(R"({"error":{"message":"fake failure )" + prompt_text + R"(","type":"x"}})",
                      "application/json");
      return;
    }
    const int64_t max_tokens = body["max_tokens"].get<int64_t>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queries_ += prompt_len;
      hits_ += prompt_len / 2;
    }
    auto step = std::make_shared<int64_t>(0);
    res.set_chunked_content_provider(
        "text/event-stream", [this, step, max_tokens, prompt_len, chat](size_t, httplib::DataSink& sink) {
          std::this_thread::sleep_for(std::chrono::milliseconds(o_.chunk_delay_ms));
          std::string out;
          if (*step < max_tokens) {
            json c = chat ? json{{"choices", {{{"index", 0}, {"delta", {{"content", "x"}}}}}}}
                          : json{{"choices", {{{"index", 0}, {"text", "x"}}}}};
            out = "data: " + c.dump() + "\n\n";
            ++*step;
            sink.write(out.data(), out.size());
            return true;
          }
          if (o_.with_usage) {
            json u = {{"choices", json::array()},
                      {"usage",
                       {{"prompt_tokens", prompt_len},
                        {"completion_tokens", max_tokens},
                        {"total_tokens", prompt_len + max_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", prompt_len / 2}}}}}};
            out += "data: " + u.dump() + "\n\n";
          }
          out += "data: [DONE]\n\n";
          sink.write(out.data(), out.size());
          --in_flight_;  // before the client can see the end
          sink.done();
          return true;
        });
  }

  FakeServerOptions o_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::atomic<int> num_posts_{0};
  std::mutex mu_;
  int64_t queries_ = 0;  // guarded by mu_
  int64_t hits_ = 0;     // guarded by mu_
  json last_body_;       // guarded by mu_
};

std::vector<BenchRequest> RandomRequests(int64_t n, int64_t input_len, int64_t output_len) {
  DatasetOptions d;
  d.num_prompts = n;
  d.random_input_len = input_len;
  d.random_output_len = output_len;
  return *BuildDataset(d);
}

TEST(BenchServe, CountsEverythingAndRespectsMaxConcurrency) {
  FakeServerOptions fo;
  fo.api_key = "sk-test";
  FakeServer server(fo);
  BenchmarkOptions o;
  o.client.base_url = server.url();
  o.client.api_key = "sk-test";
  o.max_concurrency = 3;
  o.dataset_name = "random";
  const std::vector<BenchRequest> reqs = RandomRequests(20, 16, 5);
  std::vector<std::pair<int64_t, int64_t>> progress;
  auto r = RunBenchmark(o, reqs, [&](int64_t done, int64_t total, double) { progress.emplace_back(done, total); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "fake-model");
  EXPECT_LE(server.max_in_flight(), 3);
  EXPECT_GE(server.max_in_flight(), 1);
  EXPECT_LE(r->peak_concurrent_requests, 3);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>(20, 20)));

  BenchmarkSummary s = Summarize(*r);
  EXPECT_EQ(s.num_successful, 20);
  EXPECT_EQ(s.num_failed, 0);
  EXPECT_EQ(s.total_input_tokens, 20 * 16);
  EXPECT_EQ(s.total_output_tokens, 20 * 5);
  EXPECT_EQ(s.itl.count, 20 * 4);
  EXPECT_EQ(s.tpot.count, 20);
  EXPECT_GT(s.ttft.mean_ms, 0.0);
  EXPECT_GE(s.e2e.mean_ms, s.ttft.mean_ms);
  EXPECT_GT(s.duration_s, 0.0);
  EXPECT_LT(s.duration_s, 60.0);
  for (const RequestResult& q : r->requests) {
    EXPECT_TRUE(q.success) << q.error;
    EXPECT_EQ(q.http_status, 200);
    EXPECT_TRUE(q.usage_reported);
    EXPECT_TRUE(q.done_received);
    EXPECT_EQ(q.num_content_chunks, 5);
    EXPECT_EQ(q.cached_tokens, 8);
    EXPECT_GE(q.send_ms, q.scheduled_ms - 1.0);
  }
  // Prefix cache: server counters went up by 320 queried and 160 hit tokens.
  const PrefixCacheReport& pc = r->prefix_cache;
  ASSERT_TRUE(pc.server_available) << pc.server_unavailable_reason;
  EXPECT_EQ(pc.server_metric_prefix, "kvserve:");
  EXPECT_DOUBLE_EQ(pc.delta_queries_tokens, 320.0);
  EXPECT_DOUBLE_EQ(pc.delta_hits_tokens, 160.0);
  EXPECT_DOUBLE_EQ(*pc.server_hit_rate(), 0.5);
  EXPECT_DOUBLE_EQ(*pc.usage_cached_fraction(), 0.5);

  // What went on the wire.
  json body = server.last_body();
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_TRUE(body["prompt"].is_array());
  EXPECT_EQ(body["prompt"].size(), 16u);

  const std::string table = FormatSummaryTable(*r, s);
  EXPECT_NE(table.find("50.00 %"), std::string::npos) << table;
  json j = ResultToJson(*r, s);
  EXPECT_EQ(j["completed"], 20);
  EXPECT_EQ(j["output_lens"].size(), 20u);
  EXPECT_EQ(j["itls_ms"][0].size(), 4u);
}

TEST(BenchServe, HttpErrorsAreFailedRequests) {
  FakeServer server(FakeServerOptions{});
  std::vector<BenchRequest> reqs = RandomRequests(6, 8, 3);
  reqs[1].prompt_token_ids.clear();
  reqs[1].prompt_text = "fail-500";
  reqs[4].prompt_token_ids.clear();
  reqs[4].prompt_text = "fail-400";
  BenchmarkOptions o;
  o.client.base_url = server.url();
  o.body.model = "fake-model";
  auto r = RunBenchmark(o, reqs, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  BenchmarkSummary s = Summarize(*r);
  EXPECT_EQ(s.num_successful, 4);
  EXPECT_EQ(s.num_failed, 2);
  EXPECT_EQ(s.total_output_tokens, 12);
  EXPECT_EQ(r->requests[1].http_status, 500);
  EXPECT_FALSE(r->requests[1].success);
  EXPECT_NE(r->requests[1].error.find("fake failure fail-500"), std::string::npos) << r->requests[1].error;
  EXPECT_EQ(r->requests[4].http_status, 400);
  EXPECT_NE(r->requests[4].error.find("HTTP 400"), std::string::npos);
  EXPECT_EQ(s.errors.size(), 2u);
  EXPECT_NE(FormatSummaryTable(*r, s).find("Failed requests:                         2"), std::string::npos);
}

TEST(BenchServe, WrongApiKeyFailsEveryRequest) {
  FakeServerOptions fo;
  fo.api_key = "right";
  FakeServer server(fo);
  BenchmarkOptions o;
  o.client.base_url = server.url();
  o.client.api_key = "wrong";
  o.body.model = "m";
  auto r = RunBenchmark(o, RandomRequests(3, 4, 2), nullptr);
  ASSERT_TRUE(r.ok());
  for (const RequestResult& q : r->requests) {
    EXPECT_EQ(q.http_status, 401);
    EXPECT_NE(q.error.find("bad api key"), std::string::npos);
  }
}

TEST(BenchServe, NoUsageNoMetricsChatAndPoisson) {
  FakeServerOptions fo;
  fo.with_usage = false;
  fo.with_metrics = false;
  fo.chunk_delay_ms = 0;
  FakeServer server(fo);
  DatasetOptions d;
  d.num_prompts = 10;
  d.random_input_len = 6;
  d.random_output_len = 4;
  d.prompt_format = PromptFormat::kText;
  auto reqs = BuildDataset(d);
  ASSERT_TRUE(reqs.ok());
  BenchmarkOptions o;
  o.client.base_url = server.url() + "/";  // a trailing slash is fine
  o.body.endpoint = "/v1/chat/completions";
  o.arrivals.request_rate_per_s = 200.0;
  auto r = RunBenchmark(o, *reqs, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  BenchmarkSummary s = Summarize(*r);
  EXPECT_EQ(s.num_successful, 10);
  EXPECT_EQ(s.total_output_tokens, 40);  // counted from the chunks
  EXPECT_EQ(s.total_input_tokens, 60);   // the dataset's lengths
  EXPECT_FALSE(r->prefix_cache.server_available);
  EXPECT_NE(r->prefix_cache.server_unavailable_reason.find("404"), std::string::npos)
      << r->prefix_cache.server_unavailable_reason;
  EXPECT_FALSE(r->prefix_cache.usage_cached_fraction().has_value());
  EXPECT_NE(FormatSummaryTable(*r, s).find("unavailable"), std::string::npos);
  json body = server.last_body();
  EXPECT_TRUE(body["messages"].is_array());
  EXPECT_FALSE(body.contains("prompt"));
  // Poisson schedule: increasing planned times, sends not before them.
  for (size_t i = 1; i < r->requests.size(); ++i) {
    EXPECT_GE(r->requests[i].scheduled_ms, r->requests[i - 1].scheduled_ms);
    EXPECT_GE(r->requests[i].send_ms, r->requests[i].scheduled_ms - 1.0);
  }
}

TEST(BenchServe, UnreachableServer) {
  int port = 0;
  {
    FakeServer gone(FakeServerOptions{});
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  BenchmarkOptions o;
  o.client.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.client.connect_timeout_s = 2;
  // Without --model the model lookup fails first.
  auto no_model = RunBenchmark(o, RandomRequests(2, 4, 2), nullptr);
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("--model"), std::string::npos) << no_model.status().message();
  o.body.model = "m";
  auto r = RunBenchmark(o, RandomRequests(2, 4, 2), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const RequestResult& q : r->requests) {
    EXPECT_FALSE(q.success);
    EXPECT_EQ(q.http_status, 0);
    EXPECT_NE(q.error.find("connection error"), std::string::npos) << q.error;
  }
  EXPECT_FALSE(r->prefix_cache.server_available);
  o.client.base_url = "ftp://x";
  EXPECT_EQ(RunBenchmark(o, RandomRequests(1, 4, 2), nullptr).status().code(), StatusCode::kInvalidArgument);
  o.client.base_url = "http://127.0.0.1:1";
  o.body.extra_body_json = "[1]";
  EXPECT_EQ(RunBenchmark(o, RandomRequests(1, 4, 2), nullptr).status().code(), StatusCode::kInvalidArgument);
}

// A server that answers the first request of each connection with a streamed completion and
// keeps the connection open, then closes it when the second request arrives, without a byte of
// response: what a keep-alive limit (llama-server's httplib, 5 requests) looks like to a client
// that sends at once. The client sends that request again on a new connection.
class OneRequestPerConnectionServer {
 public:
  OneRequestPerConnectionServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneRequestPerConnectionServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }
  int posts() const { return posts_.load(); }

 private:
  // Reads one request (headers and Content-Length body); false at end of stream.
  static bool ReadRequest(int fd) {
    std::string in;
    char buf[4096];
    size_t header_end = std::string::npos;
    while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
    }
    std::string lower = in.substr(0, header_end);
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    const size_t cl = lower.find("content-length:");
    const size_t body_bytes = cl == std::string::npos ? 0 : std::stoul(lower.substr(cl + 15));
    while (in.size() < header_end + 4 + body_bytes) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void Serve() {
    for (;;) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      ++connections_;
      if (ReadRequest(fd)) {
        ++posts_;
        const std::string events =
            "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\n"
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n"
            "data: [DONE]\n\n";
        char size[32];
        std::snprintf(size, sizeof(size), "%zx\r\n", events.size());
        const std::string reply = std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                              "Transfer-Encoding: chunked\r\n\r\n") +
                                  size + events + "\r\n0\r\n\r\n";
        EXPECT_EQ(write(fd, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
        if (ReadRequest(fd)) ++posts_;  // the second request: closed unanswered
      }
      close(fd);
    }
  }
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> connections_{0};
  std::atomic<int> posts_{0};
};

TEST(BenchServe, RetriesOnceOnAKeepAliveConnectionTheServerClosed) {
  OneRequestPerConnectionServer server;
  BenchmarkOptions o;
  o.client.base_url = server.url();
  o.body.model = "m";
  o.max_concurrency = 1;
  o.scrape_metrics = false;
  auto r = RunBenchmark(o, RandomRequests(4, 4, 1), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const RequestResult& q : r->requests) EXPECT_TRUE(q.success) << q.error;
  // Each request after the first met a closed connection once, then a new one.
  EXPECT_EQ(server.connections(), 4);
  EXPECT_EQ(server.posts(), 4 + 3);
}

TEST(RequestBody, ExtraBodyWinsAndIgnoreEosFollowsTheDataset) {
  BenchRequest q;
  q.prompt_token_ids = {5, 6};
  q.output_len = 3;
  q.fixed_output_len = false;
  RequestBodyOptions o;
  o.model = "m";
  o.extra_body_json = R"({"temperature": 0.7, "top_p": 0.9})";
  auto b = BuildRequestBody(q, o);
  ASSERT_TRUE(b.ok());
  json j = json::parse(*b);
  EXPECT_EQ(j["temperature"], 0.7);
  EXPECT_EQ(j["top_p"], 0.9);
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_EQ(j["prompt"], json::array({5, 6}));
  q.fixed_output_len = true;
  o.allow_ignore_eos = false;
  EXPECT_FALSE(json::parse(*BuildRequestBody(q, o)).contains("ignore_eos"));
}

TEST(ProgressBar, NonTtyPrintsAboutEveryTenPercent) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(f, /*is_tty=*/false);
    for (int i = 0; i <= 100; ++i) bar.Update(i, 100, i * 0.1);
    bar.Finish();
  }
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 11);
  EXPECT_NE(out.find("100/100 requests (100%)"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvserve::loadgen
