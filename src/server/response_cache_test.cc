// The response cache (tier 1) in the server: which requests share a scope and key (every scope
// rule: a different cache_salt, API key, system prompt, tools, response_format, temperature or
// n never hits; the same request twice does), the default and per-request modes,
// Cache-Control, and through HTTP: headers, bodies and streams of hits, what is stored, the
// lexical vetoes on semantic candidates, and /metrics.
#include "server/response_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "server/server_test_fixture.h"

namespace kvserve {
namespace {

using openai::Json;

GenerateRequest Parse(const Json& body, bool chat = true) {
  openai::ParamError err;
  auto r = ParseGenerateRequest(body.dump(), chat, &err);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : GenerateRequest{};
}

Json BaseChat() {
  return Json::parse(R"({"messages": [{"role": "system", "content": "You are a shop assistant."},
                                      {"role": "user", "content": "What is the refund window?"}],
                         "temperature": 0, "max_tokens": 8})");
}

ResponseCacheConfig ExactConfig() {
  ResponseCacheConfig c;
  c.cache = std::make_shared<semcache::SemanticCache>(semcache::SemanticCacheOptions{});
  return c;
}

ResponseCachePlan Plan(const Json& body, const ResponseCacheConfig& config,
                       std::string_view cache_control = "", std::string_view api_key = "") {
  return PlanResponseCache(Parse(body), config, cache_control, api_key, "m");
}

// Two plans address the same cache entry.
bool Same(const ResponseCachePlan& a, const ResponseCachePlan& b) {
  return a.scope == b.scope && a.key_text == b.key_text;
}

TEST(ResponseCachePlanTest, TheSameRequestTwiceSharesScopeAndKey) {
  const ResponseCacheConfig config = ExactConfig();
  const ResponseCachePlan a = Plan(BaseChat(), config);
  EXPECT_EQ(a.mode, ResponseCacheMode::kExact);
  EXPECT_TRUE(a.lookup && a.store);
  EXPECT_TRUE(Same(a, Plan(BaseChat(), config)));
  // The key is the conversation after the system prompt.
  EXPECT_EQ(a.key_text, "user: What is the refund window?\n");
  // Things that do not change the answer do not change the entry: streaming, usage chunks,
  // priority.
  Json streamed = BaseChat();
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  streamed["priority"] = 3;
  EXPECT_TRUE(Same(a, Plan(streamed, config)));
}

TEST(ResponseCachePlanTest, EveryScopeRuleSeparatesEntries) {
  const ResponseCacheConfig config = ExactConfig();
  const ResponseCachePlan base = Plan(BaseChat(), config);
  std::vector<std::pair<std::string, Json>> variants;
  auto with = [&](const std::string& what, const std::function<void(Json&)>& edit) {
    Json b = BaseChat();
    edit(b);
    variants.push_back({what, b});
  };
  with("cache_salt", [](Json& b) { b["cache_salt"] = "tenant-2"; });
  with("system prompt", [](Json& b) { b["messages"][0]["content"] = "You are a bank assistant."; });
  with("no system prompt", [](Json& b) { b["messages"].erase(0); });
  with("tools", [](Json& b) {
    b["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "refund"}}])");
    b["tool_choice"] = "none";
  });
  with("response_format", [](Json& b) { b["response_format"] = {{"type", "json_object"}}; });
  with("guided_regex", [](Json& b) { b["guided_regex"] = "[a-z]+"; });
  with("temperature", [](Json& b) { b["temperature"] = 0.5; b["seed"] = 1; });
  with("top_p", [](Json& b) { b["top_p"] = 0.5; });
  with("max_tokens", [](Json& b) { b["max_tokens"] = 9; });
  with("stop", [](Json& b) { b["stop"] = "."; });
  with("logprobs", [](Json& b) { b["logprobs"] = true; });
  with("chat_template_kwargs", [](Json& b) { b["chat_template_kwargs"] = {{"enable_thinking", false}}; });
  for (const auto& [what, body] : variants) {
    const ResponseCachePlan p = Plan(body, config);
    EXPECT_NE(p.mode, ResponseCacheMode::kOff) << what;
    EXPECT_FALSE(Same(base, p)) << what;
  }
  // The API key presented (when keys are on) and the served model are part of the scope.
  EXPECT_FALSE(Same(Plan(BaseChat(), config, "", "Bearer key-1"),
                    Plan(BaseChat(), config, "", "Bearer key-2")));
  EXPECT_FALSE(Same(base, PlanResponseCache(Parse(BaseChat()), config, "", "", "other-model")));
  // A different turn is a different key in the same scope.
  Json other = BaseChat();
  other["messages"][1]["content"] = "What is the exchange window?";
  const ResponseCachePlan p = Plan(other, config);
  EXPECT_TRUE(p.scope == base.scope);
  EXPECT_NE(p.key_text, base.key_text);
}

