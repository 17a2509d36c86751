// Every format on recorded model outputs (tests/data/tool_calls/<parser>.json: real outputs
// quoted in vLLM's and llama.cpp's tests and the models' docs, plus our own edge cases and
// malformed outputs), non-streaming and streamed in every chunking.
#include "toolcall/tool_call_parser.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "toolcall/output_delta.h"
#include "toolcall/scan_util.h"
#include "toolcall/tool_call_stream.h"

namespace kvserve::toolcall {
namespace {

using Json = nlohmann::ordered_json;

struct RecordedCase {
  std::string parser;
  std::string name;
  std::string output;
  std::string content;
  std::vector<std::pair<std::string, Json>> tool_calls;
};

std::vector<RecordedCase> LoadCases(const std::string& parser) {
  std::filesystem::path path = std::filesystem::path(KVSERVE_TESTDATA_DIR) / "tool_calls" / (parser + ".json");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  Json doc = Json::parse(buffer.str());
  std::vector<RecordedCase> cases;
  for (const Json& c : doc["cases"]) {
    RecordedCase rc;
    rc.parser = parser;
    rc.name = c["name"];
    rc.output = c["output"];
    rc.content = c["content"];
    for (const Json& call : c["tool_calls"]) rc.tool_calls.emplace_back(call["name"], call["arguments"]);
    cases.push_back(std::move(rc));
  }
  return cases;
}

std::vector<RecordedCase> AllCases() {
  std::vector<RecordedCase> all;
  for (const std::string& name : ToolCallParserNames()) {
    for (RecordedCase& c : LoadCases(name)) all.push_back(std::move(c));
  }
  return all;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Streams `text` in pieces of the given sizes (the last piece takes the rest) and checks the
// shape of the deltas: starts before fragments, indices in order, content never split inside
// a UTF-8 sequence when the input pieces are whole characters.
ChatOutput Stream(const ToolCallParser& parser, std::string_view text, const std::vector<size_t>& piece_sizes,
                  uint64_t seed, bool check_utf8) {
  ToolCallIdGenerator ids(seed);
  ToolCallStream stream(&parser, &ids);
  std::vector<OutputDelta> deltas;
  size_t pos = 0;
  for (size_t i = 0; pos < text.size(); ++i) {
    size_t n = i < piece_sizes.size() ? piece_sizes[i] : text.size() - pos;
    n = std::min(n, text.size() - pos);
    stream.Feed(text.substr(pos, n), &deltas);
    pos += n;
  }
  stream.Finish(&deltas);
  ChatOutput message;
  int last_started = -1;
  for (const OutputDelta& d : deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::kContent:
        EXPECT_FALSE(d.text.empty());
        if (check_utf8) {
          EXPECT_TRUE(IsValidUtf8(d.text)) << "content delta splits a character";
        }
        break;
      case OutputDelta::Kind::kToolCallStart:
        EXPECT_EQ(d.tool_call_index, last_started + 1);
        EXPECT_FALSE(d.id.empty());
        EXPECT_FALSE(d.name.empty());
        last_started = d.tool_call_index;
        break;
      case OutputDelta::Kind::kToolCallArguments:
        EXPECT_EQ(d.tool_call_index, last_started);
        break;
      case OutputDelta::Kind::kReasoning:
        ADD_FAILURE() << "reasoning from a tool-call stream";
    }
    AccumulateDelta(d, &message);
  }
  EXPECT_EQ(stream.num_tool_calls(), static_cast<int>(message.tool_calls.size()));
  return message;
}

void ExpectSame(const ChatOutput& streamed, const ParsedToolCalls& whole, const std::string& what) {
  EXPECT_EQ(streamed.content, whole.content) << what;
  ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << what;
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    EXPECT_EQ(streamed.tool_calls[i].id, whole.tool_calls[i].id) << what;
    EXPECT_EQ(streamed.tool_calls[i].name, whole.tool_calls[i].name) << what;
    EXPECT_EQ(streamed.tool_calls[i].arguments, whole.tool_calls[i].arguments) << what;
  }
}

// Piece sizes of whole UTF-8 characters, one character each.
std::vector<size_t> CharacterPieces(std::string_view text) {
  std::vector<size_t> sizes;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    sizes.push_back(std::min(n, text.size() - i));
    i += n;
  }
  return sizes;
}

class RecordedOutputTest : public testing::TestWithParam<std::string> {};

