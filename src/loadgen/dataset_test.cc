#include "loadgen/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>

#include "base/testing/test_dependency.h"

namespace kvserve::loadgen {
namespace {

std::string AssetPath(const std::string& rel) { return std::string(KVSERVE_ASSETS_DIR) + "/" + rel; }

TEST(RandomDataset, ExactLengthsWithoutRangeRatio) {
  DatasetOptions o;
  o.num_prompts = 20;
  o.random_input_len = 37;
  o.random_output_len = 5;
  auto r = BuildDataset(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 20u);
  for (const BenchRequest& q : *r) {
    EXPECT_EQ(q.prompt_token_ids.size(), 37u);
    EXPECT_EQ(q.prompt_len, 37);
    EXPECT_EQ(q.output_len, 5);
    EXPECT_TRUE(q.fixed_output_len);
    EXPECT_LT(q.trace_arrival_ms, 0);
    for (int32_t id : q.prompt_token_ids) {
      EXPECT_GE(id, o.vocab_begin);
      EXPECT_LT(id, o.vocab_end);
    }
  }
  // Different prompts, same again with the same seed.
  EXPECT_NE((*r)[0].prompt_token_ids, (*r)[1].prompt_token_ids);
  auto again = BuildDataset(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[7].prompt_token_ids, (*r)[7].prompt_token_ids);
  o.seed = 1;
  auto other = BuildDataset(o);
  EXPECT_NE((*other)[0].prompt_token_ids, (*r)[0].prompt_token_ids);
}

TEST(RandomDataset, RangeRatioAndPrefix) {
  DatasetOptions o;
  o.num_prompts = 200;
  o.random_input_len = 100;
  o.random_output_len = 10;
  o.random_range_ratio = 0.5;
  o.random_prefix_len = 8;
  o.vocab_begin = 5;
  o.vocab_end = 9;
  auto r = BuildDataset(o);
  ASSERT_TRUE(r.ok());
  std::set<int64_t> lens;
  for (const BenchRequest& q : *r) {
    EXPECT_GE(q.prompt_len, 8 + 50);
    EXPECT_LE(q.prompt_len, 8 + 150);
    EXPECT_EQ(q.prompt_len, static_cast<int64_t>(q.prompt_token_ids.size()));
    EXPECT_GE(q.output_len, 5);
    EXPECT_LE(q.output_len, 15);
    EXPECT_TRUE(std::equal(q.prompt_token_ids.begin(), q.prompt_token_ids.begin() + 8,
                           (*r)[0].prompt_token_ids.begin()));
    for (int32_t id : q.prompt_token_ids) EXPECT_TRUE(id >= 5 && id < 9);
    lens.insert(q.prompt_len);
  }
  EXPECT_GT(lens.size(), 20u);  // lengths actually vary
}

TEST(RandomDataset, RejectsBadOptions) {
  DatasetOptions o;
  o.random_range_ratio = 1.0;
  EXPECT_EQ(BuildDataset(o).status().code(), StatusCode::kInvalidArgument);
  o = DatasetOptions();
  o.random_input_len = 0;
  EXPECT_EQ(BuildDataset(o).status().code(), StatusCode::kInvalidArgument);
  o = DatasetOptions();
  o.vocab_begin = 10;
  o.vocab_end = 10;
  EXPECT_EQ(BuildDataset(o).status().code(), StatusCode::kInvalidArgument);
  o = DatasetOptions();
  o.name = "nope";
  EXPECT_NE(BuildDataset(o).status().message().find("nope"), std::string::npos);
  o = DatasetOptions();
  o.name = "sharegpt";
  EXPECT_NE(BuildDataset(o).status().message().find("--dataset-path"), std::string::npos);
  o.dataset_path = "/nonexistent/file.json";
  EXPECT_EQ(BuildDataset(o).status().code(), StatusCode::kNotFound);
}

TEST(TextPrompts, SameIdsSameWords) {
  DatasetOptions o;
  o.num_prompts = 3;
  o.random_input_len = 16;
  o.random_prefix_len = 10;
  o.prompt_format = PromptFormat::kText;
  auto r = BuildDataset(o);
  ASSERT_TRUE(r.ok());
  for (const BenchRequest& q : *r) {
    EXPECT_TRUE(q.prompt_token_ids.empty());
    EXPECT_EQ(std::count(q.prompt_text.begin(), q.prompt_text.end(), ' '), 25);  // 26 words
    EXPECT_EQ(q.prompt_len, 26);
  }
  // The shared 10-token prefix is a shared text prefix.
  const std::string& a = (*r)[0].prompt_text;
  const std::string& b = (*r)[1].prompt_text;
  size_t words = 0, i = 0;
  for (; i < a.size() && words < 10; ++i) {
    if (a[i] == ' ') ++words;
  }
  EXPECT_EQ(a.substr(0, i), b.substr(0, i));
  EXPECT_EQ(TokenIdsToText({1, 2, 1}), TokenIdsToText({1, 2, 1}));
}

TEST(SharedPrefixDataset, GroupsShareTheirSystemPromptExactly) {
  DatasetOptions o;
  o.name = "shared-prefix";
  o.sp_num_groups = 4;
  o.sp_prompts_per_group = 5;
  o.sp_system_prompt_len = 64;
  o.sp_question_len = 16;
  o.sp_output_len = 7;
  auto r = BuildDataset(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 20u);
  std::map<std::vector<int32_t>, int> groups;
  std::set<std::vector<int32_t>> questions;
  for (const BenchRequest& q : *r) {
    ASSERT_EQ(q.prompt_token_ids.size(), 80u);
    EXPECT_EQ(q.output_len, 7);
    EXPECT_TRUE(q.fixed_output_len);
    ++groups[std::vector<int32_t>(q.prompt_token_ids.begin(), q.prompt_token_ids.begin() + 64)];
    questions.insert(std::vector<int32_t>(q.prompt_token_ids.begin() + 64, q.prompt_token_ids.end()));
  }
  ASSERT_EQ(groups.size(), 4u);
  for (const auto& [prefix, count] : groups) EXPECT_EQ(count, 5);
  EXPECT_EQ(questions.size(), 20u);
  // Shuffled: the first five are not all one group (with this seed).
  std::set<std::vector<int32_t>> first5;
  for (int i = 0; i < 5; ++i) {
    first5.insert(std::vector<int32_t>((*r)[i].prompt_token_ids.begin(), (*r)[i].prompt_token_ids.begin() + 64));
  }
  EXPECT_GT(first5.size(), 1u);
  // --num-prompts takes the first N.
  o.num_prompts = 6;
  auto few = BuildDataset(o);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(few->size(), 6u);
}

TEST(MooncakeTrace, EqualHashIdsGiveEqualBlocks) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 10, \"hash_ids\": [1, 2, 3]}\n"
      "\n"
      "{\"timestamp\": 500, \"input_length\": 1030, \"output_length\": 0, \"hash_ids\": [1, 2, 9]}\n"
      "{\"timestamp\": 250, \"input_length\": 100, \"output_length\": 3, \"hash_ids\": [7]}\n";
  auto rows = ParseMooncakeTrace(text, kMooncakeTraceBlockTokens);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[1].timestamp_ms, 500);
  EXPECT_EQ((*rows)[1].hash_ids, (std::vector<int64_t>{1, 2, 9}));

