// OpenAiServer against a real engine on the synthetic "tiny" model, over HTTP on 127.0.0.1:
// completions and chat (streaming and not), n > 1, stop strings, logprobs, usage with cached
// tokens, /tokenize, /detokenize, /v1/models, /health, the error cases (400, 401, 404, 503),
// a client that disconnects mid-stream, /metrics (checked by promtool when installed) and
// Shutdown() draining in-flight requests.
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
};

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServerConfig c = {}) {
    Model& m = GetModel();
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
    ServerOptions so;
    so.port = 0;
    so.served_model_name = "tiny-test";
    so.api_key = c.api_key;
    so.max_queue_len = c.max_queue_len;
    so.shutdown_timeout_s = c.shutdown_timeout_s;
    so.render_chat = RenderChatMl;
    so.kv.dtype = "f32";
    so.kv.block_size = 16;
    so.kv.num_blocks = c.num_blocks;
    so.kv.bytes_per_token = cache_.spec.bytes_per_token();
    server_ = std::make_unique<OpenAiServer>(so, engine_.get(), m.tokenizer.get());
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      thread_.join();
      ExpectAllBlocksBack();
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

// A request's kv_policy runs StreamingLLM: usage reports what was evicted; a bad field is a
// 400 naming it.
TEST_F(ServerTest, KvPolicyPerRequestAndKvTokensEvictedInUsage) {
  Start();
  auto r = Post("/v1/completions",
                {{"prompt", "Hello there"},
                 {"max_tokens", 60},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"kv_policy", {{"method", "streaming"}, {"budget_tokens", 16}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  const int64_t prompt_tokens = j["usage"]["prompt_tokens"];
  EXPECT_EQ(j["usage"]["completion_tokens"], 60);
  // The cache keeps 16 to 31 slots of the prompt + 59 computed output tokens.
  const int64_t evicted = j["usage"]["kv_tokens_evicted"];
  EXPECT_GE(evicted, prompt_tokens + 59 - 31);
  EXPECT_LE(evicted, prompt_tokens + 59 - 16);
  auto bad = Post("/v1/completions",
                  {{"prompt", "Hello"}, {"kv_policy", {{"method", "h2o"}, {"budget_tokens", -1}}},
                   {"max_tokens", 2}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["param"], "kv_policy.budget_tokens") << bad->body;
}

TEST_F(ServerTest, CompletionNonStreamingHasOpenAiShapeAndUsage) {
  Start();
  auto r = Post("/v1/completions", {{"model", "tiny-test"},
                                    {"prompt", "Hello there"},
                                    {"max_tokens", 5},
                                    {"temperature", 0},
                                    {"ignore_eos", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny-test");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  const int64_t prompt_tokens = j["usage"]["prompt_tokens"];
  EXPECT_GT(prompt_tokens, 0);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt_tokens + 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(j["usage"]["kv_tokens_evicted"], 0);
  // The same greedy request again gives the same text.
  auto again = Post("/v1/completions",
                    {{"prompt", "Hello there"}, {"max_tokens", 5}, {"temperature", 0},
                     {"ignore_eos", true}});
  ASSERT_EQ(again->status, 200);
  EXPECT_EQ(Json::parse(again->body)["choices"][0]["text"], j["choices"][0]["text"]);
}

TEST_F(ServerTest, SecondRequestWithSamePrefixReportsCachedTokens) {
  Start();
  Json body = {{"prompt", Prompt(70)}, {"max_tokens", 3}, {"temperature", 0}, {"ignore_eos", true}};
  auto first = Post("/v1/completions", body);
  ASSERT_EQ(first->status, 200);
  EXPECT_EQ(Json::parse(first->body)["usage"]["prompt_tokens"], 70);
  auto second = Post("/v1/completions", body);
  ASSERT_EQ(second->status, 200);
  Json j = Json::parse(second->body);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 64);  // 4 full blocks
  EXPECT_EQ(j["choices"][0]["text"], Json::parse(first->body)["choices"][0]["text"]);
  // A different cache_salt shares nothing.
  body["cache_salt"] = "tenant-b";
  auto salted = Post("/v1/completions", body);
  EXPECT_EQ(Json::parse(salted->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ServerTest, NChoicesStopStringsAndSeeds) {
  Start();
  auto r = Post("/v1/completions", {{"prompt", Prompt(12)},
                                    {"max_tokens", 8},
                                    {"n", 3},
                                    {"seed", 11},
                                    {"temperature", 1.0},
                                    {"ignore_eos", true}});
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);  // counted once per prompt
  // Same seed, same choices.
  auto r2 = Post("/v1/completions", {{"prompt", Prompt(12)},
                                     {"max_tokens", 8},
                                     {"n", 3},
                                     {"seed", 11},
                                     {"temperature", 1.0},
                                     {"ignore_eos", true}});
  EXPECT_EQ(Json::parse(r2->body)["choices"], j["choices"]);

  // A stop string taken from the greedy text ends the text before it.
  auto greedy = Post("/v1/completions",
                     {{"prompt", "abc"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}});
  const std::string text = Json::parse(greedy->body)["choices"][0]["text"];
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(3, 2);
  auto stopped = Post("/v1/completions", {{"prompt", "abc"},
                                          {"max_tokens", 24},
                                          {"temperature", 0},
                                          {"ignore_eos", true},
                                          {"stop", {stop}}});
  Json s = Json::parse(stopped->body);
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(s["choices"][0]["text"], text.substr(0, text.find(stop)));
}

TEST_F(ServerTest, LogprobsForCompletionsAndChat) {
  Start();
  auto r = Post("/v1/completions", {{"prompt", Prompt(9)},
                                    {"max_tokens", 4},
                                    {"temperature", 0},
                                    {"logprobs", 2},
                                    {"ignore_eos", true}});
  ASSERT_EQ(r->status, 200) << r->body;
  Json lp = Json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  ASSERT_EQ(lp["text_offset"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
  }
  auto c = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                         {"max_completion_tokens", 3},
                                         {"temperature", 0},
                                         {"logprobs", true},
                                         {"top_logprobs", 3},
                                         {"ignore_eos", true}});
  ASSERT_EQ(c->status, 200) << c->body;
  Json content = Json::parse(c->body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (const Json& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_TRUE(e["bytes"].is_array());
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
  }
}

TEST_F(ServerTest, StreamingCompletionAndChatChunks) {
  Start();
  auto r = Post("/v1/completions", {{"prompt", Prompt(10)},
                                    {"max_tokens", 6},
                                    {"temperature", 0},
                                    {"ignore_eos", true},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> data = SseData(r->body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  Json usage_chunk = Json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 6);
  std::string streamed;
  std::string finish;
  for (size_t i = 0; i + 2 < data.size(); ++i) {
    Json chunk = Json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    streamed += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "length");
  auto whole = Post("/v1/completions",
                    {{"prompt", Prompt(10)}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(streamed, Json::parse(whole->body)["choices"][0]["text"]);

  auto c = Post("/v1/chat/completions", {{"messages", {{{"role", "system"}, {"content", "be brief"}},
                                                       {{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 4},
                                         {"ignore_eos", true},
                                         {"stream", true}});
  ASSERT_EQ(c->status, 200);
  data = SseData(c->body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  Json first = Json::parse(data[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  Json last = Json::parse(data[data.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, BadRequestsGet400AndTheServerCarriesOn) {
  Start();
  struct Case {
    std::string path, body, param;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", ""},
      {"/v1/completions", "[1,2]", ""},
      {"/v1/completions", R"({"max_tokens": 3})", "prompt"},
      {"/v1/completions", R"({"prompt": ""})", "prompt"},
      {"/v1/completions", R"({"prompt": []})", "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", "n"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 50})", "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "stop": 5})", "stop"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", "stream"},
      {"/v1/completions", R"({"prompt": [1, -2]})", "prompt"},
      {"/v1/completions", R"({"prompt": [100000]})", "prompt"},
      {"/v1/completions", R"({"prompt": "x", "model": "gpt-9"})", "model"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 5000})", "prompt"},
      {"/v1/chat/completions", R"({"messages": []})", "messages"},
      {"/v1/chat/completions", R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 3}]})",
       "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "top_logprobs"},
  };
  for (const Case& c : cases) {
    auto r = client_->Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, 400) << c.body << " -> " << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << c.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], c.param) << c.body;
    }
  }
  // A prompt longer than the context.
  auto too_long = Post("/v1/completions", {{"prompt", Prompt(2048)}});
  EXPECT_EQ(too_long->status, 400);
  EXPECT_EQ(Json::parse(too_long->body)["error"]["code"], "context_length_exceeded");
  // chat_template_kwargs must be an object.
  auto refused = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                               {"chat_template_kwargs", 3}});
  EXPECT_EQ(refused->status, 400);
  auto unknown = client_->Get("/v1/nothing");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(Json::parse(unknown->body)["error"]["type"], "not_found_error");
  // Still serving.
  auto ok = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(ok->status, 200);
}

TEST(OpenAiApiTest, ChatToolCallArgumentsBecomeObjectsAndKeyOrderIsKept) {
  Json body = Json::parse(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}]})");
  openai::ParamError err;
  auto req = openai::ParseChatRequest(body, &err);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_EQ(req->messages[0]["content"], "ab");  // text parts joined
  const Json& args = req->messages[1]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.dump(), R"({"z":1,"a":2})");  // the client's key order
  EXPECT_EQ(req->tools[0]["function"]["parameters"].dump(), R"({"b":1,"a":2})");
}

TEST_F(ServerTest, ApiKeyIsRequiredOnApiRoutesOnly) {
  ServerConfig c;
  c.api_key = "sk-test";
  Start(c);
  auto missing = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}});
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(Json::parse(missing->body)["error"]["type"], "authentication_error");
  auto wrong = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}},
                    {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong->status, 401);
  auto right = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}},
                    {{"Authorization", "Bearer sk-test"}});
  EXPECT_EQ(right->status, 200);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/metrics")->status, 200);
}

