// The pure steps of a generation request, without HTTP or an engine: ParseGenerateRequest
// (400s naming the param) and BuildEngineInputs (chat template, tokenization, vocabulary,
// model name and context checks, and the RequestInput of every choice).
#include "server/generate_request.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/synthetic.h"

namespace kvserve {
namespace {

using openai::Json;

const Tokenizer& GetTokenizer() {
  static const Tokenizer* tok = [] {
    SyntheticModelOptions o;
    o.preset = "tiny";
    auto loaded = MakeSyntheticModel(o);
    EXPECT_TRUE(loaded.ok());
    return std::move(Tokenizer::Create(*loaded->vocab)).value().release();
  }();
  return *tok;
}

// "role: content" lines; a message whose content is "refuse" is refused, as a template may
// refuse a conversation.
StatusOr<std::string> RenderLines(const openai::ChatRequest& req) {
  std::string out;
  for (const Json& m : req.messages) {
    if (m.value("content", "") == "refuse") return InvalidArgumentError("template refused");
    out += m.value("role", "") + ": " + m.value("content", "") + "\n";
  }
  return out;
}

StatusOr<std::string> RenderNothing(const openai::ChatRequest&) { return std::string(); }

class GenerateRequestTest : public ::testing::Test {
 protected:
  GenerateRequestTest() {
    options_.tokenizer = &GetTokenizer();
    options_.render_chat = &render_;
    options_.served_model_name = "served";
    options_.max_model_len = 64;
  }

  GenerateRequest Parse(const Json& body, bool chat) {
    openai::ParamError err;
    auto req = ParseGenerateRequest(body.dump(), chat, &err);
    EXPECT_TRUE(req.ok()) << req.status().ToString();
    return req.ok() ? std::move(req).value() : GenerateRequest{};
  }
  // BuildEngineInputs on `body`, expected to succeed.
  EngineInputs Build(const Json& body, bool chat) {
    openai::ParamError err;
    auto inputs = BuildEngineInputs(Parse(body, chat), options_, &err);
    EXPECT_TRUE(inputs.ok()) << inputs.status().ToString();
    return inputs.ok() ? std::move(inputs).value() : EngineInputs{};
  }
  // BuildEngineInputs on `body`, expected to fail: the error it reports.
  openai::ParamError BuildError(const Json& body, bool chat) {
    openai::ParamError err;
    auto inputs = BuildEngineInputs(Parse(body, chat), options_, &err);
    EXPECT_FALSE(inputs.ok()) << body.dump();
    if (!inputs.ok()) {
      EXPECT_EQ(inputs.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(err.message, inputs.status().message());
    }
    return err;
  }

  ChatRenderer render_ = RenderLines;
  EngineInputOptions options_;
};

TEST_F(GenerateRequestTest, ParseErrorsNameTheParam) {
  struct Case {
    bool chat;
    std::string body, param;
  };
  const std::vector<Case> cases = {
      {false, "{not json", ""},
      {false, "[1,2]", ""},
      {false, R"({"max_tokens": 3})", "prompt"},
      {false, R"({"prompt": "x", "max_tokens": "ten"})", "max_tokens"},
      {false, R"({"prompt": "x", "n": 0})", "n"},
      {true, R"({"messages": []})", "messages"},
      {true, R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      // content null or absent: only an assistant message with tool calls may do that.
      {true, R"({"messages": [{"role": "user", "content": null}]})", "messages[0].content"},
      {true, R"({"messages": [{"role": "system", "content": null},
                              {"role": "user", "content": "x"}]})", "messages[0].content"},
      {true, R"({"messages": [{"role": "user", "content": "x"},
                              {"role": "assistant"}]})", "messages[1].content"},
  };
  for (const Case& c : cases) {
    openai::ParamError err;
    auto req = ParseGenerateRequest(c.body, c.chat, &err);
    ASSERT_FALSE(req.ok()) << c.body;
    EXPECT_EQ(req.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_FALSE(req.status().message().empty()) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body;
  }
  openai::ParamError err;
  EXPECT_TRUE(ParseGenerateRequest(
                  R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
                      "content": null, "tool_calls": [{"id": "1", "type": "function",
                      "function": {"name": "f", "arguments": "{}"}}]}]})",
                  true, &err)
                  .ok());
  auto bad = ParseGenerateRequest("{not json", false, &err);
  EXPECT_EQ(bad.status().message(), "the request body is not valid JSON");
}

