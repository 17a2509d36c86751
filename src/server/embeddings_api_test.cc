// The /v1/embeddings request and response shapes: every input form, the 400s naming the
// field, float and base64 encodings (base64 checked against known vectors and by decoding).
#include "server/embeddings_api.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace kvserve::openai {
namespace {

TEST(EmbeddingsApiTest, EveryInputForm) {
  ParamError err;
  auto one = ParseEmbeddingsRequest(Json::parse(R"({"input": "hello", "model": "m"})"), &err);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->inputs.size(), 1u);
  EXPECT_EQ(*one->inputs[0].text, "hello");
  EXPECT_EQ(one->model, "m");
  EXPECT_FALSE(one->base64);
  auto many = ParseEmbeddingsRequest(
      Json::parse(R"({"input": ["a", [1, 2, 3], "b"], "encoding_format": "base64"})"), &err);
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many->inputs.size(), 3u);
  EXPECT_EQ(many->inputs[1].ids, (std::vector<TokenId>{1, 2, 3}));
  EXPECT_TRUE(many->base64);
  auto ids = ParseEmbeddingsRequest(Json::parse(R"({"input": [5, 6]})"), &err);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->inputs.size(), 1u);
  EXPECT_EQ(ids->inputs[0].ids, (std::vector<TokenId>{5, 6}));
}

TEST(EmbeddingsApiTest, BadRequestsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "input"},
      {R"({"input": ""})", "input"},
      {R"({"input": []})", "input"},
      {R"({"input": [[]]})", "input"},
      {R"({"input": [-1]})", "input"},
      {R"({"input": [{"text": "x"}]})", "input"},
      {R"({"input": "x", "encoding_format": "hex"})", "encoding_format"},
      {R"({"input": "x", "dimensions": 0})", "dimensions"},
      {R"({"input": "x", "model": 3})", "model"},
  };
  for (const auto& [body, param] : cases) {
    ParamError err;
    EXPECT_FALSE(ParseEmbeddingsRequest(Json::parse(body), &err).ok()) << body;
    EXPECT_EQ(err.param, param) << body;
  }
  Json big = {{"input", Json::array()}};
  for (int i = 0; i <= kMaxEmbeddingInputs; ++i) big["input"].push_back("x");
  ParamError err;
  EXPECT_FALSE(ParseEmbeddingsRequest(big, &err).ok());
}

TEST(EmbeddingsApiTest, ResponseShapesAndBase64) {
  EXPECT_EQ(Base64Encode("", 0), "");
  EXPECT_EQ(Base64Encode("f", 1), "Zg==");
  EXPECT_EQ(Base64Encode("fo", 2), "Zm8=");
  EXPECT_EQ(Base64Encode("foo", 3), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar", 6), "Zm9vYmFy");
  const std::vector<std::vector<float>> e = {{1.0f, -0.5f}, {0.25f, 0.0f}};
  const Json f = EmbeddingsResponse(e, false, "m", 7);
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_EQ(f["data"][0]["embedding"], Json::parse("[1.0, -0.5]"));
  EXPECT_EQ(f["usage"]["prompt_tokens"], 7);
  const Json b = EmbeddingsResponse(e, true, "m", 7);
  // 1.0f = 00 00 80 3F, -0.5f = 00 00 00 BF (little-endian).
  EXPECT_EQ(b["data"][0]["embedding"], Base64Encode("\x00\x00\x80\x3f\x00\x00\x00\xbf", 8));
}

}  // namespace
}  // namespace kvserve::openai