TEST_F(ServerTest, ModelsTokenizeDetokenizeHealth) {
  Start();
  auto models = client_->Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  Json m = Json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny-test");
  EXPECT_EQ(m["data"][0]["max_model_len"], 2048);
  auto tok = Post("/tokenize", {{"prompt", "hello world"}});
  ASSERT_EQ(tok->status, 200);
  Json t = Json::parse(tok->body);
  EXPECT_EQ(t["count"], t["tokens"].size());
  auto detok = Post("/detokenize", {{"tokens", t["tokens"]}});
  ASSERT_EQ(detok->status, 200);
  EXPECT_NE(Json::parse(detok->body)["prompt"].get<std::string>().find("hello world"),
            std::string::npos);
  EXPECT_EQ(Post("/detokenize", {{"tokens", {99999}}})->status, 400);
  auto chat_tok = Post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_EQ(chat_tok->status, 200);
  EXPECT_GT(Json::parse(chat_tok->body)["count"].get<int64_t>(), 3);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(ServerTest, ClientDisconnectMidStreamAbortsAndReturnsBlocks) {
  Start();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = Json{{"prompt", Prompt(40)}, {"max_tokens", 2000}, {"ignore_eos", true},
                  {"stream", true}}
                 .dump();
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;  // hang up after a few chunks
  };
  auto r = client_->send(req);
  EXPECT_GE(chunks, 3);
  // The server notices at its next writes, aborts, and every block comes back.
  EXPECT_TRUE(WaitUntil([&] { return server_->num_in_flight() == 0; },
                        "the server to abort the disconnected stream"));
  ExpectAllBlocksBack();
  const std::string metrics = server_->RenderMetrics();
  EXPECT_NE(metrics.find("kvserve:request_success_total{finished_reason=\"abort\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_LT(engine_->stats().num_generated_tokens_total, 2000);
}

TEST_F(ServerTest, FullQueueGets503) {
  ServerConfig c;
  c.max_num_seqs = 1;
  c.max_queue_len = 1;
  Start(c);
  // Two long streams fill the running slot and the queue.
  std::atomic<bool> hang_up{false};
  auto long_stream = [&] {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(60, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = Json{{"prompt", Prompt(20)}, {"max_tokens", 2000}, {"ignore_eos", true},
                    {"stream", true}}
                   .dump();
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !hang_up.load(); };
    cli.send(req);
  };
  std::thread a(long_stream), b(long_stream);
  // On failure the test still hangs up and joins the streams (no early return).
  const ::testing::AssertionResult full = WaitUntil(
      [&] { return server_->num_in_flight() == 2; }, "two streams in flight", std::chrono::seconds(30));
  EXPECT_TRUE(full);
  if (full) {
    auto r = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}});
    EXPECT_TRUE(r);
    if (r) {
      EXPECT_EQ(r->status, 503);
      Json j = Json::parse(r->body);
      EXPECT_NE(j["error"]["message"].get<std::string>().find("--max-queue-len"),
                std::string::npos);
    }
    // n = 2 does not fit either, even alone... but /health and /metrics still answer.
    EXPECT_EQ(client_->Get("/health")->status, 200);
    EXPECT_EQ(client_->Get("/metrics")->status, 200);
  }
  hang_up = true;
  a.join();
  b.join();
}

