#include "loadgen/sse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kvserve::loadgen {
namespace {

std::vector<SseEvent> ParseInPieces(const std::string& stream, const std::vector<size_t>& cuts) {
  std::vector<SseEvent> events;
  SseParser parser([&](const SseEvent& e) { events.push_back(e); });
  size_t prev = 0;
  for (size_t cut : cuts) {
    parser.Feed(std::string_view(stream).substr(prev, cut - prev));
    prev = cut;
  }
  parser.Feed(std::string_view(stream).substr(prev));
  parser.Finish();
  return events;
}

const char kStream[] =
    ": keep-alive comment\n"
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"lo \\u00e9\"}]}\r\n\r\n"
    "event: ping\r"
    "data: line one\r"
    "data: line two\r\r"
    "id: 7\n"
    "data:{\"usage\":{\"prompt_tokens\":3}}\n\n"
    "error: {\"message\":\"boom\"}\n\n"
    "data: [DONE]\n\n";

void ExpectAll(const std::vector<SseEvent>& e) {
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0].type, "message");
  EXPECT_EQ(e[0].data, "{\"choices\":[{\"text\":\"Hel\"}]}");
  EXPECT_EQ(e[1].data, "{\"choices\":[{\"text\":\"lo \\u00e9\"}]}");
  EXPECT_EQ(e[2].type, "ping");
  EXPECT_EQ(e[2].data, "line one\nline two");
  EXPECT_EQ(e[3].type, "message");
  EXPECT_EQ(e[3].data, "{\"usage\":{\"prompt_tokens\":3}}");
  EXPECT_EQ(e[4].type, "error");
  EXPECT_EQ(e[4].data, "{\"message\":\"boom\"}");
  EXPECT_EQ(e[5].data, "[DONE]");
}

TEST(SseParser, WholeStream) { ExpectAll(ParseInPieces(kStream, {})); }

TEST(SseParser, EverySingleSplitPoint) {
  const std::string s = kStream;
  for (size_t cut = 1; cut < s.size(); ++cut) {
    SCOPED_TRACE(cut);
    ExpectAll(ParseInPieces(s, {cut}));
  }
}

TEST(SseParser, ByteByByteAndRandomPieces) {
  const std::string s = kStream;
  std::vector<size_t> every;
  for (size_t i = 1; i < s.size(); ++i) every.push_back(i);
  ExpectAll(ParseInPieces(s, every));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts;
    size_t pos = 0;
    while (true) {
      pos += 1 + rng() % 9;
      if (pos >= s.size()) break;
      cuts.push_back(pos);
    }
    ExpectAll(ParseInPieces(s, cuts));
  }
}

TEST(SseParser, FinishFlushesAnUnterminatedEvent) {
  auto e = ParseInPieces("data: a\n\ndata: tail", {});
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].data, "tail");
  EXPECT_TRUE(ParseInPieces("\n\n: only a comment\n\n", {}).empty());
}

}  // namespace
}  // namespace kvserve::loadgen
