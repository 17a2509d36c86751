// ModelChatTemplates: what the server renders OpenAI messages with. The messages are
// normalised for each template as vLLM does before rendering: `content: null` becomes "",
// text-part lists become strings for templates that take strings, tool-call arguments (JSON
// strings in the OpenAI API) become what the template prints.
#include "chat/model_chat_templates.h"

#include <gtest/gtest.h>

#include <string>

namespace kvserve {
namespace {

using ojson = nlohmann::ordered_json;

ojson Conversation() {
  return ojson::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}])");
}

TEST(ModelChatTemplatesTest, ChatMlRendersNullContentAsEmptyAndJoinsTextParts) {
  auto t = ModelChatTemplates::Load("", "", "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ChatTemplateInputs in;
  in.messages = Conversation();
  in.add_generation_prompt = true;
  auto text = t->Render(in);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("first\nsecond"), std::string::npos) << *text;
  EXPECT_EQ(text->find("None"), std::string::npos) << *text;
  EXPECT_EQ(text->find("'type'"), std::string::npos) << *text;  // no list repr
}

TEST(ModelChatTemplatesTest, ToolCallArgumentsRenderAsTheTemplatePrintsThem) {
  auto t = ModelChatTemplates::Load(
      "", std::string(KVSERVE_TESTDATA_DIR) + "/chat_templates/Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ChatTemplateInputs in;
  in.messages = Conversation();
  in.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  in.add_generation_prompt = true;
  auto text = t->Render(in);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // Qwen3 prints arguments with tojson: an object in the client's key order, not an escaped
  // string.
  EXPECT_NE(text->find(R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}})"),
            std::string::npos)
      << *text;
  EXPECT_EQ(text->find(R"(\"city\")"), std::string::npos) << *text;
  EXPECT_NE(text->find("first\nsecond"), std::string::npos) << *text;
}

}  // namespace
}  // namespace kvserve
