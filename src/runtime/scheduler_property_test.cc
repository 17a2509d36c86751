// Scheduler property tests: random workloads against the oracle (budgets never exceeded, every
// request finishes with the oracle's output, chunked == unchunked), through the harness of
// scheduler_test_util.h.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "runtime/scheduler_test_util.h"

namespace kvserve {
namespace {

using namespace scheduler_testing;  // NOLINT: the harness of these tests

// ---------------------------------------------------------------------------------------------
// Property test: random configurations and workloads

struct Workload {
  Scenario setup;
  struct Item {
    SeqId id;
    int64_t arrival_step;
    int64_t abort_step;  // -1: never
    RequestInput input;
  };
  std::vector<Item> items;
};

Workload RandomWorkload(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Workload w;
  Scenario& s = w.setup;
  const int64_t block_sizes[] = {1, 2, 4, 16};
  s.block_size = block_sizes[uniform(0, 3)];
  s.enable_prefix_caching = uniform(0, 3) != 0;
  SchedulerConfig& c = s.config;
  c.max_model_len = uniform(8, 96);
  const int64_t min_blocks = (c.max_model_len + s.block_size - 1) / s.block_size;
  s.num_blocks = uniform(min_blocks, min_blocks * 4);  // often short of memory
  c.max_num_seqs = uniform(1, 8);
  c.enable_chunked_prefill = uniform(0, 3) != 0;
  if (c.enable_chunked_prefill) {
    c.max_num_batched_tokens =
        uniform(c.max_num_seqs, std::max<int64_t>(c.max_num_seqs, 2 * c.max_model_len));
    c.long_prefill_token_threshold = uniform(0, 1) ? 0 : uniform(1, 32);
  } else {
    c.max_num_batched_tokens =
        uniform(std::max(c.max_model_len, c.max_num_seqs), 2 * c.max_model_len);
  }
  c.policy = uniform(0, 1) ? SchedulingPolicy::kFcfs : SchedulingPolicy::kPriority;
  c.model_namespace = "m";
  c.eos_token_ids = {kEos};
  s.runner.eos_id = kEos;
  const int64_t eos_rates[] = {0, 8, 40};
  s.runner.eos_one_in = eos_rates[uniform(0, 2)];

  // A few shared prefixes so that prefix hits (and evictions) happen.
  std::vector<std::vector<TokenId>> prefixes(3);
  for (auto& p : prefixes) {
    for (int64_t i = 0, n = uniform(1, c.max_model_len - 1); i < n; ++i) {
      p.push_back(static_cast<TokenId>(uniform(10, 60)));
    }
  }
  const int64_t num_requests = uniform(1, 24);
  for (int64_t i = 0; i < num_requests; ++i) {
    Workload::Item item;
    item.id = i + 1;
    item.arrival_step = uniform(0, 30);
    item.abort_step = uniform(0, 9) == 0 ? item.arrival_step + uniform(0, 20) : -1;
    const int64_t len = uniform(1, c.max_model_len - 1);
    std::vector<TokenId> prompt;
    if (uniform(0, 1)) {
      const auto& p = prefixes[static_cast<size_t>(uniform(0, 2))];
      prompt.assign(p.begin(), p.begin() + std::min<int64_t>(len, static_cast<int64_t>(p.size())));
    }
    while (static_cast<int64_t>(prompt.size()) < len) {
      prompt.push_back(static_cast<TokenId>(uniform(10, 999)));
    }
    item.input = Input(prompt, uniform(1, c.max_model_len));
    item.input.ignore_eos = uniform(0, 3) == 0;
    if (uniform(0, 4) == 0) item.input.stop_token_ids = {static_cast<TokenId>(uniform(3, 30))};
    item.input.priority = uniform(-2, 2);
    if (uniform(0, 5) == 0) item.input.cache_salt = "tenant";
    w.items.push_back(std::move(item));
  }
  // Arrival order == id order (the harness checks victims by arrival).
  std::stable_sort(w.items.begin(), w.items.end(),
                   [](const auto& a, const auto& b) { return a.arrival_step < b.arrival_step; });
  for (size_t i = 0; i < w.items.size(); ++i) w.items[i].id = static_cast<SeqId>(i + 1);
  return w;
}

TEST(SchedulerPropertyTest, RandomWorkloadsRespectBudgetsAndFinishWithOracleOutputs) {
  int64_t total_preemptions = 0, total_steps = 0, total_hits = 0, seeds_short_of_budget = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Workload w = RandomWorkload(seed);
    Harness h(w.setup);
    size_t next = 0;
    int64_t step = 0;
    std::vector<std::pair<int64_t, SeqId>> aborts;
    while (next < w.items.size() || h.scheduler().has_unfinished()) {
      while (next < w.items.size() && w.items[next].arrival_step <= step) {
        const auto& item = w.items[next++];
        ASSERT_TRUE(h.add(item.id, item.input).ok());
        if (item.abort_step >= 0) aborts.push_back({item.abort_step, item.id});
      }
      for (const auto& [when, id] : aborts) {
        if (when == step && h.scheduler().request(id) != nullptr) h.abort(id);
      }
      h.step();
      ++step;
      ASSERT_LT(step, 20000) << "requests never finish";
      if (::testing::Test::HasFailure()) return;
    }
    h.expect_outputs_match_oracle();
    h.expect_no_leaks();
    if (::testing::Test::HasFailure()) return;
    total_preemptions += h.num_preemptions();
    total_steps += step;
    total_hits += h.kv().stats().prefix_hits_tokens;
    if (h.max_tokens_seen() == w.setup.config.max_num_batched_tokens) ++seeds_short_of_budget;
  }
  // The workloads exercise what they are meant to.
  EXPECT_GT(total_preemptions, 50);
  EXPECT_GT(total_hits, 0);
  EXPECT_GT(seeds_short_of_budget, 20);
  std::printf("[ info ] %lld steps, %lld preemptions, %lld prefix-hit tokens, %lld seeds filled "
              "the budget\n", static_cast<long long>(total_steps),
              static_cast<long long>(total_preemptions), static_cast<long long>(total_hits),
              static_cast<long long>(seeds_short_of_budget));
}

// Chunked and unchunked runs of one workload compute the same tokens.
TEST(SchedulerPropertyTest, ChunkedEqualsUnchunked) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Workload w = RandomWorkload(seed * 7919);
    std::map<SeqId, std::vector<TokenId>> outputs[2];
    for (int chunked = 0; chunked < 2; ++chunked) {
      Scenario s = w.setup;
      s.config.enable_chunked_prefill = chunked == 1;
      s.config.max_num_batched_tokens =
          chunked ? std::max<int64_t>(s.config.max_num_seqs, 5)
                  : std::max(s.config.max_model_len, s.config.max_num_seqs);
      s.config.long_prefill_token_threshold = chunked ? 3 : 0;
      Harness h(s);
      for (const auto& item : w.items) ASSERT_TRUE(h.add(item.id, item.input).ok());
      ASSERT_TRUE(h.run());
      for (const auto& item : w.items) outputs[chunked][item.id] = h.streamed(item.id);
      h.expect_no_leaks();
    }
    EXPECT_EQ(outputs[0], outputs[1]);
  }
}

}  // namespace
}  // namespace kvserve