TEST_F(ServerTest, MetricsExplainTheCacheAndPassPromtool) {
  Start();
  Json body = {{"prompt", Prompt(50)}, {"max_tokens", 4}, {"ignore_eos", true}};
  ASSERT_EQ(Post("/v1/completions", body)->status, 200);
  ASSERT_EQ(Post("/v1/completions", body)->status, 200);
  ASSERT_EQ(Post("/v1/completions", {{"prompt", "x"}, {"n", 0}})->status, 400);
  WaitUntilIdle();  // the engine publishes its stats after the step's outputs
  auto r = client_->Get("/metrics");
  ASSERT_EQ(r->status, 200);
  const std::string text = r->body;
  for (const char* name :
       {"kvserve:num_requests_running 0", "kvserve:num_requests_waiting 0",
        "kvserve:kv_cache_usage_perc 0", "kvserve:kv_cache_resident_perc",
        "kvserve:kv_cache_fragmentation_perc", "kvserve:kv_cache_capacity_tokens 8192",
        "kvserve:prefix_cache_queries_total 100", "kvserve:prefix_cache_hits_total 48",
        "kvserve:prefix_cache_hit_rate 0.48", "kvserve:prefix_cache_miss_tokens_total{reason=",
        "kvserve:prefix_cache_evicted_blocks_total 0", "kvserve:num_preemptions_total 0",
        "kvserve:prompt_tokens_total 100", "kvserve:generation_tokens_total 8",
        "kvserve:request_success_total{finished_reason=\"length\"} 2",
        "kvserve:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2",
        "kvserve:inter_token_latency_seconds_count 6", "kvserve:e2e_request_latency_seconds_count 2",
        "kvserve:request_queue_time_seconds_count 2", "kvserve:kv_cache_scale_info{",
        "kvserve:kv_cache_clipped_values_total 0", "kvserve:http_errors_total{status=\"400\"} 1"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  // promtool (Debian package `prometheus`) validates the exposition format. Exit status 3
  // with lint findings: the only one allowed is about the ':' in the names, which the
  // "kvserve:" prefix (vLLM's "vllm:" convention, which the issue asks for) implies.
  KVSERVE_SKIP_IF_ABSENT(std::system("command -v promtool >/dev/null 2>&1") == 0,
                         "promtool (Debian package prometheus): format not validated");
  const std::string path = ::testing::TempDir() + "/kvserve_metrics.txt";
  std::ofstream(path) << text;
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = pclose(p);
  const int exit_status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  EXPECT_TRUE(exit_status == 0 || exit_status == 3) << out;
  EXPECT_EQ(out.find("error while"), std::string::npos) << out;
  size_t pos = 0;
  int num_lines = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(pos, end - pos);
    if (!line.empty()) {
      ++num_lines;
      EXPECT_NE(line.find("metric names should not contain ':'"), std::string::npos) << line;
    }
    pos = end + 1;
  }
  EXPECT_GT(num_lines, 0);  // proves promtool read the document
}

TEST_F(ServerTest, BurstOfConnectionsIsServedAndPortInUseIsAnError) {
  ServerConfig c;
  c.max_queue_len = 128;  // admit them all
  Start(c);
  // 64 clients connect at once (cpp-httplib's own listen backlog of 5 made some of them see
  // resets; the server raises it).
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 64; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client cli("127.0.0.1", server_->port());
      cli.set_read_timeout(60, 0);
      auto r = cli.Post("/v1/completions",
                        Json{{"prompt", Prompt(8, static_cast<uint64_t>(i % 5))},
                             {"max_tokens", 2}}
                            .dump(),
                        "application/json");
      if (r && r->status == 200) ++ok;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 64);
  // A second server on the same port fails to bind instead of sharing it.
  ServerOptions so;
  so.port = server_->port();
  so.served_model_name = "other";
  OpenAiServer other(so, engine_.get(), GetModel().tokenizer.get());
  EXPECT_FALSE(other.Bind().ok());
}

