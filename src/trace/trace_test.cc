#include "trace/trace.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MooncakeTraceTest, ParsesMooncakeLines) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 6, \"output_length\": 2, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 27.4, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [5]}\r\n";
  auto trace = ParseMooncakeTrace(text, 4);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[0].input_tokens, 6);
  EXPECT_EQ((*trace)[0].output_tokens, 2);
  EXPECT_THAT((*trace)[0].hash_ids, ElementsAre(0, 1));
  EXPECT_DOUBLE_EQ((*trace)[1].timestamp_ms, 27.4);
  EXPECT_THAT((*trace)[1].hash_ids, ElementsAre(5));
}

TEST(MooncakeTraceTest, RejectsBadLinesNamingThem) {
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not json", "line 2: not a JSON object"},
      {"[1, 2]", "line 2: not a JSON object"},
      {"{\"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1]}", "missing \"timestamp\""},
      {"{\"timestamp\": \"0\", \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1]}",
       "\"timestamp\" is not a number"},
      {"{\"timestamp\": -5, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1]}",
       "\"timestamp\" is below 0"},
      {"{\"timestamp\": 0, \"output_length\": 0, \"hash_ids\": [1]}", "missing \"input_length\""},
      {"{\"timestamp\": 0, \"input_length\": 4.5, \"output_length\": 0, \"hash_ids\": [1]}",
       "\"input_length\" is not an integer"},
      {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 0, \"hash_ids\": [1]}",
       "\"input_length\" is below 1"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"hash_ids\": [1]}", "missing \"output_length\""},
      {"{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 0, \"hash_ids\": [1, 2]}",
       "input_length 9 does not fit 2 hash blocks of 4 tokens"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1, 2]}",
       "input_length 4 does not fit"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [-1]}",
       "non-negative"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1.5]}",
       "non-negative integers"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": []}",
       "non-empty"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0}", "non-empty"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": 3}",
       "non-empty array"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": -1, \"hash_ids\": [1]}",
       "\"output_length\" is below 0"},
      {"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1000000000]}",
       "too large for int32"},
  };
  const std::string good =
      "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1]}\n";
  for (const Case& c : cases) {
    auto trace = ParseMooncakeTrace(good + c.line + "\n", 4);
    ASSERT_FALSE(trace.ok()) << c.line;
    EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr(c.message));
    EXPECT_THAT(trace.status().message(), HasSubstr("line 2"));
  }
  // The largest id that fits: (2^31 - 4) / 4 * 4 + 3 = 2^31 - 1.
  EXPECT_TRUE(ParseMooncakeTrace(
                  "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": "
                  "[536870911]}\n",
                  4)
                  .ok());
  EXPECT_FALSE(ParseMooncakeTrace("\n\n", 4).ok());
  EXPECT_FALSE(ParseMooncakeTrace(good, 0).ok());
  EXPECT_EQ(LoadMooncakeTrace("/nonexistent/trace.jsonl", 4).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve
