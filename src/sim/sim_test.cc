// Tests of the trace simulator: prompt tokens, exact replays of small traces through the
// Scheduler (hits, step timing, preemption), the replay against the analytic unbounded count,
// the real Mooncake trace. The `kvserve sim` binary: cli/sim_cmd_test.cc; the trace parser:
// trace/trace_test.cc.
#include "sim/sim.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "plot/testing/svg_testing.h"
#include "sim/sim_test_util.h"

namespace kvserve::sim {
namespace {

using plot::testing::CountSvgElements;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using R = PrefixMissReason;

const std::string kTrace = MooncakeTracePath();

int64_t Miss(const SimRow& r, R reason) { return r.stats.miss_tokens[static_cast<int>(reason)]; }

TEST(SimTraceTest, PromptTokensFollowHashIds) {
  const TraceRequest r = Req(0, 6, 0, {3, 7});
  EXPECT_THAT(TracePromptTokens(r, 4), ElementsAre(12, 13, 14, 15, 28, 29));
  // Equal hash-id prefixes give equal token prefixes.
  const auto a = TracePromptTokens(Req(0, 8, 0, {3, 7}), 4);
  const auto b = TracePromptTokens(Req(0, 7, 0, {3, 9}), 4);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 4, b.begin()));
  EXPECT_NE(a[4], b[4]);
}

// A hand-checked replay: 4-token blocks = hash blocks; requests 1 s apart, so each runs alone.
TEST(SimTest, ExactReplayOfASmallTrace) {
  const std::vector<TraceRequest> trace = {
      Req(0, 10, 2, {0, 1, 2}),     // blocks 0 1 + 2 partial tokens: nothing cached yet
      Req(1000, 11, 1, {0, 1, 3}),  // hits 0 1 (8 tokens)
      Req(2000, 8, 1, {0, 1}),      // both cached, but the last token is computed: hits 4
      Req(3000, 5, 0, {9, 10}),     // never seen; output_length 0 generates one token
  };
  SimOptions o;
  o.block_tokens = 4;
  o.hash_block_tokens = 4;
  o.check_invariants = true;
  auto row = SimulateCapacity(trace, o, 16);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->num_requests, 4);
  EXPECT_EQ(row->max_model_len, 12);  // request 0: 10 + 2
  EXPECT_EQ(row->stats.prefix_queries, 4);
  EXPECT_EQ(row->stats.prefix_queries_tokens, 34);
  EXPECT_EQ(row->stats.prefix_hits_tokens, 12);
  EXPECT_EQ(row->stats.prefix_queries_blocks, 7);
  EXPECT_EQ(row->stats.prefix_hits_blocks, 3);
  EXPECT_EQ(Miss(*row, R::kNeverSeen), 8 + 4);
  EXPECT_EQ(Miss(*row, R::kPartialBlock), 2 + 3 + 1);
  EXPECT_EQ(Miss(*row, R::kLastTokenRecomputed), 4);
  EXPECT_EQ(row->stats.evicted_blocks, 0);
  EXPECT_EQ(row->num_preemptions, 0);
  EXPECT_EQ(row->readmit_queries_tokens, 0);
  // One step per output token; prefill is the prompt minus its hits.
  EXPECT_EQ(row->num_steps, 2 + 1 + 1 + 1);
  EXPECT_EQ(row->num_prefill_tokens, 34 - 12);
  EXPECT_EQ(row->num_decode_tokens, 1);
  EXPECT_DOUBLE_EQ(row->mean_queue_s, 0.0);  // the clock jumps to each arrival
  EXPECT_DOUBLE_EQ(row->end_s, 3.0 + 0.025 + 5 / 100000.0);
  // Blocks held at once: requests 0 and 1 compute up to 11 tokens.
  EXPECT_EQ(row->peak_blocks_in_use, 3);

  const SimRow unbounded = SimulateUnbounded(trace, o);
  EXPECT_EQ(unbounded.stats.prefix_hits_tokens, 12);
  EXPECT_EQ(unbounded.stats.prefix_hits_blocks, 3);
  EXPECT_EQ(Miss(unbounded, R::kLastTokenRecomputed), 4);

  // Three blocks: request 2 (3 blocks, 1 of them a hit) evicts the cached second block.
  row = SimulateCapacity(trace, o, 3);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->num_requests, 4);
  EXPECT_EQ(row->num_rejected, 0);
  EXPECT_GT(row->stats.evicted_blocks, 0);
  EXPECT_EQ(row->stats.blocks_in_use, 0);

  // max_model_len is capped to the cache (8 tokens): prompts of 8 tokens or more are rejected,
  // not a deadlock.
  row = SimulateCapacity(trace, o, 2);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->max_model_len, 8);
  EXPECT_EQ(row->num_rejected, 3);
  EXPECT_EQ(row->num_requests, 1);
}

