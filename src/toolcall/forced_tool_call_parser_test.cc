#include "toolcall/forced_tool_call_parser.h"

#include <random>

#include <gtest/gtest.h>

#include "toolcall/output_delta.h"
#include "toolcall/tool_call_stream.h"

namespace kvserve::toolcall {
namespace {

ChatOutput StreamInPieces(const ToolCallParser& parser, std::string_view text, std::mt19937& rng) {
  ToolCallIdGenerator ids(4);
  ToolCallStream stream(&parser, &ids);
  std::vector<OutputDelta> deltas;
  std::uniform_int_distribution<size_t> size(1, 5);
  for (size_t pos = 0; pos < text.size();) {
    size_t n = std::min(size(rng), text.size() - pos);
    stream.Feed(text.substr(pos, n), &deltas);
    pos += n;
  }
  stream.Finish(&deltas);
  ChatOutput message;
  for (const OutputDelta& d : deltas) AccumulateDelta(d, &message);
  return message;
}

void ExpectStreamsLikeParse(const ToolCallParser& parser, const std::string& text) {
  std::mt19937 rng(9);
  for (size_t n = 0; n <= text.size(); ++n) {
    std::string prefix = text.substr(0, n);
    ToolCallIdGenerator ids(4);
    ParsedToolCalls whole = parser.Parse(prefix, ids);
    ChatOutput streamed = StreamInPieces(parser, prefix, rng);
    ASSERT_EQ(streamed.content, whole.content) << prefix;
    ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << prefix;
    for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
      EXPECT_EQ(streamed.tool_calls[i].id, whole.tool_calls[i].id);
      EXPECT_EQ(streamed.tool_calls[i].arguments, whole.tool_calls[i].arguments);
    }
  }
}

TEST(ForcedToolCallParserTest, Required) {
  auto parser = CreateRequiredToolCallParser();
  std::string text =
      "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"parameters\": {}}]";
  ToolCallIdGenerator ids(1);
  ParsedToolCalls parsed = parser->Parse(text, ids);
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.tool_calls.size(), 2u);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(parsed.tool_calls[1].arguments, "{}");
  ExpectStreamsLikeParse(*parser, text);
  // Cut off: content, not an error.
  ParsedToolCalls cut = parser->Parse("[{\"name\": \"get_weather\", \"param", ids);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, "[{\"name\": \"get_weather\", \"param");
  EXPECT_TRUE(parser->Parse("[]", ids).tool_calls.empty());
}

TEST(ForcedToolCallParserTest, Named) {
  auto parser = CreateNamedToolCallParser("get_weather", ToolCallIdStyle::kMistral);
  std::string text = "{\"city\": \"Zürich\", \"days\": [1, 2]}";
  ToolCallIdGenerator ids(1);
  ParsedToolCalls parsed = parser->Parse(text, ids);
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed.tool_calls[0].arguments, "{\"city\":\"Zürich\",\"days\":[1,2]}");
  EXPECT_EQ(parsed.tool_calls[0].id.size(), 9u);
  ExpectStreamsLikeParse(*parser, text);
  EXPECT_TRUE(parser->Parse("not json", ids).tool_calls.empty());
}

}  // namespace
}  // namespace kvserve::toolcall
