// POST /v1/embeddings on a real server: beside a generator and alone, OpenAI's shapes (float and
// base64, string / array / token-id inputs, usage), the errors, /v1/models, /metrics, and the
// embedder giving the response cache its semantic keys.
#include <cmath>
#include <cstring>

#include "model/synthetic.h"
#include "server/embeddings_api.h"
#include "server/server_test_fixture.h"

namespace kvserve {
namespace {

std::shared_ptr<const Embedder> TinyEmbedder() {
  static std::shared_ptr<const Embedder> e = [] {
    SyntheticModelOptions o;
    o.preset = "bert-tiny";  // 32 positions, 32 dims
    o.seed = 3;
    auto m = MakeSyntheticModel(o);
    EXPECT_TRUE(m.ok());
    Embedder::Options eo;
    eo.threads = 2;
    return std::shared_ptr<const Embedder>(std::move(Embedder::Create(std::move(m).value(), eo)).value());
  }();
  return e;
}

std::vector<float> Decode(const std::string& b64) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

class EmbeddingsServerTest : public ServerTest {
 protected:
  void StartWith(bool embeddings_only, ResponseCacheConfig cache = {}) {
    ServerConfig c;
    c.embedder = TinyEmbedder();
    c.embeddings_only = embeddings_only;
    c.response_cache = std::move(cache);
    Start(c);
  }
  Json Ok(const Json& body) {
    auto r = Post("/v1/embeddings", body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return Json::parse(r->body);
  }
  int Status(const std::string& path, const Json& body, std::string* message = nullptr) {
    auto r = Post(path, body);
    EXPECT_TRUE(r);
    if (!r) return 0;
    if (message != nullptr) *message = r->body;
    return r->status;
  }
};

TEST_F(EmbeddingsServerTest, OpenAiShapesBesideAGenerator) {
  StartWith(/*embeddings_only=*/false);
  const Embedder& e = *TinyEmbedder();
  const Json one = Ok({{"model", "embedder-test"}, {"input", "the cat sat"}});
  EXPECT_EQ(one["object"], "list");
  EXPECT_EQ(one["model"], "embedder-test");
  ASSERT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["data"][0]["object"], "embedding");
  EXPECT_EQ(one["data"][0]["index"], 0);
  const std::vector<float> got = one["data"][0]["embedding"].get<std::vector<float>>();
  auto expected = e.EmbedText("the cat sat", EmbedTruncation::kError);
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(got.size(), expected->size());
  double norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], (*expected)[i], 1e-6);
    norm += static_cast<double>(got[i]) * got[i];
  }
  EXPECT_NEAR(norm, 1.0, 1e-5);
  auto ids = e.Tokenize("the cat sat", EmbedTruncation::kError);
  EXPECT_EQ(one["usage"]["prompt_tokens"], static_cast<int64_t>(ids->size()));
  EXPECT_EQ(one["usage"]["total_tokens"], static_cast<int64_t>(ids->size()));

  // An array mixing texts and token ids, base64: the same vectors, in order.
  Json token_ids = Json::array();
  for (TokenId t : *ids) token_ids.push_back(t);
  const Json many = Ok({{"input", Json::array({"a dog", "the cat sat", token_ids})},
                        {"encoding_format", "base64"}});
  ASSERT_EQ(many["data"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(many["data"][i]["index"], i);
  const std::vector<float> b1 = Decode(many["data"][1]["embedding"].get<std::string>());
  const std::vector<float> b2 = Decode(many["data"][2]["embedding"].get<std::string>());
  ASSERT_EQ(b1.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(b1[i], got[i], 1e-6);
    EXPECT_NEAR(b2[i], got[i], 1e-6);
  }
  // One token-id array as the whole input.
  EXPECT_EQ(Ok({{"input", token_ids}})["data"].size(), 1u);

  // /v1/models lists both models; generation still works.
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  const Json m = Json::parse(models->body);
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][1]["id"], "embedder-test");
  EXPECT_EQ(m["data"][1]["dimensions"], e.dim());
  EXPECT_EQ(Status("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}}), 200);

  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvserve:embedding_requests_total 3"), std::string::npos);
  EXPECT_NE(metrics->body.find("kvserve:embedding_inputs_total 5"), std::string::npos);
}

TEST_F(EmbeddingsServerTest, BadRequestsGetClearErrors) {
  StartWith(/*embeddings_only=*/false);
  std::string msg;
  EXPECT_EQ(Status("/v1/embeddings", {{"model", "nope"}, {"input", "x"}}, &msg), 404);
  EXPECT_NE(msg.find("model_not_found"), std::string::npos);
  EXPECT_EQ(Status("/v1/embeddings", {{"model", "tiny-test"}, {"input", "x"}}, &msg), 400);
  EXPECT_NE(msg.find("generates text"), std::string::npos);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", ""}}), 400);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", Json::array()}}), 400);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", 5}}), 400);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", Json::array({1, -2})}}), 400);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", Json::array({1, 99999})}}, &msg), 400);
  EXPECT_NE(msg.find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", "x"}, {"encoding_format", "hex"}}), 400);
  EXPECT_EQ(Status("/v1/embeddings", {{"input", "x"}, {"dimensions", 7}}, &msg), 400);
  EXPECT_NE(msg.find("gives 32"), std::string::npos);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "cat ";
  EXPECT_EQ(Status("/v1/embeddings", {{"input", Json::array({"ok", long_text})}}, &msg), 400);
  EXPECT_NE(msg.find("input 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at most 32"), std::string::npos) << msg;
  auto r = client_->Post("/v1/embeddings", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Ok({{"input", "still fine"}})["data"].size(), 1u);
}

