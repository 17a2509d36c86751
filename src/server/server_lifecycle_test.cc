// OpenAiServer over HTTP on 127.0.0.1: API keys, /v1/models, /tokenize, /detokenize,
// /health, a client that disconnects mid-stream, a full queue (503), /metrics (checked by
// promtool when installed; the prompt-divergence histogram per namespace and its bounded label
// set), bursts of connections, and Shutdown() draining in-flight requests.
#include "server/server_test_fixture.h"

namespace kvserve {
namespace {

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
  // The scheme is case-insensitive (RFC 7235); the key is not.
  for (const char* auth : {"bearer sk-test", "BEARER sk-test"}) {
    auto r = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}},
                  {{"Authorization", auth}});
    EXPECT_EQ(r->status, 200) << auth;
  }
  for (const char* auth : {"Bearer SK-TEST", "Bearer sk-tes", "Basic sk-test", "Bearer"}) {
    auto r = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}},
                  {{"Authorization", auth}});
    EXPECT_EQ(r->status, 401) << auth;
  }
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

TEST_F(ServerTest, ClientThatLeavesBeforeAGatheredAnswerIsAborted) {
  Start();
  {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(0, 300 * 1000);  // gives up (and closes) after 0.3 s
    auto r = cli.Post("/v1/completions",
                      Json{{"prompt", Prompt(40)}, {"max_tokens", 2000}, {"ignore_eos", true}}.dump(),
                      "application/json");
    EXPECT_FALSE(r);
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->num_in_flight() == 0; },
                        "the server to abort the request of the client that left"));
  ExpectAllBlocksBack();
  EXPECT_LT(engine_->stats().num_generated_tokens_total, 2000);
  EXPECT_NE(server_->RenderMetrics().find("kvserve:http_errors_total{status=\"499\"} 1"),
            std::string::npos);
}