TEST(ResponseCachePlanTest, ModesAndCacheControl) {
  const ResponseCacheConfig config = ExactConfig();
  // By default only reproducible requests: temperature 0 or a seed, n == 1.
  Json sampled = BaseChat();
  sampled["temperature"] = 0.8;
  EXPECT_EQ(Plan(sampled, config).mode, ResponseCacheMode::kOff);
  sampled["seed"] = 5;
  EXPECT_EQ(Plan(sampled, config).mode, ResponseCacheMode::kExact);
  Json n2 = BaseChat();
  n2["n"] = 2;
  EXPECT_EQ(Plan(n2, config).mode, ResponseCacheMode::kOff);
  // Per request: "on" / "exact" opt in, "off" opts out.
  Json opt_in = BaseChat();
  opt_in["temperature"] = 0.8;
  opt_in["semantic_cache"] = {{"mode", "on"}, {"threshold", 0.5}};
  const ResponseCachePlan on = Plan(opt_in, config);
  EXPECT_EQ(on.mode, ResponseCacheMode::kExact);  // no embedding model: exact
  EXPECT_FLOAT_EQ(on.threshold, 0.5f);
  Json opt_out = BaseChat();
  opt_out["semantic_cache"] = {{"mode", "off"}};
  EXPECT_EQ(Plan(opt_out, config).mode, ResponseCacheMode::kOff);
  // Cache-Control.
  EXPECT_FALSE(Plan(BaseChat(), config, "no-cache").lookup);
  EXPECT_TRUE(Plan(BaseChat(), config, "no-cache").store);
  EXPECT_FALSE(Plan(BaseChat(), config, "max-age=0, no-store").store);
  // With an embedding model: semantic; the key is embedded only when asked (after an exact
  // miss), once; an embedding failure falls back to exact mode.
  ResponseCacheConfig semantic = ExactConfig();
  int calls = 0;
  semantic.embed = [&calls](std::string_view text) -> StatusOr<std::vector<float>> {
    ++calls;
    if (text.find("fail") != std::string_view::npos) return InternalError("no");
    return std::vector<float>{static_cast<float>(text.size()), 1.0f};
  };
  ResponseCachePlan s = Plan(BaseChat(), semantic);
  EXPECT_EQ(s.mode, ResponseCacheMode::kSemantic);
  EXPECT_TRUE(s.embedding.empty());
  EXPECT_EQ(calls, 0);
  EXPECT_FLOAT_EQ(s.threshold, 0.96f);
  EmbedCacheKey(semantic, &s);
  EmbedCacheKey(semantic, &s);
  EXPECT_EQ(s.embedding.size(), 2u);
  EXPECT_EQ(calls, 1);
  Json failing = BaseChat();
  failing["messages"][1]["content"] = "this will fail";
  ResponseCachePlan f = Plan(failing, semantic);
  EmbedCacheKey(semantic, &f);
  EXPECT_EQ(f.mode, ResponseCacheMode::kExact);
  EXPECT_TRUE(f.embedding.empty());
  // Off without a cache, and for several completions prompts.
  EXPECT_EQ(Plan(BaseChat(), ResponseCacheConfig{}).mode, ResponseCacheMode::kOff);
  EXPECT_EQ(PlanResponseCache(Parse(Json::parse(R"({"prompt": ["a", "b"], "temperature": 0})"), false),
                              config, "", "", "m").mode,
            ResponseCacheMode::kOff);
  // Bad fields are 400s.
  openai::ParamError err;
  EXPECT_FALSE(ParseGenerateRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "semantic_cache": {"mode": "sometimes"}})", true, &err).ok());
  EXPECT_EQ(err.param, "semantic_cache.mode");
}

// A test-side embedding: a bag of hashed, lower-cased words (paraphrases share most words).
StatusOr<std::vector<float>> BagOfWords(std::string_view text) {
  std::vector<float> v(64, 0.0f);
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    uint64_t h = 0;
    for (char c : word) h = HashCombine(h, static_cast<uint64_t>(std::tolower(static_cast<unsigned char>(c))));
    v[h % 64] += 1.0f;
    word.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else {
      flush();
    }
  }
  flush();
  return v;
}

class ResponseCacheServerTest : public ServerTest {
 protected:
  void StartWithCache(bool semantic) {
    ServerConfig c;
    semcache::SemanticCacheOptions o;
    o.dim = semantic ? 64 : 0;
    c.response_cache.cache = std::make_shared<semcache::SemanticCache>(o);
    c.response_cache.threshold = 0.8f;
    if (semantic) c.response_cache.embed = BagOfWords;
    Start(c);
  }
  // (x-kvserve-cache header, body).
  std::pair<std::string, Json> Chat(const Json& body, const httplib::Headers& headers = {}) {
    auto r = Post("/v1/chat/completions", body, headers);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return {r->get_header_value("x-kvserve-cache"), Json::parse(r->body)};
  }
};