  const int64_t h = 16;
  auto a = MooncakePromptTokens((*rows)[0], h, 100, 10000);
  auto b = MooncakePromptTokens((*rows)[1], h, 100, 10000);
  EXPECT_EQ(a.size(), static_cast<size_t>((1200 * h + 511) / 512));  // 38
  EXPECT_EQ(b.size(), static_cast<size_t>((1030 * h + 511) / 512));  // 33
  // Blocks 0 and 1 (hash ids 1, 2) equal; block 2 differs (3 vs 9).
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 2 * h, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 2 * h, a.begin() + 33, b.begin() + 2 * h));
  // Within a block, tokens vary.
  EXPECT_GT(std::set<int32_t>(a.begin(), a.begin() + h).size(), 1u);
  // Same hash id at a different request: same tokens.
  TraceRequest solo{0, 512, 1, {2}};
  auto c = MooncakePromptTokens(solo, h, 100, 10000);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin() + h));

  // Errors name the line (the parser's own tests: trace/trace_test.cc).
  auto bad = ParseMooncakeTrace(
      "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [0]}\n{oops}\n",
      kMooncakeTraceBlockTokens);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  auto missing = ParseMooncakeTrace("{\"timestamp\": 0, \"output_length\": 1}\n",
                                           kMooncakeTraceBlockTokens);
  EXPECT_FALSE(missing.ok());
  // Every row needs hash ids that cover its input length.
  EXPECT_FALSE(ParseMooncakeTrace(
                   "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n",
                   kMooncakeTraceBlockTokens)
                   .ok());
}