// Two requests at t = 0 under an 8-token step budget, timed by hand: 100 ms per step plus
// 10 ms per prefill token.
TEST(SimTest, StepsFollowTheSchedulerBudget) {
  const std::vector<TraceRequest> trace = {Req(0, 8, 2, {0, 1}), Req(0, 8, 2, {2, 3})};
  SimOptions o;
  o.block_tokens = 4;
  o.hash_block_tokens = 4;
  o.decode_tokens_per_s = 10;
  o.prefill_tokens_per_s = 100;
  o.scheduler.max_num_batched_tokens = 8;
  o.scheduler.max_num_seqs = 2;
  o.check_invariants = true;
  auto row = SimulateCapacity(trace, o, 100);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  // Step 1 (0.18 s): A's prompt, A samples.   Step 2 (0.17 s): A decodes and finishes; B is
  // admitted with a 7-token chunk.   Step 3 (0.11 s): B's last prompt token, B samples.
  // Step 4 (0.1 s): B decodes and finishes.
  EXPECT_EQ(row->num_steps, 4);
  EXPECT_EQ(row->num_prefill_tokens, 16);
  EXPECT_EQ(row->num_decode_tokens, 2);
  EXPECT_NEAR(row->end_s, 0.56, 1e-12);
  EXPECT_NEAR(row->mean_queue_s, 0.09, 1e-12);
  EXPECT_NEAR(row->max_queue_s, 0.18, 1e-12);
  EXPECT_NEAR(row->p99_queue_s, 0.18 * 0.99, 1e-12);  // base/percentile.h: {0, 0.18} at 99%
  EXPECT_NEAR(row->mean_ttft_s, (0.18 + 0.46) / 2, 1e-12);
  EXPECT_NEAR(row->p99_ttft_s, 0.18 + 0.99 * (0.46 - 0.18), 1e-12);
  EXPECT_EQ(row->peak_blocks_in_use, 3 + 2);  // A's 9 tokens + B's 7

  // Without chunked prefill B's prompt waits for a step with room for all of it.
  o.scheduler.enable_chunked_prefill = false;
  o.scheduler.max_num_batched_tokens = 16;
  row = SimulateCapacity(trace, o, 100);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->num_steps, 2);  // both prompts in step 1, both decodes in step 2
  EXPECT_NEAR(row->end_s, 0.26 + 0.1, 1e-12);
  // ... and the scheduler refuses a budget smaller than max_model_len (10 here).
  o.scheduler.max_num_batched_tokens = 8;
  EXPECT_EQ(SimulateCapacity(trace, o, 100).status().code(), StatusCode::kInvalidArgument);
}