TEST_F(GenerateRequestTest, ParseKeepsTheKindAndItsParams) {
  GenerateRequest c = Parse({{"prompt", {"a", "b"}}, {"max_tokens", 3}}, /*chat=*/false);
  EXPECT_FALSE(c.chat);
  EXPECT_EQ(c.completion.prompts.size(), 2u);
  EXPECT_EQ(c.params().max_tokens, 3);
  GenerateRequest chat =
      Parse({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"n", 2}}, /*chat=*/true);
  EXPECT_TRUE(chat.chat);
  EXPECT_EQ(chat.chat_request.messages.size(), 1u);
  EXPECT_EQ(chat.params().n, 2);
}

TEST_F(GenerateRequestTest, EveryChoiceOfEveryPromptGetsItsInput) {
  const Tokenizer& tok = GetTokenizer();
  const EngineInputs inputs = Build({{"prompt", Json::array({"once upon", Json::array({5, 6, 7})})},
                                     {"n", 3},
                                     {"seed", 11},
                                     {"stop", "x"},
                                     {"stop_token_ids", {2}},
                                     {"ignore_eos", true},
                                     {"priority", 4},
                                     {"cache_salt", "t"},
                                     {"logprobs", 1}},
                                    /*chat=*/false);
  const std::vector<TokenId> text_ids =
      tok.Encode("once upon", EncodeOptions{.add_bos = true, .parse_special = true});
  ASSERT_EQ(inputs.prompt_lengths.size(), 2u);
  EXPECT_EQ(inputs.prompt_lengths[0], static_cast<int64_t>(text_ids.size()));
  EXPECT_EQ(inputs.prompt_lengths[1], 3);
  ASSERT_EQ(inputs.choices.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const EngineInputs::Choice& c = inputs.choices[i];
    EXPECT_EQ(c.prompt_index, static_cast<int64_t>(i / 3));
    const std::vector<TokenId> ids_prompt = {5, 6, 7};
    EXPECT_EQ(c.input.prompt_ids, i < 3 ? text_ids : ids_prompt);
    EXPECT_EQ(c.input.sampling.seed, 11u + i % 3);  // seed + j within each prompt
    EXPECT_EQ(c.input.max_tokens, 16);             // the completions default
    EXPECT_EQ(c.input.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(c.input.stop_token_ids, std::vector<TokenId>(1, 2));
    EXPECT_TRUE(c.input.ignore_eos);
    EXPECT_EQ(c.input.priority, 4);
    EXPECT_EQ(c.input.cache_salt, "t");
    EXPECT_EQ(c.input.logprobs, 1);
  }
}

TEST_F(GenerateRequestTest, ChatRendersWithoutBosAndDefaultsToTheRestOfTheContext) {
  const Tokenizer& tok = GetTokenizer();
  const Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const EngineInputs inputs = Build(body, /*chat=*/true);
  const std::vector<TokenId> ids =
      tok.Encode("user: hi\n", EncodeOptions{.add_bos = false, .parse_special = true});
  ASSERT_EQ(inputs.choices.size(), 1u);
  EXPECT_EQ(inputs.choices[0].input.prompt_ids, ids);
  EXPECT_EQ(inputs.choices[0].input.max_tokens, 64 - static_cast<int64_t>(ids.size()));
  // TokenizeChat (also behind /tokenize) gives the same ids.
  openai::ParamError err;
  auto direct = TokenizeChat(Parse(body, /*chat=*/true).chat_request, render_, tok, &err);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, ids);
}

