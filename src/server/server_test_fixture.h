// Tests: the ServerTest fixture, an OpenAiServer on a real engine over the synthetic "tiny"
// model, listening on 127.0.0.1 (server_test.cc, server_lifecycle_test.cc).
#pragma once

#include "server/server.h"

#include <httplib.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/testing/test_dependency.h"
#include "kv/kv_storage.h"
#include "model/synthetic.h"

namespace kvserve {
namespace {

using openai::Json;

struct Model {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Model& GetModel() {
  static Model* m = [] {
    auto* fx = new Model;
    SyntheticModelOptions o;
    o.preset = "tiny";
    o.seed = 7;
    auto loaded = MakeSyntheticModel(o);
    EXPECT_TRUE(loaded.ok());
    fx->tokenizer = std::move(Tokenizer::Create(*loaded->vocab)).value();
    fx->model = std::move(LlamaModel::Create(std::move(loaded).value())).value();
    return fx;
  }();
  return *m;
}

// A deliberately simple ChatML renderer: the server takes any renderer.
StatusOr<std::string> RenderChatMl(const openai::ChatRequest& req) {
  std::string out;
  for (const Json& m : req.messages) {
    if (m.value("role", "") == "bad") return InvalidArgumentError("template refused");
    out += "<|im_start|>" + m.value("role", "") + "\n" +
           (m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>()
                                                              : std::string()) +
           "<|im_end|>\n";
  }
  if (req.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// How long a test waits for the server or the engine to reach a state before it fails.
constexpr auto kWaitTimeout = std::chrono::seconds(60);

// Polls `done` every millisecond until it holds or `timeout` passes. The failure names what
// was awaited, so a broken server fails the test instead of hanging CI.
template <typename Pred>
::testing::AssertionResult WaitUntil(Pred done, const std::string& what,
                                     std::chrono::milliseconds timeout = kWaitTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return ::testing::AssertionFailure()
             << "timed out after " << timeout.count() << " ms waiting for " << what;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ::testing::AssertionSuccess();
}

struct ServerConfig {
  int64_t max_num_seqs = 8;
  int64_t max_queue_len = 16;
  int64_t num_blocks = 512;
  std::string api_key;
  double shutdown_timeout_s = 30.0;
  int64_t max_body_bytes = 32 << 20;
  ResponseCacheConfig response_cache;  // off unless a test sets a cache
  std::shared_ptr<const Embedder> embedder;  // /v1/embeddings (and semantic cache keys)
  bool embeddings_only = false;              // no engine: the embedder alone
};

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServerConfig c = {}) {
    Model& m = GetModel();
    ServerOptions so;
    so.http.port = 0;
    so.http.max_body_bytes = c.max_body_bytes;
    so.api_key = c.api_key;
    so.max_queue_len = c.max_queue_len;
    so.shutdown_timeout_s = c.shutdown_timeout_s;
    so.embedder = c.embedder;
    so.embedding_model_name = "embedder-test";
    so.response_cache = c.response_cache;
    if (c.embeddings_only) {
      server_ = std::make_unique<OpenAiServer>(so, nullptr, &c.embedder->tokenizer());
      Serve();
      return;
    }
    cache_.spec = m.model->kv_spec(DType::kF32, 16);
    cache_.max_model_len = 2048;
    cache_.storage = std::move(KvStorage::Create(cache_.spec, c.num_blocks)).value();
    EngineOptions eo;
    eo.check_invariants = true;
    eo.tokenizer = m.tokenizer.get();
    eo.scheduler.max_model_len = 2048;
    eo.scheduler.max_num_seqs = c.max_num_seqs;
    eo.scheduler.max_num_batched_tokens = 512;
    eo.scheduler.model_namespace = "tiny";
    engine_ = std::move(Engine::Create(eo, m.model.get(), &cache_, &pool_)).value();
    so.served_model_name = "tiny-test";
    so.render_chat = RenderChatMl;
    so.simd_level = "avx2";  // serve.cc fills these from kernels::SimdLevelName()
    so.cpu_simd_level = "avx512";
    so.kv.dtype = "f32";
    so.kv.block_size = 16;
    so.kv.num_blocks = c.num_blocks;
    so.kv.bytes_per_token = cache_.spec.bytes_per_token();
    server_ = std::make_unique<OpenAiServer>(so, engine_.get(), m.tokenizer.get());
    Serve();
  }
  void Serve() {
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      thread_.join();
      if (engine_ != nullptr) ExpectAllBlocksBack();
    }
  }
  // engine_->wait_until_idle() after polling the stats with a deadline, so that requests the
  // server never finishes fail the test instead of blocking it forever.
  EngineStats WaitUntilIdle() {
    const ::testing::AssertionResult idle = WaitUntil(
        [&] {
          const EngineStats st = engine_->stats();
          return st.num_running == 0 && st.num_waiting == 0;
        },
        "the engine to have no running or waiting request");
    EXPECT_TRUE(idle);
    return idle ? engine_->wait_until_idle() : engine_->stats();
  }
  void ExpectAllBlocksBack() {
    const EngineStats st = WaitUntilIdle();
    EXPECT_EQ(st.blocks_in_use, 0);
    EXPECT_EQ(st.num_sequences_in_cache, 0);
  }
  httplib::Result Post(const std::string& path, const Json& body,
                       const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body.dump(), "application/json");
  }
  // Data lines of an SSE body (without "data: "), in order.
  static std::vector<std::string> SseData(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find("\n\n", pos);
      if (end == std::string::npos) end = body.size();
      const std::string event = body.substr(pos, end - pos);
      if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
      pos = end + 2;
    }
    return out;
  }
  static Json Prompt(int64_t n, uint64_t salt = 0) {
    Json ids = Json::array();
    for (TokenId t : SyntheticTokenIds(n + static_cast<int64_t>(salt), 512)) ids.push_back(t);
    ids.erase(ids.begin(), ids.begin() + static_cast<int64_t>(salt));
    return ids;
  }

  ThreadPool pool_{1};
  PagedKvCache cache_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<OpenAiServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace
}  // namespace kvserve
