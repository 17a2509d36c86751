// Structured output and tool choice between the parsed request and the engine: the fields
// that set a grammar (and the 400s naming them), the schema a forced tool call must match,
// the grammar every choice's RequestInput carries, and the parser plan of chat choices.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/synthetic.h"
#include "server/generate_request.h"
#include "toolcall/parser_selection.h"

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

StatusOr<std::string> RenderRoles(const openai::ChatRequest& req) {
  std::string out;
  for (const Json& m : req.messages) out += m.value("role", "") + "\n";
  return out;
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping"}}])";

class StructuredOutputTest : public ::testing::Test {
 protected:
  StructuredOutputTest() {
    options_.tokenizer = &GetTokenizer();
    options_.render_chat = &render_;
    options_.served_model_name = "m";
    options_.max_model_len = 256;
    options_.grammar_cache = &cache_;
  }
  StatusOr<EngineInputs> Build(const std::string& body, bool chat, openai::ParamError* err) {
    auto req = ParseGenerateRequest(body, chat, err);
    if (!req.ok()) return req.status();
    return BuildEngineInputs(*req, options_, err);
  }
  openai::ChatRequest ParseChat(const std::string& body) {
    openai::ParamError err;
    auto req = ParseGenerateRequest(body, true, &err);
    EXPECT_TRUE(req.ok()) << req.status().ToString();
    return req.ok() ? req->chat_request : openai::ChatRequest{};
  }
  ChatRenderer render_ = RenderRoles;
  grammar::GrammarCache cache_;
  EngineInputOptions options_;
};

TEST_F(StructuredOutputTest, EachFieldSetsTheGrammarOfEveryChoice) {
  const std::vector<std::string> completions = {
      R"({"prompt": "x", "n": 3, "guided_regex": "[ab]+"})",
      R"({"prompt": "x", "n": 3, "guided_choice": ["a", "b"]})",
      R"({"prompt": "x", "n": 3, "guided_json": {"type": "object"}})",
      R"({"prompt": "x", "n": 3, "guided_json": "{\"type\": \"integer\"}"})",
      R"({"prompt": "x", "n": 3, "guided_grammar": "root ::= \"a\""})",
      R"({"prompt": "x", "n": 3, "grammar": "root ::= [0-9]+"})",
      R"({"prompt": "x", "n": 3, "json_schema": {"type": "array"}})",
      R"({"prompt": "x", "n": 3, "response_format": {"type": "json_object"}})",
      R"({"prompt": "x", "n": 3, "response_format": {"type": "json_schema",
          "json_schema": {"name": "s", "schema": {"type": "object"}}}})",
  };
  for (const std::string& body : completions) {
    openai::ParamError err;
    auto inputs = Build(body, false, &err);
    ASSERT_TRUE(inputs.ok()) << body << ": " << inputs.status().ToString();
    ASSERT_NE(inputs->grammar, nullptr) << body;
    ASSERT_EQ(inputs->choices.size(), 3u);
    for (const auto& c : inputs->choices) EXPECT_EQ(c.input.grammar, inputs->grammar) << body;
  }
  // The same spec twice: compiled once.
  openai::ParamError err;
  auto a = Build(completions[0], false, &err);
  auto b = Build(completions[0], false, &err);
  EXPECT_EQ(a->grammar, b->grammar);
  // Nothing set, or text: no grammar.
  for (const char* body : {R"({"prompt": "x"})", R"({"prompt": "x", "response_format": {"type": "text"}})"}) {
    EXPECT_EQ(Build(body, false, &err)->grammar, nullptr) << body;
  }
}