// A cache that holds little more than one request: the scheduler preempts (recompute) and
// every request still finishes, every block comes back, and the hit statistics count first
// admissions only (re-admissions apart).
TEST(SimTest, PreemptionUnderATinyCacheFinishesEverything) {
  std::vector<TraceRequest> trace;
  int64_t prompt_tokens = 0;
  for (int i = 0; i < 12; ++i) {
    // Prompts sharing a 2-block prefix, long outputs, all arriving in the first 100 ms.
    trace.push_back(Req(10 * i, 12, 30, {0, 1, 100 + i}));
    prompt_tokens += 12;
  }
  SimOptions o;
  o.block_tokens = 4;
  o.hash_block_tokens = 4;
  o.check_invariants = true;
  auto row = SimulateCapacity(trace, o, 14);  // one request: 42 tokens = 11 blocks
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->num_requests, 12);
  EXPECT_EQ(row->num_rejected, 0);
  EXPECT_GT(row->num_preemptions, 0);
  EXPECT_EQ(row->stats.blocks_in_use, 0);
  EXPECT_EQ(row->stats.blocks_free + row->stats.blocks_cached, 14);
  EXPECT_EQ(row->stats.prefix_queries, 12);
  EXPECT_EQ(row->stats.prefix_queries_tokens, prompt_tokens);
  EXPECT_GT(row->readmit_queries_tokens, 0);
  EXPECT_LE(row->readmit_hits_tokens, row->readmit_queries_tokens);
  // A re-admission recomputes its prompt and output so far (and samples from that chunk).
  EXPECT_LE(row->num_decode_tokens, 12 * 29);
  EXPECT_GT(row->num_prefill_tokens, prompt_tokens - row->stats.prefix_hits_tokens);
  // The same trace with room for everyone: no preemption, same first-admission lookups'
  // size, and the shared prefix hits for every request after the first.
  auto roomy = SimulateCapacity(trace, o, 1000);
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->num_preemptions, 0);
  EXPECT_EQ(roomy->readmit_queries_tokens, 0);
  EXPECT_EQ(roomy->stats.prefix_hits_tokens, 11 * 8);
  EXPECT_EQ(roomy->num_prefill_tokens, prompt_tokens - 11 * 8);
  EXPECT_EQ(roomy->num_decode_tokens, 12 * 29);  // the first token comes from the prefill
  EXPECT_GT(row->num_prefill_tokens + row->num_decode_tokens,
            roomy->num_prefill_tokens + roomy->num_decode_tokens);
  EXPECT_LT(roomy->end_s, row->end_s);
  // Deterministic.
  auto again = SimulateCapacity(trace, o, 14);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->num_preemptions, row->num_preemptions);
  EXPECT_EQ(again->num_steps, row->num_steps);
  EXPECT_EQ(again->end_s, row->end_s);
}