TEST(AzureTrace, ParsesTimestampsRelativeToTheFirstRow) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
      "2023-11-16 18:15:46.6805900,374,44\r\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n"
      "2023-11-17 00:00:00.0000000,10,0\r\n";
  auto rows = ParseAzureTrace(text);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_DOUBLE_EQ((*rows)[0].timestamp_ms, 0.0);
  EXPECT_NEAR((*rows)[1].timestamp_ms, 4314.579, 1e-3);
  EXPECT_NEAR((*rows)[2].timestamp_ms, (5 * 3600 + 44 * 60 + 13.31941) * 1000.0, 1e-2);
  EXPECT_EQ((*rows)[1].input_tokens, 396);
  EXPECT_EQ((*rows)[1].output_tokens, 109);
  EXPECT_FALSE(ParseAzureTrace("a,b,c\n1,2,3\n").ok());
  auto bad = ParseAzureTrace("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
}

TEST(Arrivals, PoissonMeanIntervalAndInfinity) {
  std::vector<BenchRequest> reqs(4000);
  ArrivalOptions o;
  o.request_rate_per_s = 20.0;
  o.seed = 42;
  std::vector<double> t = ComputeArrivalTimes(reqs, o);
  ASSERT_EQ(t.size(), reqs.size());
  EXPECT_EQ(t[0], 0.0);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  const double mean_gap = t.back() / static_cast<double>(t.size() - 1);
  EXPECT_NEAR(mean_gap, 0.05, 0.05 * 0.05);  // within 5 %
  // Exponential gaps: the standard deviation is about the mean.
  double sq = 0;
  for (size_t i = 1; i < t.size(); ++i) sq += (t[i] - t[i - 1] - mean_gap) * (t[i] - t[i - 1] - mean_gap);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(t.size() - 1)), 0.05, 0.05 * 0.1);
  EXPECT_EQ(ComputeArrivalTimes(reqs, o), t);  // same seed, same schedule

  o.request_rate_per_s = std::numeric_limits<double>::infinity();
  for (double x : ComputeArrivalTimes(reqs, o)) EXPECT_EQ(x, 0.0);
  o.request_rate_per_s.reset();
  for (double x : ComputeArrivalTimes(reqs, o)) EXPECT_EQ(x, 0.0);
}

TEST(Arrivals, TraceTimestampsScaled) {
  std::vector<BenchRequest> reqs(3);
  reqs[0].trace_arrival_ms = 1000;
  reqs[1].trace_arrival_ms = 1500;
  reqs[2].trace_arrival_ms = 3000;
  ArrivalOptions o;
  o.trace_time_scale = 0.5;
  EXPECT_EQ(ComputeArrivalTimes(reqs, o), (std::vector<double>{0.0, 0.25, 1.0}));
  o.request_rate_per_s = std::numeric_limits<double>::infinity();  // the rate wins
  EXPECT_EQ(ComputeArrivalTimes(reqs, o), (std::vector<double>{0.0, 0.0, 0.0}));
}