TEST_P(RecordedOutputTest, NonStreamingMatchesRecordedExpectation) {
  auto parser = CreateToolCallParser(GetParam());
  ASSERT_TRUE(parser.ok());
  std::vector<RecordedCase> cases = LoadCases(GetParam());
  ASSERT_GE(cases.size(), 8u);
  bool has_malformed = false;
  for (const RecordedCase& c : cases) {
    SCOPED_TRACE(GetParam() + "/" + c.name);
    if (c.name.find("malformed") != std::string::npos) has_malformed = true;
    ToolCallIdGenerator ids(7);
    ParsedToolCalls parsed = (*parser)->Parse(c.output, ids);
    EXPECT_EQ(parsed.content, c.content);
    ASSERT_EQ(parsed.tool_calls.size(), c.tool_calls.size());
    for (size_t i = 0; i < c.tool_calls.size(); ++i) {
      const ToolCall& call = parsed.tool_calls[i];
      EXPECT_EQ(call.name, c.tool_calls[i].first);
      // Compact JSON, key order as written, non-ASCII unescaped: what OpenAI returns.
      EXPECT_EQ(call.arguments, c.tool_calls[i].second.dump(-1, ' ', false));
      if (GetParam() == "mistral") {
        EXPECT_EQ(call.id.size(), 9u);
      } else {
        EXPECT_EQ(call.id.size(), 29u);
        EXPECT_EQ(call.id.substr(0, 5), "call_");
      }
      for (char ch : call.id.substr(GetParam() == "mistral" ? 0 : 5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
    }
  }
  EXPECT_TRUE(has_malformed) << "each format needs malformed outputs";
}

TEST_P(RecordedOutputTest, StreamingEqualsNonStreamingInEveryChunking) {
  auto parser = CreateToolCallParser(GetParam());
  ASSERT_TRUE(parser.ok());
  std::mt19937 rng(17);
  for (const RecordedCase& c : LoadCases(GetParam())) {
    SCOPED_TRACE(GetParam() + "/" + c.name);
    ToolCallIdGenerator ids(99);
    ParsedToolCalls whole = (*parser)->Parse(c.output, ids);
    ExpectSame(Stream(**parser, c.output, CharacterPieces(c.output), 99, true), whole, "one character at a time");
    ExpectSame(Stream(**parser, c.output, std::vector<size_t>(c.output.size(), 1), 99, false), whole,
               "one byte at a time");
    ExpectSame(Stream(**parser, c.output, {}, 99, true), whole, "all at once");
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> sizes;
      std::uniform_int_distribution<size_t> size(1, 12);
      for (size_t total = 0; total < c.output.size();) sizes.push_back(size(rng)), total += sizes.back();
      ExpectSame(Stream(**parser, c.output, sizes, 99, false), whole, "random pieces, trial " + std::to_string(trial));
    }
  }
}

// Cut off anywhere (max_tokens), every output still parses, streamed or not, to the same thing.
TEST_P(RecordedOutputTest, EveryPrefixStreamsLikeItParses) {
  auto parser = CreateToolCallParser(GetParam());
  ASSERT_TRUE(parser.ok());
  std::mt19937 rng(5);
  for (const RecordedCase& c : LoadCases(GetParam())) {
    for (size_t n = 0; n <= c.output.size(); ++n) {
      std::string prefix = c.output.substr(0, n);
      ToolCallIdGenerator ids(3);
      ParsedToolCalls whole = (*parser)->Parse(prefix, ids);
      std::vector<size_t> sizes;
      std::uniform_int_distribution<size_t> size(1, 6);
      for (size_t total = 0; total < prefix.size();) sizes.push_back(size(rng)), total += sizes.back();
      ExpectSame(Stream(**parser, prefix, sizes, 3, false), whole, c.name + " cut at " + std::to_string(n));
      if (HasFailure()) return;
    }
  }
}

// Any parser on any format's output: never crashes, and streaming still equals parsing.
TEST_P(RecordedOutputTest, OtherFormatsOutputsAreSafe) {
  auto parser = CreateToolCallParser(GetParam());
  ASSERT_TRUE(parser.ok());
  for (const RecordedCase& c : AllCases()) {
    ToolCallIdGenerator ids(11);
    ParsedToolCalls whole = (*parser)->Parse(c.output, ids);
    ExpectSame(Stream(**parser, c.output, CharacterPieces(c.output), 11, true), whole, c.parser + "/" + c.name);
  }
}

// Random outputs spliced from every format's markers, JSON pieces, whitespace and non-ASCII
// text: any parser, any chunking, the stream equals the parse, and every call's arguments are
// a JSON object.
TEST_P(RecordedOutputTest, RandomSplicedOutputsStreamLikeTheyParse) {
  auto parser = CreateToolCallParser(GetParam());
  ASSERT_TRUE(parser.ok());
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "<tool_", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
      "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>", "<｜tool", "function", ">>>", "all\n", "python\n", "<function=f>", "</function>",
      "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "Action: ```json\n", "```", "```json\n",
      "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "{\"name\": \"g\", \"parameters\": {\"s\": \"x}\"}}",
      "[{\"name\": \"h\", \"arguments\": {}}]", "[{\"tool_name\": \"t\", \"parameters\": {\"q\": [1, 2]}}]",
      "{\"city\": \"Paris\"}", "{", "}", "[", "]", "\"", "\\", ";", ":", ",", "\n", " ", "  \n", "get_weather",
      "brave_search.call(query=\"x\")", "é", "日本", "🚀", "text", "{\"name\"", "\"arguments\": ", "name\n",
      // whole calls of each format
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"k\": \"</tool_call>\"}}</tool_call>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜>",
      "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
      "<|START_ACTION|>[{\"tool_name\": \"t\", \"parameters\": {}}]<|END_ACTION|>",
      "Action: ```json\n[{\"tool_name\": \"u\", \"parameters\": {\"q\": 1}}]\n```",
      ">>>f\n{\"a\": 1}", "<function=f>{}</function>", "[TOOL_CALLS]f[ARGS]{\"b\": 2}",
      "[TOOL_CALLS][{\"name\": \"m\", \"arguments\": {}}]",
      "<tool_call>{'name': 'p', 'arguments': {'x': '}', 'y': True}}</tool_call>", "{'", "'",
  };
  std::mt19937 rng(std::hash<std::string>()(GetParam()));
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> length(1, 24);
  std::uniform_int_distribution<size_t> chunk(1, 10);
  int num_with_calls = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string text;
    for (int i = length(rng); i > 0; --i) text += pieces[pick(rng)];
    ToolCallIdGenerator ids(trial);
    ParsedToolCalls whole = (*parser)->Parse(text, ids);
    if (!whole.tool_calls.empty()) ++num_with_calls;
    for (const ToolCall& call : whole.tool_calls) {
      std::optional<Json> args = ParseJson(call.arguments);
      ASSERT_TRUE(args && args->is_object()) << call.arguments;
      EXPECT_EQ(CompactJson(*args), call.arguments);
    }
    std::vector<size_t> sizes;
    for (size_t total = 0; total < text.size();) sizes.push_back(chunk(rng)), total += sizes.back();
    ExpectSame(Stream(**parser, text, sizes, trial, false), whole, text);
    ExpectSame(Stream(**parser, text, std::vector<size_t>(text.size(), 1), trial, false), whole, text);
    if (HasFailure()) return;
  }
  EXPECT_GT(num_with_calls, 50) << "the splices should form some calls";
}

INSTANTIATE_TEST_SUITE_P(AllFormats, RecordedOutputTest, testing::ValuesIn(ToolCallParserNames()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ToolCallParserTest, UnknownNameListsTheChoices) {
  auto parser = CreateToolCallParser("pythonic_v9");
  ASSERT_FALSE(parser.ok());
  EXPECT_EQ(parser.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parser.status().message().find("hermes"), std::string::npos);
  EXPECT_NE(parser.status().message().find("command_r"), std::string::npos);
  for (const std::string& name : ToolCallParserNames()) {
    auto p = CreateToolCallParser(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
}

TEST(ToolCallParserTest, IdsAreSeededAndShaped) {
  ToolCallIdGenerator a(1);
  ToolCallIdGenerator b(1);
  std::string id = a.Next(ToolCallIdStyle::kOpenAi);
  EXPECT_EQ(id, b.Next(ToolCallIdStyle::kOpenAi));
  EXPECT_EQ(id.size(), 29u);
  EXPECT_NE(id, a.Next(ToolCallIdStyle::kOpenAi));
  EXPECT_EQ(a.Next(ToolCallIdStyle::kMistral).size(), 9u);
}

TEST(ToolCallParserTest, DeepJsonNestingIsContentNotACrash) {
  auto parser = CreateToolCallParser("hermes");
  ASSERT_TRUE(parser.ok());
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(100000, '[') + std::string(100000, ']') +
                     "}</tool_call>";
  ToolCallIdGenerator ids(1);
  ParsedToolCalls parsed = (*parser)->Parse(deep, ids);
  EXPECT_TRUE(parsed.tool_calls.empty());
  EXPECT_EQ(parsed.content, deep);
}

TEST(ToolCallParserTest, InvalidUtf8InArgumentsIsContent) {
  auto parser = CreateToolCallParser("hermes");
  ASSERT_TRUE(parser.ok());
  std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\xff\xfe\"}}</tool_call>";
  ToolCallIdGenerator ids(1);
  ParsedToolCalls parsed = (*parser)->Parse(text, ids);
  EXPECT_TRUE(parsed.tool_calls.empty());
  EXPECT_EQ(parsed.content, text);
}

TEST(ToolCallParserTest, ContentStreamsBeforeTheCallCloses) {
  auto parser = CreateToolCallParser("hermes");
  ASSERT_TRUE(parser.ok());
  ToolCallIdGenerator ids(1);
  ToolCallStream stream(parser->get(), &ids);
  std::vector<OutputDelta> deltas;
  stream.Feed("Let me check. <tool", &deltas);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].text, "Let me check.");  // the space and "<tool" wait
  deltas.clear();
  stream.Feed("_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": ", &deltas);
  EXPECT_TRUE(deltas.empty());
  stream.Feed("\"Paris\"}}</tool_call>", &deltas);
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[0].kind, OutputDelta::Kind::kToolCallStart);
  EXPECT_EQ(deltas[0].name, "get_weather");
  EXPECT_EQ(deltas[1].text, "{\"city\":\"Paris\"}");
  nlohmann::ordered_json start = OpenAiDeltaJson(deltas[0]);
  EXPECT_EQ(start["tool_calls"][0]["type"], "function");
  EXPECT_EQ(start["tool_calls"][0]["function"]["arguments"], "");
  EXPECT_EQ(OpenAiDeltaJson(deltas[1]).dump(), "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}");
  deltas.clear();
  stream.Finish(&deltas);
  EXPECT_TRUE(deltas.empty());
}

TEST(ToolCallParserTest, MessageJsonHasNullContentWithCalls) {
  ChatOutput message;
  message.tool_calls.push_back(ToolCall{"call_1", "f", "{}"});
  nlohmann::ordered_json j = OpenAiMessageJson(message);
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "f");
  EXPECT_FALSE(j.contains("reasoning_content"));
}

TEST(ScanUtilTest, PythonKwargs) {
  PyCallArgs a = ParsePythonKwargs("query='it\\'s', n=-2.5, ok=False, none=None, l=[1, \"x\"])", 0);
  ASSERT_EQ(a.status, PyCallStatus::kOk);
  EXPECT_EQ(a.arguments.dump(), "{\"query\":\"it's\",\"n\":-2.5,\"ok\":false,\"none\":null,\"l\":[1,\"x\"]}");
  EXPECT_EQ(ParsePythonKwargs("query=\"unfinished", 0).status, PyCallStatus::kIncomplete);
  EXPECT_EQ(ParsePythonKwargs("query=bogus)", 0).status, PyCallStatus::kInvalid);
  EXPECT_EQ(ParsePythonKwargs(")", 0).status, PyCallStatus::kOk);
}

TEST(ScanUtilTest, JsonScanAndUtf8) {
  EXPECT_EQ(ScanJsonValue("{\"a\": \"}\"} tail", 0).end, 10u);
  EXPECT_EQ(ScanJsonValue("{\"a\": [}", 0).status, JsonScanStatus::kInvalid);
  EXPECT_EQ(ScanJsonValue("{\"a\": \"\\", 0).status, JsonScanStatus::kIncomplete);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe6\x97"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe6\x97\xa5"), 5u);
  EXPECT_EQ(PartialMarkerStart("text <tool_c", 0, {"<tool_call>"}), 5u);
  EXPECT_EQ(PartialMarkerStart("text", 0, {"<tool_call>"}), 4u);
}

}  // namespace
}  // namespace kvserve::toolcall