TEST_F(GenerateRequestTest, BuildErrorsNameTheParamAndCode) {
  const int64_t vocab = GetTokenizer().vocab_size();
  openai::ParamError e = BuildError({{"prompt", {1, vocab}}}, false);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("outside the vocabulary"), std::string::npos) << e.message;

  e = BuildError({{"prompt", "x"}, {"model", "gpt-9"}}, false);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");

  e = BuildError({{"prompt", "x"}, {"stop_token_ids", {vocab}}}, false);
  EXPECT_EQ(e.param, "stop_token_ids");

  e = BuildError({{"prompt", "x"}, {"max_tokens", 64}}, false);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("asks for 64 completion tokens"), std::string::npos) << e.message;

  Json long_prompt = Json::array();
  for (int i = 0; i < 64; ++i) long_prompt.push_back(3);
  e = BuildError({{"prompt", long_prompt}}, false);
  EXPECT_EQ(e.code, "context_length_exceeded");

  // A prompt whose bytes alone cannot fit is refused before it is tokenized, in completions
  // and chat; StreamingLLM takes it (its positions stay within its window).
  const int64_t per_token = GetTokenizer().max_bytes_per_token();
  ASSERT_GE(per_token, 4);
  const std::string huge(static_cast<size_t>(per_token * 64), 'a');
  e = BuildError({{"prompt", huge}}, false);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("bytes, so at least 64 tokens"), std::string::npos) << e.message;
  e = BuildError({{"messages", {{{"role", "user"}, {"content", huge}}}}}, true);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("bytes, so at least"), std::string::npos) << e.message;
  EXPECT_EQ(Build({{"prompt", huge}, {"max_tokens", 1},
                   {"kv_policy", {{"method", "streaming"}, {"budget_tokens", 16}}}},
                  false)
                .choices.size(),
            1u);

  const Json chat = {{"messages", {{{"role", "user"}, {"content", "refuse"}}}}};
  e = BuildError(chat, true);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.message, "chat template: template refused");
  e = BuildError({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 64}},
                 true);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.code, "context_length_exceeded");

  render_ = RenderNothing;
  e = BuildError({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, true);
  EXPECT_EQ(e.message, "the prompt is empty");
  EXPECT_EQ(e.param, "messages");

  options_.render_chat = nullptr;
  e = BuildError({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, true);
  EXPECT_EQ(e.message, "this server has no chat template");
  EXPECT_EQ(e.param, "");
}

TEST_F(GenerateRequestTest, TheFirstFailingCheckIsReported) {
  // Out-of-vocabulary prompt ids are found before a wrong model name, which is found before
  // the context check (the order the HTTP handler always had).
  const int64_t vocab = GetTokenizer().vocab_size();
  openai::ParamError e = BuildError({{"prompt", {vocab}}, {"model", "gpt-9"}}, false);
  EXPECT_EQ(e.param, "prompt");
  e = BuildError({{"prompt", "x"}, {"model", "gpt-9"}, {"max_tokens", 64}}, false);
  EXPECT_EQ(e.param, "model");
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

// "kv_policy": fields override the server's default; bad values name the field.
TEST_F(GenerateRequestTest, KvPolicyOverridesTheServerDefault) {
  options_.kv_policy.method = KvEvictionMethod::kStreaming;
  options_.kv_policy.budget_tokens = 48;
  EngineInputs inputs = Build({{"prompt", "x"}}, false);
  ASSERT_EQ(inputs.choices.size(), 1u);
  EXPECT_EQ(inputs.choices[0].input.kv_policy.method, KvEvictionMethod::kStreaming);
  EXPECT_EQ(inputs.choices[0].input.kv_policy.budget_tokens, 48);

  inputs = Build({{"prompt", "x"},
                  {"kv_policy", {{"budget_tokens", 32}, {"sink_tokens", 2}}}},
                 false);
  const KvEvictionPolicy& p = inputs.choices[0].input.kv_policy;
  EXPECT_EQ(p.method, KvEvictionMethod::kStreaming);  // kept from the default
  EXPECT_EQ(p.budget_tokens, 32);
  EXPECT_EQ(p.sink_tokens, 2);
  inputs = Build({{"prompt", "x"}, {"kv_policy", {{"method", "none"}}}}, false);
  EXPECT_EQ(inputs.choices[0].input.kv_policy.method, KvEvictionMethod::kNone);

  // StreamingLLM runs prompts and outputs past the context (positions within its window);
  // the same request without it is refused.
  Json long_prompt = Json::array();
  for (int i = 0; i < 64; ++i) long_prompt.push_back(3);
  inputs = Build({{"prompt", long_prompt}, {"max_tokens", 500},
                  {"kv_policy", {{"method", "streaming"}, {"budget_tokens", 16}}}},
                 false);
  EXPECT_EQ(inputs.choices[0].input.max_tokens, 500);
  EXPECT_EQ(BuildError({{"prompt", long_prompt}, {"kv_policy", {{"method", "h2o"}}}}, false).code,
            "context_length_exceeded");

  openai::ParamError e =
      BuildError({{"prompt", "x"}, {"kv_policy", {{"budget_tokens", 0}}}}, false);
  EXPECT_EQ(e.param, "kv_policy.budget_tokens");
  e = BuildError({{"prompt", "x"}, {"kv_policy", {{"method", "lru"}}}}, false);
  EXPECT_EQ(e.param, "kv_policy.method");
  EXPECT_NE(e.message.find("snapkv"), std::string::npos) << e.message;  // lists the names

  struct Case {
    std::string body, param;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": "x", "kv_policy": 3})", "kv_policy"},
           {R"({"prompt": "x", "kv_policy": {"budget": 3}})", "kv_policy.budget"},
           {R"({"prompt": "x", "kv_policy": {"sink_tokens": "4"}})", "kv_policy.sink_tokens"},
           {R"({"prompt": "x", "kv_policy": {"method": 1}})", "kv_policy.method"}}) {
    openai::ParamError err;
    auto req = ParseGenerateRequest(c.body, false, &err);
    ASSERT_FALSE(req.ok()) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body;
  }
}

}  // namespace
}  // namespace kvserve