TEST(RealTraces, ParseTheSharedAssets) {
  const std::string mooncake = AssetPath("traces/mooncake/conversation_trace.jsonl");
  const std::string azure = AssetPath("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv");
  const std::string sharegpt = AssetPath("traces/sharegpt/ShareGPT_V3_filtered_1000.json");
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(mooncake) && std::filesystem::exists(azure) &&
                             std::filesystem::exists(sharegpt),
                         "the shared trace assets under " << KVSERVE_ASSETS_DIR);
  DatasetOptions o;
  o.name = "mooncake";
  o.dataset_path = mooncake;
  o.tokens_per_hash_id = 4;  // keeps the prompts small
  auto m = BuildDataset(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->size(), 10000u);
  EXPECT_EQ((*m)[0].trace_arrival_ms, 0.0);
  EXPECT_EQ((*m)[0].prompt_len, (6758 * 4 + 511) / 512);
  // The first three rows share hash id 0: their first block is equal.
  EXPECT_TRUE(std::equal((*m)[0].prompt_token_ids.begin(), (*m)[0].prompt_token_ids.begin() + 4,
                         (*m)[1].prompt_token_ids.begin()));
  EXPECT_GT(m->back().trace_arrival_ms, 0.0);

  o.name = "azure";
  o.dataset_path = azure;
  o.num_prompts = 100;
  auto a = BuildDataset(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 100u);
  EXPECT_EQ((*a)[0].prompt_len, 374);
  EXPECT_EQ((*a)[0].output_len, 44);
  EXPECT_NEAR((*a)[1].trace_arrival_ms, 4314.579, 1e-3);
  std::ifstream in(azure);
  const std::string azure_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto full = ParseAzureTrace(azure_text);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->size(), 19366u);  // the last line has no newline

  o.name = "sharegpt";
  o.dataset_path = sharegpt;
  o.num_prompts = 0;
  auto s = BuildDataset(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->size(), 1000u);
  for (const BenchRequest& q : *s) {
    EXPECT_TRUE(q.prompt_token_ids.empty());
    EXPECT_FALSE(q.prompt_text.empty());
    EXPECT_EQ(q.output_len, 256);  // no replies in this file: the default
    EXPECT_TRUE(q.fixed_output_len);
  }
}

TEST(ShareGpt, UsesTheReplyLengthUnlessTold) {
  const std::string text = R"([
    {"id": "a", "conversations": [{"from": "human", "value": "Hello there, how are you?"},
                                  {"from": "gpt", "value": "Fine, thanks. And you? All good here."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
    {"id": "c", "conversations": []}
  ])";
  DatasetOptions o;
  auto r = ParseShareGptDataset(text, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].prompt_text, "Hello there, how are you?");
  EXPECT_EQ((*r)[0].output_len, EstimateTextTokens("Fine, thanks. And you? All good here."));
  EXPECT_FALSE((*r)[0].fixed_output_len);
  o.sharegpt_output_len = 9;
  r = ParseShareGptDataset(text, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].output_len, 9);
  EXPECT_TRUE((*r)[0].fixed_output_len);
  EXPECT_FALSE(ParseShareGptDataset("{not json", o).ok());
  EXPECT_FALSE(ParseShareGptDataset("[]", o).ok());
}

}  // namespace
}  // namespace kvserve::loadgen

namespace kvserve::loadgen {
namespace {

TEST(Repeats, AboutTheFractionRepeatsEarlierRequestsDeterministically) {
  DatasetOptions o;
  o.num_prompts = 2000;
  o.random_input_len = 16;
  o.random_output_len = 4;
  o.repeat_fraction = 0.3;
  auto a = BuildDataset(o);
  auto b = BuildDataset(o);
  ASSERT_TRUE(a.ok() && b.ok());
  int repeats = 0;
  std::set<std::vector<int32_t>> seen;
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt_token_ids, (*b)[i].prompt_token_ids);
    repeats += !seen.insert((*a)[i].prompt_token_ids).second;
  }
  EXPECT_NEAR(repeats / 2000.0, 0.3, 0.04);
  o.repeat_fraction = 1.0;
  EXPECT_FALSE(BuildDataset(o).ok());
}

}  // namespace
}  // namespace kvserve::loadgen
