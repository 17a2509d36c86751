#include "loadgen/metrics.h"

#include <gtest/gtest.h>

namespace kvserve::loadgen {
namespace {

TEST(LatencyStats, MeanMedianStd) {
  LatencyStats s = ComputeLatencyStats({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.count, 8);
  EXPECT_DOUBLE_EQ(s.mean_ms, 5.0);
  EXPECT_DOUBLE_EQ(s.std_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.median_ms, 4.5);
  EXPECT_DOUBLE_EQ(s.min_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 9.0);
  EXPECT_EQ(ComputeLatencyStats({}).count, 0);
}

TEST(Prometheus, SumsSeriesAndFindsPrefixCounters) {
  const std::string text =
      "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.\n"
      "# TYPE vllm:prefix_cache_queries_total counter\n"
      "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m{x}\\\"y\"} 100.0\n"
      "vllm:prefix_cache_queries_total{engine=\"1\",model_name=\"m\"} 50\n"
      "vllm:prefix_cache_queries_created{engine=\"0\"} 1.7e9\n"
      "vllm:prefix_cache_hits_total{engine=\"0\"} 60 1700000000000\n"
      "vllm:prefix_cache_hits_total{engine=\"1\"} 15\n"
      "garbage line without value\n"
      "up 1\n";
  auto series = SumPrometheusSeries(text);
  EXPECT_DOUBLE_EQ(series["vllm:prefix_cache_queries_total"], 150.0);
  EXPECT_DOUBLE_EQ(series["up"], 1.0);
  auto c = ExtractPrefixCacheCounters(text);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->metric_prefix, "vllm:");
  EXPECT_DOUBLE_EQ(c->queries_tokens, 150.0);
  EXPECT_DOUBLE_EQ(c->hits_tokens, 75.0);

  auto k = ExtractPrefixCacheCounters(
      "kvserve:prefix_cache_queries_total 10\nkvserve:prefix_cache_hits_total 4\n");
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->metric_prefix, "kvserve:");
  auto old = ExtractPrefixCacheCounters("vllm:prefix_cache_queries 8\nvllm:prefix_cache_hits 2\n");
  ASSERT_TRUE(old.has_value());
  EXPECT_DOUBLE_EQ(old->hits_tokens, 2.0);
  // llama.cpp: no such counters.
  EXPECT_FALSE(ExtractPrefixCacheCounters("llamacpp:prompt_tokens_total 5\n").has_value());
}

TEST(Summarize, VllmDefinitions) {
  BenchmarkResult r;
  r.duration_s = 2.0;
  RequestResult a;
  a.success = true;
  a.ttft_ms = 100;
  a.e2e_ms = 400;
  a.output_tokens = 4;
  a.prompt_tokens = 10;
  a.itl_ms = {100, 100, 100};
  RequestResult b = a;
  b.ttft_ms = 300;
  b.e2e_ms = 300;
  b.output_tokens = 1;  // no TPOT
  b.prompt_tokens = -1;
  b.expected_prompt_len = 7;
  b.itl_ms = {};
  RequestResult c;
  c.success = false;
  c.error = "HTTP 500: boom";
  RequestResult d = c;
  r.requests = {a, b, c, d};
  r.prefix_cache.server_available = true;
  r.prefix_cache.server_metric_prefix = "kvserve:";
  r.prefix_cache.delta_queries_tokens = 200;
  r.prefix_cache.delta_hits_tokens = 50;
  BenchmarkSummary s = Summarize(r);
  EXPECT_EQ(s.num_successful, 2);
  EXPECT_EQ(s.num_failed, 2);
  EXPECT_EQ(s.total_input_tokens, 17);
  EXPECT_EQ(s.total_output_tokens, 5);
  EXPECT_DOUBLE_EQ(s.request_throughput_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput_tokens_per_s, 2.5);
  EXPECT_DOUBLE_EQ(s.total_throughput_tokens_per_s, 11.0);
  EXPECT_DOUBLE_EQ(s.ttft.mean_ms, 200.0);
  EXPECT_EQ(s.tpot.count, 1);
  EXPECT_DOUBLE_EQ(s.tpot.mean_ms, 100.0);
  EXPECT_EQ(s.itl.count, 3);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].second, 2);
  EXPECT_DOUBLE_EQ(*r.prefix_cache.server_hit_rate(), 0.25);
  EXPECT_FALSE(r.prefix_cache.usage_cached_fraction().has_value());

  const std::string table = FormatSummaryTable(r, s);
  EXPECT_NE(table.find("Successful requests:                     2"), std::string::npos) << table;
  EXPECT_NE(table.find("Mean TTFT (ms):"), std::string::npos);
  EXPECT_NE(table.find("P99 ITL (ms):"), std::string::npos);
  EXPECT_NE(table.find("25.00 %"), std::string::npos);
  nlohmann::json j = ResultToJson(r, s);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["ttfts_ms"].size(), 4u);
  EXPECT_EQ(j["prefix_cache"]["server_hit_rate"], 0.25);
  EXPECT_TRUE(j["prefix_cache"]["usage_cached_fraction"].is_null());

  r.prefix_cache = PrefixCacheReport();
  r.prefix_cache.server_unavailable_reason = "no counters";
  EXPECT_NE(FormatSummaryTable(r, s).find("unavailable (no counters)"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::loadgen

namespace kvserve::loadgen {
namespace {

TEST(Summarize, ResponseCacheTiersFromTheHeader) {
  BenchmarkResult r;
  auto add = [&](const std::string& tier, double ttft) {
    RequestResult x;
    x.success = true;
    x.ttft_ms = ttft;
    x.e2e_ms = ttft + 10;
    x.output_tokens = 2;
    x.cache_tier = tier;
    r.requests.push_back(x);
  };
  add("miss", 100);
  add("miss", 120);
  add("exact", 2);
  add("semantic", 3);
  BenchmarkSummary s = Summarize(r);
  EXPECT_EQ(s.cache_tier_requests.at("miss"), 2);
  EXPECT_EQ(s.cache_tier_requests.at("exact"), 1);
  EXPECT_DOUBLE_EQ(s.cache_tier_ttft.at("miss").median_ms, 110);
  const std::string table = FormatSummaryTable(r, s);
  EXPECT_NE(table.find("50.00 % (2 of 4 requests)"), std::string::npos) << table;
  EXPECT_EQ(ResultToJson(r, s)["response_cache"]["exact"]["requests"], 1);
  // Without the header: no section.
  r.requests.resize(0);
  add("", 5);
  EXPECT_TRUE(Summarize(r).cache_tier_requests.empty());
}

}  // namespace
}  // namespace kvserve::loadgen
