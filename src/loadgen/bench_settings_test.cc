#include "loadgen/bench_settings.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace kvserve::loadgen {
namespace {

TEST(BenchSettingsTest, ParseRequestRate) {
  for (const char* inf : {"inf", "Inf", "infinity"}) {
    auto r = ParseRequestRate(inf);
    ASSERT_TRUE(r.ok()) << inf;
    EXPECT_TRUE(std::isinf(*r));
  }
  auto r = ParseRequestRate("2.5");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2.5);
  for (const char* bad : {"0", "-1", "", "2x", "fast"}) {
    auto b = ParseRequestRate(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(b.status().message(),
              std::string("--request-rate must be a number > 0 or 'inf', got '") + bad + "'");
  }
}

TEST(BenchSettingsTest, DefaultsResolveToHostPortAndTokenIds) {
  BenchSettings s;
  s.seed = 9;
  s.max_concurrency = 4;
  auto r = ResolveBenchSettings(s);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->options.client.base_url, "http://127.0.0.1:8000");
  EXPECT_EQ(r->options.client.read_timeout_s, 600.0);
  EXPECT_EQ(r->options.body.endpoint, "/v1/completions");
  EXPECT_EQ(r->options.dataset_name, "random");
  EXPECT_FALSE(r->options.arrivals.request_rate_per_s.has_value());  // trace times, else inf
  EXPECT_EQ(r->options.arrivals.seed, 9u);
  EXPECT_EQ(r->options.max_concurrency, 4);
  EXPECT_EQ(r->dataset.seed, 9u);
  EXPECT_EQ(r->dataset.prompt_format, PromptFormat::kTokenIds);
  EXPECT_EQ(r->dataset.vocab_begin, 100);
  EXPECT_EQ(r->dataset.vocab_end, 10000);
}

TEST(BenchSettingsTest, ChatEndpointsTakeTextAndExplicitSettingsWin) {
  BenchSettings s;
  s.endpoint = "v1/chat/completions";
  s.base_url = "http://example:1234/prefix";
  s.request_rate = "3";
  s.request_rate_given = true;
  s.vocab_range = {5, 50};
  auto r = ResolveBenchSettings(s);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->options.body.endpoint, "/v1/chat/completions");
  EXPECT_EQ(r->options.client.base_url, "http://example:1234/prefix");
  EXPECT_EQ(r->dataset.prompt_format, PromptFormat::kText);
  EXPECT_EQ(r->options.arrivals.request_rate_per_s, 3.0);
  EXPECT_EQ(r->dataset.vocab_begin, 5);
  EXPECT_EQ(r->dataset.vocab_end, 50);
  s.prompt_format = "token-ids";
  auto bad = ResolveBenchSettings(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--prompt-format token-ids needs /v1/completions (chat messages are text)");
}

TEST(BenchSettingsTest, UserErrorsNameTheFlag) {
  auto message = [](const BenchSettings& s) {
    auto r = ResolveBenchSettings(s);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  BenchSettings s;
  s.vocab_range = {10, 10};
  EXPECT_EQ(message(s), "--vocab-range must be BEGIN END with 0 <= BEGIN < END");
  s.vocab_range = {-1, 10};
  EXPECT_EQ(message(s), "--vocab-range must be BEGIN END with 0 <= BEGIN < END");
  s.vocab_range = {0, int64_t{1} << 32};
  EXPECT_EQ(message(s), "--vocab-range must be BEGIN END with 0 <= BEGIN < END");
  s.vocab_range.clear();
  s.request_timeout_s = 0.0;
  EXPECT_EQ(message(s), "--request-timeout must be > 0");
  s.request_timeout_s = 1.0;
  s.request_rate = "0";
  s.request_rate_given = true;
  EXPECT_EQ(message(s), "--request-rate must be a number > 0 or 'inf', got '0'");
  s.request_rate_given = false;  // not given: the default is not parsed
  EXPECT_EQ(message(s), "ok");
}

TEST(BenchSettingsTest, DatasetJsonHasTheOptionsOfItsDatasetOnly) {
  DatasetOptions d;
  nlohmann::json j = DatasetToJson(d);
  EXPECT_EQ(j["name"], "random");
  EXPECT_FALSE(j.contains("path"));
  EXPECT_EQ(j["prompt_format"], "token-ids");
  EXPECT_EQ(j["vocab_range"], nlohmann::json({100, 10000}));
  EXPECT_EQ(j["random_input_len"], 1024);
  EXPECT_FALSE(j.contains("sp_num_groups"));
  d.name = "shared-prefix";
  j = DatasetToJson(d);
  EXPECT_EQ(j["sp_num_groups"], 64);
  EXPECT_FALSE(j.contains("random_input_len"));
  d.name = "mooncake";
  d.dataset_path = "trace.jsonl";
  d.prompt_format = PromptFormat::kText;
  j = DatasetToJson(d);
  EXPECT_EQ(j["path"], "trace.jsonl");
  EXPECT_EQ(j["prompt_format"], "text");
  EXPECT_EQ(j["tokens_per_hash_id"], d.tokens_per_hash_id);
  d.name = "sharegpt";
  EXPECT_TRUE(DatasetToJson(d).contains("sharegpt_output_len"));
}

TEST(BenchSettingsTest, ResultFileAddsTheSettings) {
  BenchSettings s;
  s.temperature = 0.5;
  s.extra_body = R"({"top_k": 3})";
  auto r = ResolveBenchSettings(s);
  ASSERT_TRUE(r.ok());
  BenchmarkResult result;
  const BenchmarkSummary summary = Summarize(result);
  nlohmann::json j = BenchResultFileJson(result, summary, s, *r, "2024-01-02T03:04:05Z");
  EXPECT_EQ(j["date"], "2024-01-02T03:04:05Z");
  EXPECT_EQ(j["dataset"], DatasetToJson(r->dataset));
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_EQ(j["ignore_eos_allowed"], true);
  EXPECT_EQ(j["extra_body"]["top_k"], 3);
  s.extra_body.clear();
  EXPECT_FALSE(BenchResultFileJson(result, summary, s, *r, "d").contains("extra_body"));
}

}  // namespace
}  // namespace kvserve::loadgen
