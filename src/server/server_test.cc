// OpenAiServer against a real engine on the synthetic "tiny" model, over HTTP on 127.0.0.1:
// completions and chat (streaming and not), n > 1, stop strings, logprobs, usage with cached
// tokens and evicted KV tokens, and the error cases (400). The routes, authentication,
// disconnects, overload, /metrics and shutdown are in server_lifecycle_test.cc.
#include "server/server_test_fixture.h"

namespace kvserve {
namespace {

// A request's kv_policy runs StreamingLLM or H2O: usage reports what was evicted, /metrics
// counts it by method; a bad field is a 400 naming it.
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
  // H2O over HTTP too (the kernels' attention mass); /metrics counts both by method.
  auto h2o = Post("/v1/completions", {{"prompt", "Hello there"},
                                      {"max_tokens", 40},
                                      {"ignore_eos", true},
                                      {"kv_policy", {{"method", "h2o"}, {"budget_tokens", 16}}}});
  ASSERT_TRUE(h2o);
  ASSERT_EQ(h2o->status, 200) << h2o->body;
  EXPECT_GT(Json::parse(h2o->body)["usage"]["kv_tokens_evicted"].get<int64_t>(), 0);
  const std::string metrics = server_->RenderMetrics();
  EXPECT_NE(metrics.find("kvserve:kv_tokens_evicted_total{method=\"streaming\"} " +
                         std::to_string(evicted)), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvserve:kv_tokens_evicted_total{method=\"h2o\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kvserve:request_kv_kept_fraction_count 2"), std::string::npos);
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
  // POST /reset_prefix_cache (vLLM's) empties it: the same request then hits nothing.
  body.erase("cache_salt");
  auto reset = Post("/reset_prefix_cache", Json::object());
  ASSERT_EQ(reset->status, 200) << reset->body;
  auto after = Post("/v1/completions", body);
  EXPECT_EQ(Json::parse(after->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto again = Post("/v1/completions", body);
  EXPECT_EQ(Json::parse(again->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
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
  // Nested deeper than kMaxJsonNestingDepth, in a field nobody reads: refused before parsing.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    auto nested = client_->Post(path, R"({"prompt": "x", "junk": )" + deep + "}", "application/json");
    ASSERT_TRUE(nested) << path;
    EXPECT_EQ(nested->status, 400) << path;
    EXPECT_NE(nested->body.find("levels deep"), std::string::npos) << nested->body;
  }
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

TEST(OpenAiApiTest, JsonNestingDepthSkipsStringsAndStopsPastTheLimit) {
  EXPECT_EQ(openai::JsonNestingDepth("{}", 10), 1);
  EXPECT_EQ(openai::JsonNestingDepth(R"({"a": [1, {"b": []}], "c": {}})", 10), 4);
  EXPECT_EQ(openai::JsonNestingDepth(R"({"a": "[[[[{{{{", "b": "\"[[["})", 10), 1);
  EXPECT_EQ(openai::JsonNestingDepth(std::string(1000, '['), 10), 11);
  const std::string at_limit = std::string(127, '[') + std::string(127, ']');  // 128 levels
  EXPECT_TRUE(openai::ParseJsonObject(R"({"x": )" + at_limit + "}").ok());
  const std::string over = std::string(128, '[') + std::string(128, ']');
  EXPECT_FALSE(openai::ParseJsonObject(R"({"x": )" + over + "}").ok());  // 129 with the object
  EXPECT_FALSE(openai::ParseJsonObject("[1]").ok());
  EXPECT_FALSE(openai::ParseJsonObject("{").ok());
}

TEST(OpenAiApiTest, ChatMessagesAndToolsAreKeptAsSentInTheirKeyOrder) {
  Json body = Json::parse(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}]})");
  openai::ParamError err;
  auto req = openai::ParseChatRequest(body, &err);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  // As sent: the chat template's renderer normalises content and arguments for its template
  // (ModelChatTemplates::Render).
  EXPECT_EQ(req->messages, body["messages"]);
  EXPECT_EQ(req->tool_choice, openai::ToolChoice::kAuto);  // the default with tools
  EXPECT_EQ(req->tools[0]["function"]["parameters"].dump(), R"({"b":1,"a":2})");
}

}  // namespace
}  // namespace kvserve