TEST_F(EmbeddingsServerTest, AnEmbeddingModelAlone) {
  StartWith(/*embeddings_only=*/true);
  EXPECT_EQ(Ok({{"input", "hello"}})["data"].size(), 1u);
  std::string msg;
  EXPECT_EQ(Status("/v1/completions", {{"prompt", "hi"}}, &msg), 400);
  EXPECT_NE(msg.find("embedding model"), std::string::npos);
  EXPECT_EQ(Status("/v1/chat/completions",
                   {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}}),
            400);
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  const Json m = Json::parse(models->body);
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "embedder-test");
  auto tok = Post("/tokenize", {{"prompt", "hello"}});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->status, 200);
  EXPECT_EQ(Json::parse(tok->body)["max_model_len"], 32);
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("kvserve:embedding_requests_total 1"), std::string::npos);
}

TEST_F(EmbeddingsServerTest, NoEmbedderMeans404) {
  Start();
  std::string msg;
  EXPECT_EQ(Status("/v1/embeddings", {{"input", "x"}}, &msg), 404);
  EXPECT_NE(msg.find("--embedding-model"), std::string::npos);
}

TEST_F(EmbeddingsServerTest, TheEmbedderGivesTheResponseCacheItsKeys) {
  ResponseCacheConfig cache;
  semcache::SemanticCacheOptions o;
  o.dim = 32;
  cache.cache = std::make_shared<semcache::SemanticCache>(o);
  cache.threshold = 0.0f;  // any stored answer is close enough: shows the embeddings are used
  StartWith(/*embeddings_only=*/false, std::move(cache));
  auto chat = [&](const std::string& text) {
    auto r = Post("/v1/chat/completions",
                  {{"messages", Json::array({{{"role", "user"}, {"content", text}}})},
                   {"temperature", 0},
                   {"max_tokens", 3}});
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return r->get_header_value("x-kvserve-cache");
  };
  EXPECT_EQ(chat("tell me about cats"), "miss");
  EXPECT_EQ(chat("tell me about cats"), "exact");
  EXPECT_EQ(chat("say something on dogs"), "semantic");
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  // The exact repeat was answered before any embedding: two keys embedded, not three.
  EXPECT_NE(metrics->body.find("kvserve:semantic_cache_embeddings_total 2"), std::string::npos)
      << metrics->body.substr(metrics->body.find("semantic_cache_embeddings"), 80);
}

}  // namespace
}  // namespace kvserve