TEST_F(ServerTest, ShutdownDrainsInFlightRequestsThenRefuses) {
  Start();
  std::atomic<int> status{0};
  std::string body;
  std::thread t([&] {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(60, 0);
    auto r = cli.Post("/v1/completions",
                      Json{{"prompt", Prompt(30)}, {"max_tokens", 200}, {"ignore_eos", true}}.dump(),
                      "application/json");
    if (r) {
      body = r->body;
      status = r->status;
    }
  });
  // On failure the test carries on: Shutdown() and the client's read timeout end it.
  EXPECT_TRUE(WaitUntil([&] { return server_->num_in_flight() > 0; }, "the request to be admitted"));
  server_->Shutdown();  // waits for the request to finish
  t.join();
  thread_.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_EQ(Json::parse(body)["usage"]["completion_tokens"], 200);
  ExpectAllBlocksBack();
  server_.reset();
}

TEST_F(ServerTest, ShutdownTimeoutAbortsWhatIsLeft) {
  ServerConfig c;
  c.shutdown_timeout_s = 0.0;
  Start(c);
  std::string body;
  std::thread t([&] {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(60, 0);
    // Eight choices of 2,000 tokens: far more work than a test thread that the OS deschedules
    // for a while after the first token could miss (one choice finished before Shutdown() on a
    // fast, loaded machine).
    auto r = cli.Post("/v1/completions",
                      Json{{"prompt", Prompt(30)}, {"max_tokens", 2000}, {"n", 8},
                           {"ignore_eos", true}}.dump(),
                      "application/json");
    if (r) body = r->body;
  });
  EXPECT_TRUE(WaitUntil([&] { return engine_->stats().num_generated_tokens_total > 0; },
                        "the first generated token"));
  server_->Shutdown();
  t.join();
  thread_.join();
  Json j = Json::parse(body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << body;
  ASSERT_EQ(j["choices"].size(), 8u) << body;
  for (const Json& choice : j["choices"]) EXPECT_EQ(choice["finish_reason"], "abort");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int64_t>(), 8 * 2000);
  ExpectAllBlocksBack();
  server_.reset();
}

}  // namespace
}  // namespace kvserve