TEST_F(StructuredOutputTest, BadSpecsAre400sNamingTheField) {
  struct Case {
    bool chat;
    std::string body, param, message_part;
  };
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<Case> cases = {
      {false, R"({"prompt": "x", "guided_regex": "[a-"})", "guided_regex", "guided_regex"},
      {false, R"({"prompt": "x", "guided_regex": 3})", "guided_regex", "string"},
      {false, R"({"prompt": "x", "guided_choice": []})", "guided_choice", "non-empty"},
      {false, R"({"prompt": "x", "guided_grammar": "root ::= undefined_rule"})", "guided_grammar",
       "undefined_rule"},
      {false, R"({"prompt": "x", "guided_json": {"type": "object", "properties": {"n": {"minimum": 1}}}})",
       "guided_json", "'minimum' at /properties/n"},
      {false, R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["a"]})", "guided_choice",
       "both constrain"},
      {false, R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format", "json_schema"},
      {false, R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
       "response_format.json_schema", "schema"},
      {true, "{" + msgs + R"(, "tools": {}})", "tools", "array"},
      {true, "{" + msgs + R"(, "tools": [{"type": "function", "function": {}}]})",
       "tools[0].function.name", "name"},
      {true, "{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f"}},
                                         {"type": "function", "function": {"name": "f"}}]})",
       "tools[1].function.name", "two tools"},
      {true, "{" + msgs + R"(, "tool_choice": "required"})", "tool_choice", "needs 'tools'"},
      {true, "{" + msgs + R"(, "tools": )" + kTools + R"(, "tool_choice": "sometimes"})", "tool_choice",
       "required"},
      {true, "{" + msgs + R"(, "tools": )" + kTools +
                 R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
       "tool_choice", "'nope'"},
      {true, "{" + msgs + R"(, "tools": )" + kTools +
                 R"(, "tool_choice": "required", "guided_regex": "a"})",
       "guided_regex", "both constrain"},
      {true, "{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}}}],
          "tool_choice": "required"})",
       "tools", "function 'f': json_schema: unsupported keyword 'maximum' at /properties/n"},
  };
  for (const Case& c : cases) {
    openai::ParamError err;
    auto inputs = Build(c.body, c.chat, &err);
    ASSERT_FALSE(inputs.ok()) << c.body;
    EXPECT_EQ(inputs.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body << ": " << err.message;
    EXPECT_NE(err.message.find(c.message_part), std::string::npos) << c.body << ": " << err.message;
  }
  // A server without a grammar cache refuses structured output.
  options_.grammar_cache = nullptr;
  openai::ParamError err;
  EXPECT_FALSE(Build(R"({"prompt": "x", "guided_regex": "a"})", false, &err).ok());
  EXPECT_EQ(err.param, "guided_regex");
}

TEST_F(StructuredOutputTest, ForcedToolCallSchemas) {
  openai::ChatRequest required = ParseChat(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": )" + std::string(kTools) + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
  const Json schema = Json::parse(ForcedToolCallSchema(required));
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);  // parallel_tool_calls false
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_weather");
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["parameters"]["required"][0], "city");
  // A tool without parameters takes any object.
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"], Json::parse(R"({"type": "object"})"));

  openai::ChatRequest named = ParseChat(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": )" + std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})");
  EXPECT_EQ(Json::parse(ForcedToolCallSchema(named))["properties"]["city"]["type"], "string");

  openai::ChatRequest automatic = ParseChat(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": )" + std::string(kTools) + "}");
  EXPECT_EQ(automatic.tool_choice, openai::ToolChoice::kAuto);
  EXPECT_EQ(ForcedToolCallSchema(automatic), "");
}

