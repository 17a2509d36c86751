#include "toolcall/chat_output_parser.h"

#include <random>

#include <gtest/gtest.h>

namespace kvserve::toolcall {
namespace {

ChatOutput StreamAll(const ChatOutputOptions& options, std::string_view text, const std::vector<size_t>& sizes,
                     uint64_t seed, int* num_calls) {
  ToolCallIdGenerator ids(seed);
  ChatOutputStream stream(options, &ids);
  std::vector<OutputDelta> deltas;
  size_t pos = 0;
  for (size_t i = 0; pos < text.size(); ++i) {
    size_t n = std::min(i < sizes.size() ? sizes[i] : text.size(), text.size() - pos);
    stream.Feed(text.substr(pos, n), &deltas);
    pos += n;
  }
  stream.Finish(&deltas);
  ChatOutput message;
  for (const OutputDelta& d : deltas) AccumulateDelta(d, &message);
  *num_calls = stream.num_tool_calls();
  return message;
}

struct Case {
  const char* tool_parser;  // "" for none
  const char* reasoning;    // "" for none
  std::string output;
  std::string reasoning_content;
  std::string content;
  std::vector<std::string> call_names;
};

TEST(ChatOutputParserTest, ReasoningThenToolCallsStreamedOrNot) {
  const std::vector<Case> cases = {
      {"deepseek_v3", "deepseek_r1",
       "The user wants Tokyo weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
       "get_weather\n```json\n{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "The user wants Tokyo weather.", "", {"get_weather"}},
      {"hermes", "qwen3",
       "<think>\nNeed the tool; <tool_call> is not a call in here.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": "
       "\"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
       "Need the tool; <tool_call> is not a call in here.", "Checking.", {"get_weather"}},
      {"llama3_json", "qwen3", "<think>x</think>\n{\"name\": \"f\", \"parameters\": {}}", "x", "", {"f"}},
      {"", "qwen3", "<think>a</think>b", "a", "b", {}},
      {"hermes", "", "plain", "", "plain", {}},
      {"", "", "  as is \n", "", "  as is \n", {}},
  };
  std::mt19937 rng(1);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output);
    std::unique_ptr<ToolCallParser> parser;
    ChatOutputOptions options;
    if (*c.tool_parser) {
      parser = std::move(CreateToolCallParser(c.tool_parser).value());
      options.tool_call_parser = parser.get();
    }
    if (*c.reasoning) options.reasoning = *ReasoningParserOptionsFor(c.reasoning);
    ToolCallIdGenerator ids(5);
    ChatOutput whole = ParseChatOutput(c.output, options, ids);
    EXPECT_EQ(whole.reasoning_content, c.reasoning_content);
    EXPECT_EQ(whole.content, c.content);
    ASSERT_EQ(whole.tool_calls.size(), c.call_names.size());
    for (size_t i = 0; i < c.call_names.size(); ++i) EXPECT_EQ(whole.tool_calls[i].name, c.call_names[i]);
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<size_t> sizes;
      std::uniform_int_distribution<size_t> size(1, trial == 0 ? 1 : 8);
      for (size_t total = 0; total < c.output.size();) sizes.push_back(size(rng)), total += sizes.back();
      int num_calls = 0;
      ChatOutput streamed = StreamAll(options, c.output, sizes, 5, &num_calls);
      EXPECT_EQ(streamed.reasoning_content, whole.reasoning_content);
      EXPECT_EQ(streamed.content, whole.content);
      EXPECT_EQ(num_calls, static_cast<int>(whole.tool_calls.size()));
      ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size());
      for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
        EXPECT_EQ(streamed.tool_calls[i].id, whole.tool_calls[i].id);
        EXPECT_EQ(streamed.tool_calls[i].arguments, whole.tool_calls[i].arguments);
      }
    }
  }
}

TEST(ChatOutputParserTest, MessageJson) {
  ChatOutput message;
  message.reasoning_content = "r";
  message.content = "c";
  nlohmann::ordered_json j = OpenAiMessageJson(message);
  EXPECT_EQ(j.dump(), "{\"role\":\"assistant\",\"content\":\"c\",\"reasoning_content\":\"r\"}");
  EXPECT_EQ(OpenAiDeltaJson(OutputDelta::Reasoning("r")).dump(), "{\"reasoning_content\":\"r\"}");
}

}  // namespace
}  // namespace kvserve::toolcall