// The replay through the Scheduler and KvCacheManager agrees with the analytic unbounded
// count when nothing is preempted: prompts are looked up in arrival order (or overtaken by
// requests that share no uncached block with them), so "never seen" misses are identical, and
// every block the unbounded cache serves is either served or missed as "evicted" (the eviction
// history is large enough to remember every eviction). With preemption, a block may be
// computed by a later request first: never-seen can only grow. With tenants, see below.
TEST(SimTest, BoundedReplaysAgreeWithTheUnboundedCount) {
  for (int64_t block_tokens : {4, 3, 8}) {
    for (int64_t tenants : {1, 3}) {
      const std::vector<TraceRequest> trace = SyntheticTrace(300, 4, 17);
      SimOptions o;
      o.block_tokens = block_tokens;
      o.hash_block_tokens = 4;
      o.tenants = tenants;
      o.decode_tokens_per_s = 5;  // 200 ms steps: requests overlap
      o.scheduler.max_num_batched_tokens = 16;
      o.scheduler.max_num_seqs = 8;
      const SimRow unbounded = SimulateUnbounded(trace, o);
      EXPECT_GT(unbounded.stats.prefix_hits_tokens, 0);
      if (tenants > 1) {
        EXPECT_GT(Miss(unbounded, R::kOtherNamespace), 0);
      }
      // The largest request sets the smallest capacity that rejects nothing.
      int64_t min_capacity = 0;
      for (const TraceRequest& r : trace) {
        min_capacity = std::max(
            min_capacity, (r.input_tokens + r.output_tokens + block_tokens - 1) / block_tokens);
      }
      int64_t num_without_preemption = 0;
      for (int64_t capacity :
           {min_capacity, 3 * min_capacity, 10 * min_capacity, int64_t{100000}}) {
        SCOPED_TRACE("block " + std::to_string(block_tokens) + " tenants " +
                     std::to_string(tenants) + " capacity " + std::to_string(capacity));
        o.check_invariants = capacity < 100000;  // O(blocks) per step
        auto row = SimulateCapacity(trace, o, capacity);
        ASSERT_TRUE(row.ok());
        ASSERT_EQ(row->num_rejected, 0);
        ASSERT_EQ(row->num_requests, 300);
        const KvCacheManagerStats& b = row->stats;
        const KvCacheManagerStats& u = unbounded.stats;
        EXPECT_EQ(b.prefix_queries_tokens, u.prefix_queries_tokens);
        EXPECT_EQ(b.prefix_queries_blocks, u.prefix_queries_blocks);
        EXPECT_EQ(Miss(*row, R::kPartialBlock), Miss(unbounded, R::kPartialBlock));
        EXPECT_LE(b.prefix_hits_tokens, u.prefix_hits_tokens);
        EXPECT_GE(Miss(*row, R::kNeverSeen), Miss(unbounded, R::kNeverSeen));
        if (row->num_preemptions == 0) {
          ++num_without_preemption;
          // Another tenant's copy of a block may still be computing when a request looks it
          // up (the scheduler defers only within a namespace): never-seen to the manager,
          // other-namespace to the analytic count. Their sum agrees.
          EXPECT_EQ(Miss(*row, R::kNeverSeen) + Miss(*row, R::kOtherNamespace),
                    Miss(unbounded, R::kNeverSeen) + Miss(unbounded, R::kOtherNamespace));
          if (tenants == 1) {
            EXPECT_EQ(Miss(*row, R::kNeverSeen), Miss(unbounded, R::kNeverSeen));
          }
          EXPECT_EQ(b.prefix_hits_tokens + Miss(*row, R::kEvicted) +
                        Miss(*row, R::kLastTokenRecomputed),
                    u.prefix_hits_tokens + Miss(unbounded, R::kLastTokenRecomputed));
        }
        if (capacity == 100000) {
          EXPECT_EQ(row->num_preemptions, 0);
          EXPECT_EQ(b.evicted_blocks, 0);
          EXPECT_EQ(b.prefix_hits_tokens, u.prefix_hits_tokens);
          EXPECT_EQ(b.prefix_hits_blocks, u.prefix_hits_blocks);
        } else if (capacity == min_capacity) {
          EXPECT_GT(b.evicted_blocks, 0);
          EXPECT_LT(b.prefix_hits_tokens, u.prefix_hits_tokens);
        }
      }
      EXPECT_GE(num_without_preemption, 2);
    }
  }
}

TEST(SimTest, DisabledPrefixCachingHitsNothing) {
  SimOptions o;
  o.block_tokens = 4;
  o.hash_block_tokens = 4;
  o.scheduler.enable_prefix_caching = false;
  o.check_invariants = true;
  auto row = SimulateCapacity(SyntheticTrace(100, 4, 3), o, 200);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->stats.prefix_hits_tokens, 0);
  EXPECT_GT(row->stats.prefix_queries_tokens, 0);
  EXPECT_EQ(row->stats.blocks_cached, 0);
}