TEST_F(StructuredOutputTest, ChatOutputPlans) {
  auto hermes = toolcall::CreateToolCallParser("hermes");
  ASSERT_TRUE(hermes.ok());
  ChatOutputConfig with_parser;
  with_parser.tool_call_parser = hermes->get();
  with_parser.reasoning = toolcall::ReasoningParserOptions{};
  ChatOutputConfig without_parser;
  const std::string base = R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + std::string(kTools);
  openai::ParamError err;

  // auto: the server's parser, or a 400 naming tool_choice without one.
  const openai::ChatRequest automatic = ParseChat(base + "}");
  auto plan = PlanChatOutput(automatic, with_parser, false, "", &err);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->options.tool_call_parser, hermes->get());
  EXPECT_TRUE(plan->options.reasoning.has_value());
  EXPECT_FALSE(PlanChatOutput(automatic, without_parser, false, "", &err).ok());
  EXPECT_EQ(err.param, "tool_choice");

  // required / named: forced parsers, with or without --enable-auto-tool-choice; a grammar
  // turns the reasoning split off.
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "ping"}})"}) {
    const openai::ChatRequest forced = ParseChat(base + R"(, "tool_choice": )" + choice + "}");
    for (const ChatOutputConfig* config : {&with_parser, &without_parser}) {
      auto p = PlanChatOutput(forced, *config, /*has_grammar=*/true, "", &err);
      ASSERT_TRUE(p.ok()) << choice;
      ASSERT_NE(p->forced_parser, nullptr);
      EXPECT_EQ(p->options.tool_call_parser, p->forced_parser.get());
      EXPECT_FALSE(p->options.reasoning.has_value());
    }
  }

  // none: plain content; a prompt that opens <think> starts the output in reasoning.
  const openai::ChatRequest none = ParseChat(base + R"(, "tool_choice": "none"})");
  auto p = PlanChatOutput(none, with_parser, false, "<|im_start|>assistant\n<think>\n", &err);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->options.tool_call_parser, nullptr);
  EXPECT_TRUE(p->options.reasoning->starts_in_reasoning);
  EXPECT_TRUE(PlanChatOutput(none, without_parser, false, "", &err)->plain());
}

TEST(ChatOutputFlagsTest, ResolvedAgainstTheTemplate) {
  const std::string qwen = "{% for tool in tools %}{{ tool | tojson }}{% endfor %}<tool_call>\n"
                           "{\"name\": <function-name>}\n</tool_call>{% if '<think>' %}{% endif %}";
  std::unique_ptr<toolcall::ToolCallParser> owned;
  std::string banner;
  ChatOutputFlags flags;
  // Off by default: no parser, forced tool calls still on.
  auto off = ResolveChatOutput(flags, qwen, &owned, &banner);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->tool_call_parser, nullptr);
  EXPECT_NE(banner.find("tool_choice auto: off"), std::string::npos) << banner;
  // --enable-auto-tool-choice: detected from the template.
  flags.enable_auto_tool_choice = true;
  flags.reasoning_parser = "qwen3";
  auto on = ResolveChatOutput(flags, qwen, &owned, &banner);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  ASSERT_EQ(on->tool_call_parser, owned.get());
  EXPECT_EQ(on->tool_call_parser->name(), "hermes");
  EXPECT_EQ(on->reasoning->start_tag, "<think>");
  EXPECT_NE(banner.find("hermes parser (from the chat template)"), std::string::npos) << banner;
  // Errors: an unknown name; a parser without --enable-auto-tool-choice; nothing detected.
  flags.tool_call_parser = "nope";
  EXPECT_FALSE(ResolveChatOutput(flags, qwen, &owned, &banner).ok());
  flags.tool_call_parser = "mistral";
  flags.enable_auto_tool_choice = false;
  EXPECT_FALSE(ResolveChatOutput(flags, qwen, &owned, &banner).ok());
  flags = ChatOutputFlags{};
  flags.enable_auto_tool_choice = true;
  EXPECT_FALSE(ResolveChatOutput(flags, "{{ messages }}", &owned, &banner).ok());
}

TEST(ChatOutputFlagsTest, MarkupControlTokensAreKeptOthersNot) {
  // The synthetic vocabulary plus four added tokens.
  auto synthetic = MakeSyntheticModel(SyntheticModelOptions{.preset = "tiny"});
  ASSERT_TRUE(synthetic.ok());
  VocabSpec spec = *synthetic->vocab;
  auto add = [&](const std::string& text, TokenType type) {
    spec.tokens.push_back(text);
    spec.token_types.push_back(type);
  };
  const auto first_new = static_cast<TokenId>(spec.tokens.size());
  add("<|python_tag|>", TokenType::kControl);
  add("<|im_start|>", TokenType::kControl);
  add("<tool_call>", TokenType::kUserDefined);  // has text anyway
  add("[TOOL_CALLS]", TokenType::kControl);
  auto tok = Tokenizer::Create(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(MarkupTokenIds(**tok), (std::vector<TokenId>{first_new, first_new + 3}));
}

}  // namespace
}  // namespace kvserve