TEST_F(ResponseCacheServerTest, ExactRepeatsAreServedFromTheCache) {
  StartWithCache(/*semantic=*/false);
  const auto [miss_header, miss] = Chat(BaseChat());
  EXPECT_EQ(miss_header, "miss");
  auto r = Post("/v1/chat/completions", BaseChat());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("x-kvserve-cache"), "exact");
  EXPECT_EQ(r->get_header_value("x-kvserve-cache-original-id"), miss["id"]);
  EXPECT_EQ(r->get_header_value("x-kvserve-cache-similarity"), "1.0000");
  const Json hit = Json::parse(r->body);
  EXPECT_NE(hit["id"], miss["id"]);
  EXPECT_EQ(hit["choices"], miss["choices"]);
  EXPECT_EQ(hit["kvserve_cache"]["tier"], "exact");
  EXPECT_EQ(hit["kvserve_cache"]["original_id"], miss["id"]);
  // Streamed, the hit replays the same message.
  Json streamed = BaseChat();
  streamed["stream"] = true;
  auto s = Post("/v1/chat/completions", streamed);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->get_header_value("x-kvserve-cache"), "exact");
  std::string content;
  std::string finish;
  for (const std::string& data : SseData(s->body)) {
    if (data == "[DONE]") continue;
    const Json c = Json::parse(data);
    if (c["choices"].empty()) continue;
    content += c["choices"][0]["delta"].value("content", "");
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, miss["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, miss["choices"][0]["finish_reason"]);
  // Another scope misses: a different temperature, system prompt or salt.
  Json salted = BaseChat();
  salted["cache_salt"] = "other";
  EXPECT_EQ(Chat(salted).first, "miss");
  // Cache-Control: no-cache skips the lookup (and stores again); no-store does not store.
  EXPECT_EQ(Chat(BaseChat(), {{"Cache-Control", "no-cache"}}).first, "miss");
  Json fresh = BaseChat();
  fresh["messages"][1]["content"] = "Something new";
  EXPECT_EQ(Chat(fresh, {{"Cache-Control", "no-store"}}).first, "miss");
  EXPECT_EQ(Chat(fresh).first, "miss");
  EXPECT_EQ(Chat(fresh).first, "exact");
  // Sampled requests are not cached by default.
  Json sampled = BaseChat();
  sampled["temperature"] = 1.0;
  auto plain = Post("/v1/chat/completions", sampled);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->get_header_value("x-kvserve-cache"), "");
  const std::string metrics = server_->RenderMetrics();
  EXPECT_NE(metrics.find("kvserve:semantic_cache_lookups_total{result=\"exact\"} 3"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvserve:semantic_cache_stores_total 4"), std::string::npos);
  EXPECT_NE(metrics.find("kvserve:semantic_cache_entries 3"), std::string::npos);
}

TEST_F(ResponseCacheServerTest, SemanticHitsAndLexicalVetoes) {
  StartWithCache(/*semantic=*/true);
  Json eu = BaseChat();
  eu["messages"][1]["content"] = "what is the refund window for EU orders of shoes and bags";
  EXPECT_EQ(Chat(eu).first, "miss");
  Json paraphrase = eu;
  paraphrase["messages"][1]["content"] = "what is the refund window for EU orders of shoes and bags please";
  auto [header, body] = Chat(paraphrase);
  EXPECT_EQ(header, "semantic");
  EXPECT_GE(body["kvserve_cache"]["similarity"].get<double>(), 0.8);
  EXPECT_LT(body["kvserve_cache"]["similarity"].get<double>(), 1.0);
  // Pairs that differ in a name, a number or a negation: vetoed.
  for (const char* text : {"what is the refund window for US orders of shoes and bags",
                           "what is the refund window for EU orders of 3 shoes and bags",
                           "what is not the refund window for EU orders of shoes and bags"}) {
    Json q = eu;
    q["messages"][1]["content"] = text;
    EXPECT_EQ(Chat(q).first, "miss") << text;
  }
  const std::string metrics = server_->RenderMetrics();
  EXPECT_NE(metrics.find("kvserve:semantic_cache_vetoes_total 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvserve:semantic_cache_lookups_total{result=\"semantic\"} 1"), std::string::npos);
}

TEST_F(ResponseCacheServerTest, FailedOrInvalidRequestsAreNotServedOrStored) {
  StartWithCache(/*semantic=*/false);
  EXPECT_EQ(Chat(BaseChat()).first, "miss");
  // A request the server refuses is refused even when its conversation is cached.
  Json bad = BaseChat();
  bad["model"] = "no-such-model";
  auto r = Post("/v1/chat/completions", bad);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // Completions are cached too (one prompt).
  const Json completion = Json::parse(R"({"prompt": "Once upon", "max_tokens": 4, "temperature": 0})");
  auto a = Post("/v1/completions", completion);
  auto b = Post("/v1/completions", completion);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get_header_value("x-kvserve-cache"), "miss");
  EXPECT_EQ(b->get_header_value("x-kvserve-cache"), "exact");
  EXPECT_EQ(Json::parse(a->body)["choices"], Json::parse(b->body)["choices"]);
}

}  // namespace
}  // namespace kvserve