TEST(SimTest, RunSimValidatesOptionsAndSweeps) {
  const auto trace = SyntheticTrace(50, 64, 5);
  SimOptions o;
  o.hash_block_tokens = 64;
  o.block_tokens = 0;
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.block_tokens = 64;
  o.capacities_blocks = {0};
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.capacities_blocks = {int64_t{1} << 40};
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.capacities_blocks = {};
  o.decode_tokens_per_s = 0;
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.decode_tokens_per_s = 40;
  o.scheduler.max_num_batched_tokens = 100;  // below --max-num-seqs (256)
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.scheduler.max_num_batched_tokens = 8192;
  o.max_model_len = 1;
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.max_model_len = 0;
  o.scheduler.long_prefill_token_threshold = -1;
  EXPECT_EQ(RunSim(trace, o).status().code(), StatusCode::kInvalidArgument);
  o.scheduler.long_prefill_token_threshold = 0;
  o.max_requests = 20;
  o.threads = 2;
  auto rep = RunSim(trace, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->num_requests, 20);
  // The default sweep, scaled to the block size: 1000 blocks of 512 tokens = 8000 of 64.
  ASSERT_EQ(rep->rows.size(), 7u);
  EXPECT_EQ(rep->rows[0].capacity_blocks, 8000);
  EXPECT_EQ(rep->rows[6].capacity_blocks, 800000);
  EXPECT_GT(rep->unbounded.stats.prefix_hits_tokens, 0);
  for (const SimRow& r : rep->rows) {
    EXPECT_EQ(r.stats.prefix_hits_tokens, rep->unbounded.stats.prefix_hits_tokens);
  }
  const std::string text = FormatSimText(*rep);
  EXPECT_THAT(text, HasSubstr("unbounded"));
  EXPECT_THAT(text, HasSubstr("8000"));
  const auto j = nlohmann::json::parse(FormatSimJson(*rep));
  EXPECT_EQ(j["rows"].size(), 7u);
  EXPECT_EQ(j["num_requests"], 20);
  EXPECT_TRUE(j["unbounded"]["capacity_blocks"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][0]["hit_rate_tokens"].get<double>(), rep->rows[0].token_hit_rate());
  EXPECT_EQ(j["rows"][0]["num_preemptions"], 0);
  EXPECT_GT(j["rows"][0]["num_steps"].get<int64_t>(), 0);
  EXPECT_EQ(j["rows"][0]["num_steps"], rep->rows[0].num_steps);
  EXPECT_EQ(j["options"]["max_num_batched_tokens"], 8192);
  // --plot: hit rate (replayed, never evicts) and TTFT (mean, p99) against capacity.
  EXPECT_EQ(CountSvgElements(SimPlotSvg(*rep), "polyline"), 4);
}

// The real Mooncake trace (first 1000 requests) through a small and a large cache.
TEST(SimTest, MooncakeTraceSlice) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kTrace), kTrace);
  auto trace = LoadMooncakeTrace(kTrace, kMooncakeTraceBlockTokens);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->size(), 12031u);
  trace->resize(1000);
  SimOptions o;
  const SimRow unbounded = SimulateUnbounded(*trace, o);
  auto small = SimulateCapacity(*trace, o, 2000);
  auto large = SimulateCapacity(*trace, o, 100000);
  ASSERT_TRUE(small.ok() && large.ok());
  EXPECT_GT(unbounded.token_hit_rate(), 0.2);
  EXPECT_EQ(large->num_preemptions, 0);
  EXPECT_EQ(large->num_requests, 1000);
  EXPECT_EQ(small->num_requests, 1000);
  EXPECT_EQ(large->stats.prefix_hits_tokens, unbounded.stats.prefix_hits_tokens);
  EXPECT_LT(small->stats.prefix_hits_tokens, large->stats.prefix_hits_tokens);
  EXPECT_GE(Miss(*small, R::kNeverSeen), Miss(unbounded, R::kNeverSeen));
  EXPECT_EQ(Miss(*large, R::kNeverSeen), Miss(unbounded, R::kNeverSeen));
}

}  // namespace
}  // namespace kvserve::sim
