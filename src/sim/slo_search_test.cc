// SLO search: replicas are added until a configuration meets the targets, the cheapest one is
// chosen and the cheapest miss is reported, costs are device-hours over output tokens, and bad
// targets are refused.
#include "sim/slo_search.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvserve::sim {
namespace {

// 60 requests of 2000 distinct tokens and 50 outputs, 20 per second.
ServingWorkload Burst() {
  ServingWorkload w;
  w.dataset_name = "test";
  TokenId next = 1;
  for (int i = 0; i < 60; ++i) {
    std::vector<TokenId> p(2000);
    for (TokenId& t : p) t = next++;
    w.prompts.push_back(std::move(p));
    w.output_tokens.push_back(50);
    w.arrival_s.push_back(i / 20.0);
  }
  return w;
}

SearchOptions Options(double ttft_ms, double tpot_ms) {
  SearchOptions o;
  o.engine.preset = "llama-3.1-8b";
  o.engine.hardware = "l40s";
  o.slo_ttft_p90_ms = ttft_ms;
  o.slo_tpot_p99_ms = tpot_ms;
  o.space.kv_cache_dtypes = {"auto", "fp8"};
  o.space.block_sizes = {16};
  o.space.max_num_seqs = {64};
  o.space.max_num_batched_tokens = {2048};
  o.space.chunked_prefill = {true};
  o.space.kv_budgets = {0};
  o.space.max_replicas = 4;
  o.threads = 2;
  return o;
}

TEST(SloSearch, LooseTargetsNeedOneReplica) {
  StatusOr<SearchResult> r = SearchConfigurations(Burst(), Options(1e7, 1e7));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->chosen, 0);
  const SearchCandidate& c = r->candidates[static_cast<size_t>(r->chosen)];
  EXPECT_EQ(c.replicas, 1);
  EXPECT_TRUE(c.meets);
  EXPECT_EQ(r->candidates.size(), 2u);  // the two dtypes at one replica
  // $ per million output tokens: one device at the profile's price over the run.
  const cost::HardwareProfile l40s = *cost::BuiltinHardwareProfile("l40s");
  EXPECT_NEAR(c.cost_per_million_output_tokens,
              l40s.price_per_hour * c.duration_s / 3600.0 / (60 * 50) * 1e6, 1e-9);
  EXPECT_NE(c.serve_command.find("--max-num-seqs 64"), std::string::npos);
  EXPECT_NE(FormatSearchText(*r, Options(1e7, 1e7)).find("chosen:"), std::string::npos);
}

TEST(SloSearch, TighterTargetsAddReplicasAndReportTheMiss) {
  // What one replica reaches, then a TTFT target below it.
  StatusOr<SearchResult> one = SearchConfigurations(Burst(), Options(1e7, 1e7));
  ASSERT_TRUE(one.ok());
  double best_ttft = 1e18;
  for (const SearchCandidate& c : one->candidates) best_ttft = std::min(best_ttft, c.ttft_p90_ms);
  const SearchOptions o = Options(best_ttft * 0.5, 1e7);
  StatusOr<SearchResult> r = SearchConfigurations(Burst(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->chosen, 0) << FormatSearchText(*r, o);
  const SearchCandidate& chosen = r->candidates[static_cast<size_t>(r->chosen)];
  EXPECT_GT(chosen.replicas, 1);
  EXPECT_LE(chosen.ttft_p90_ms, best_ttft * 0.5);
  ASSERT_GE(r->cheapest_miss, 0);
  const SearchCandidate& miss = r->candidates[static_cast<size_t>(r->cheapest_miss)];
  EXPECT_FALSE(miss.meets);
  EXPECT_EQ(miss.replicas, chosen.replicas - 1);
  EXPECT_LT(miss.cost_per_million_output_tokens, chosen.cost_per_million_output_tokens);
  EXPECT_NE(miss.verdict.find("TTFT p90"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(FormatSearchJson(*r, o));
  EXPECT_EQ(j["chosen"], r->chosen);
}

TEST(SloSearch, WithinOnePercentNoEvictionIsChosen) {
  SearchOptions o = Options(1e7, 1e7);
  o.space.kv_budgets = {0, 1024};
  StatusOr<SearchResult> r = SearchConfigurations(Burst(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->chosen, 0);
  const SearchCandidate& chosen = r->candidates[static_cast<size_t>(r->chosen)];
  double cheapest = 1e300, cheapest_plain = 1e300;
  for (const SearchCandidate& c : r->candidates) {
    if (!c.meets) continue;
    cheapest = std::min(cheapest, c.cost_per_million_output_tokens);
    if (c.kv_budget_tokens == 0) cheapest_plain = std::min(cheapest_plain, c.cost_per_million_output_tokens);
  }
  EXPECT_LE(chosen.cost_per_million_output_tokens, cheapest * 1.01);
  if (cheapest_plain <= cheapest * 1.01) {
    EXPECT_EQ(chosen.kv_budget_tokens, 0);
  }
}

TEST(SloSearch, ImpossibleTargetsChooseNothing) {
  StatusOr<SearchResult> r = SearchConfigurations(Burst(), Options(0.001, 0.001));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chosen, -1);
  EXPECT_NE(FormatSearchText(*r, Options(0.001, 0.001)).find("no configuration meets"),
            std::string::npos);
}

TEST(SloSearch, BadOptionsAreErrors) {
  EXPECT_FALSE(SearchConfigurations(Burst(), Options(0, 100)).ok());
  SearchOptions o = Options(100, 100);
  o.space.block_sizes = {};
  EXPECT_FALSE(SearchConfigurations(Burst(), o).ok());
  o = Options(100, 100);
  o.engine.hardware = "tpu";
  EXPECT_NE(SearchConfigurations(Burst(), o).status().message().find("h100-sxm"), std::string::npos);
  EXPECT_FALSE(SearchConfigurations(ServingWorkload{}, Options(100, 100)).ok());
}

}  // namespace
}  // namespace kvserve::sim
