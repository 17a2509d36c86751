// `kvserve bench serve` as a user runs it: the built binary against a tiny streaming server.
#include <httplib.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace kvserve::cli {
namespace {

using testing::ReadFile;
using testing::RunKv;
using testing::TempDir;

// Answers /v1/models and streams max_tokens chunks with usage on /v1/completions; no /metrics
// (as llama.cpp without --metrics).
class TinyServer {
 public:
  TinyServer() {
    server_.new_task_queue = [] { return new httplib::ThreadPool(16); };
    server_.set_keep_alive_timeout(1);
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"data":[{"id":"tiny"}]})", "application/json");
    });
    server_.Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      const nlohmann::json body = nlohmann::json::parse(req.body);
      const int64_t n = body["max_tokens"].get<int64_t>();
      const int64_t prompt = body["prompt"].is_array() ? static_cast<int64_t>(body["prompt"].size()) : 1;
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n";
      out += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(prompt) +
             ",\"completion_tokens\":" + std::to_string(n) + "}}\n\ndata: [DONE]\n\n";
      res.set_content(out, "text/event-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TinyServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(BenchServeCli, HelpListsTheFlags) {
  auto r = RunKv({"bench", "serve", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--base-url", "--dataset-name", "--request-rate", "--max-concurrency",
                           "--sp-system-prompt-len", "--tokens-per-hash-id", "--result-file"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(BenchServeCli, RunsAndWritesTheResultFile) {
  TinyServer server;
  TempDir tmp;
  const std::string result = tmp.file("result.json");
  auto r = RunKv({"bench", "serve", "--base-url", server.url(), "--num-prompts", "12",
                  "--random-input-len", "10", "--random-output-len", "3", "--max-concurrency", "2",
                  "--result-file", result});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Successful requests:                     12"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total generated tokens:                  36"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unavailable"), std::string::npos) << r.out;  // no /metrics
  EXPECT_NE(r.err.find("12/12 requests"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(result));
  EXPECT_EQ(j["completed"], 12);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["max_concurrency"], 2);
  EXPECT_EQ(j["total_input_tokens"], 120);
  EXPECT_EQ(j["dataset"]["name"], "random");
  EXPECT_EQ(j["ttfts_ms"].size(), 12u);
}

TEST(BenchServeCli, UserErrors) {
  auto rate = RunKv({"bench", "serve", "--request-rate", "0", "--model", "m", "--num-prompts", "1"});
  EXPECT_EQ(rate.exit_code, 1);
  EXPECT_NE(rate.err.find("--request-rate"), std::string::npos) << rate.err;
  auto path = RunKv({"bench", "serve", "--dataset-name", "sharegpt"});
  EXPECT_EQ(path.exit_code, 1);
  EXPECT_NE(path.err.find("--dataset-path"), std::string::npos) << path.err;
  auto chat = RunKv({"bench", "serve", "--endpoint", "/v1/chat/completions", "--prompt-format", "token-ids"});
  EXPECT_EQ(chat.exit_code, 1);
  auto unknown = RunKv({"bench", "serve", "--dataset-name", "nope"});
  EXPECT_EQ(unknown.exit_code, 2);
  // Nothing listens there: every request fails, exit status 1.
  std::string url;
  {
    TinyServer gone;
    url = gone.url();
  }
  auto down = RunKv({"bench", "serve", "--base-url", url, "--model", "m", "--num-prompts", "2",
                     "--random-input-len", "4", "--random-output-len", "2", "--no-progress"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("connection error"), std::string::npos) << down.err;
}

}  // namespace
}  // namespace kvserve::cli