TEST_F(ServerTest, KeepAliveRequestsAndAChunkedBodyPastTheLimit) {
  ServerConfig c;
  c.max_body_bytes = 1 << 20;
  Start(c);
  // One client, one connection, many requests (the OpenAI SDKs' pattern).
  for (int i = 0; i < 20; ++i) {
    auto r = Post("/v1/completions", {{"prompt", Prompt(4, static_cast<uint64_t>(i))}, {"max_tokens", 1}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  // A chunked body past the body limit is refused while it is being read.
  httplib::Client cli("127.0.0.1", server_->port());
  size_t sent = 0;
  auto big = cli.Post(
      "/v1/completions",
      [&](size_t, httplib::DataSink& sink) {
        static const std::string chunk(64 << 10, ' ');
        if (sent >= (4u << 20) || !sink.write(chunk.data(), chunk.size())) {
          sink.done();
          return true;
        }
        sent += chunk.size();
        return true;
      },
      "application/json");
  // The server reads and drops what the client goes on sending for a moment (so that the
  // client can read the 413 before the close), never keeping it.
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 413);
  auto ok = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(ServerTest, FullQueueGets503) {
  ServerConfig c;
  c.max_num_seqs = 1;
  c.max_queue_len = 1;
  Start(c);
  // n = 3 can never fit (1 running + 1 queued): a 400 saying why, not "retry later".
  auto never = Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"n", 3}});
  ASSERT_TRUE(never);
  EXPECT_EQ(never->status, 400) << never->body;
  EXPECT_NE(never->body.find("--max-num-seqs + --max-queue-len"), std::string::npos)
      << never->body;
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
        "kvserve:kv_cache_bytes_per_token ", "kvserve:kv_cache_layout_info{layout=\"separate_kv\"",
        "kvserve:simd_level_info{level=\"",
        ",f16_as_bf16=\"0\"} 1",
        "kvserve:prefix_cache_queries_total 100", "kvserve:prefix_cache_hits_total 48",
        "kvserve:prefix_cache_hit_rate 0.48", "kvserve:prefix_cache_miss_tokens_total{reason=",
        "kvserve:prefix_cache_evicted_blocks_total 0", "kvserve:num_preemptions_total 0",
        "kvserve:prompt_tokens_total 100", "kvserve:generation_tokens_total 8",
        "kvserve:request_success_total{finished_reason=\"length\"} 2",
        "kvserve:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2",
        "kvserve:inter_token_latency_seconds_count 6", "kvserve:e2e_request_latency_seconds_count 2",
        "kvserve:request_queue_time_seconds_count 2", "kvserve:kv_cache_scale_info{",
        "kvserve:kv_cache_clipped_values_total 0", "kvserve:http_errors_total{status=\"400\"} 1",
        "kvserve:prompt_divergence_tokens_count{namespace=\"default\"} 2"}) {
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

TEST_F(ServerTest, PromptDivergenceIsCountedPerNamespaceAtAdmission) {
  Start();
  // The same 50-token prompt twice (the second diverges from the cache at 48 tokens: three
  // 16-token blocks, never the last token), then under a cache salt (nothing cached there).
  Json body = {{"prompt", Prompt(50)}, {"max_tokens", 2}, {"ignore_eos", true}};
  ASSERT_EQ(Post("/v1/completions", body)->status, 200);
  ASSERT_EQ(Post("/v1/completions", body)->status, 200);
  body["cache_salt"] = "tenant-a";
  ASSERT_EQ(Post("/v1/completions", body)->status, 200);
  WaitUntilIdle();
  const std::string text = client_->Get("/metrics")->body;
  const std::string salt = PromptNamespaceLabel("tenant-a");
  EXPECT_EQ(salt.rfind("salt-", 0), 0u);
  EXPECT_EQ(salt.size(), 13u);
  EXPECT_EQ(text.find("tenant-a"), std::string::npos);  // the salt itself is never shown
  for (const std::string& line :
       {std::string("# TYPE kvserve:prompt_divergence_tokens histogram"),
        std::string("kvserve:prompt_divergence_tokens_bucket{namespace=\"default\",le=\"0\"} 1\n"),
        std::string("kvserve:prompt_divergence_tokens_bucket{namespace=\"default\",le=\"32\"} 1\n"),
        std::string("kvserve:prompt_divergence_tokens_bucket{namespace=\"default\",le=\"64\"} 2\n"),
        std::string("kvserve:prompt_divergence_tokens_bucket{namespace=\"default\",le=\"+Inf\"} 2\n"),
        std::string("kvserve:prompt_divergence_tokens_sum{namespace=\"default\"} 48\n"),
        std::string("kvserve:prompt_divergence_tokens_count{namespace=\"default\"} 2\n"),
        "kvserve:prompt_divergence_tokens_bucket{namespace=\"" + salt + "\",le=\"0\"} 1\n",
        "kvserve:prompt_divergence_tokens_count{namespace=\"" + salt + "\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

TEST(LabeledHistogramTest, DistinctValuesAreBoundedAndTheRestFoldIntoOther) {
  LabeledHistogram h("namespace", {0, 16}, /*max_values=*/2);
  h.observe("a", 0);
  h.observe("b", 16);
  h.observe("c", 32);  // a third value: "other"
  h.observe("d", 0);
  h.observe("a", 16);
  const std::map<std::string, int64_t> counts = h.counts();
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"a", 2}, {"b", 1}, {"other", 2}}));
  PrometheusWriter w("kvserve:");
  w.family("x", "histogram", "help");
  h.write(&w, "x");
  EXPECT_NE(w.text().find("kvserve:x_bucket{namespace=\"other\",le=\"0\"} 1\n"), std::string::npos)
      << w.text();
  EXPECT_NE(w.text().find("kvserve:x_bucket{namespace=\"other\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(w.text().find("kvserve:x_sum{namespace=\"a\"} 16\n"), std::string::npos);
  EXPECT_EQ(PromptNamespaceLabel(""), "default");
  EXPECT_EQ(PromptNamespaceLabel("t"), PromptNamespaceLabel("t"));
  EXPECT_NE(PromptNamespaceLabel("t"), PromptNamespaceLabel("u"));
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
  so.http.port = server_->port();
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
