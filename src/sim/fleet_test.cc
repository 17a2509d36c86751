// The fleet replay: one replica equals SimulateCapacity; on multi-turn conversations that share
// a system prompt, routing by the replicas' KV events or by a long enough prefix key keeps each
// conversation on one replica and beats round robin; too short a key sends everything to one
// replica; every request is routed exactly once.
#include "sim/fleet.h"

#include <gtest/gtest.h>

#include <numeric>

#include "sim/sim_test_util.h"

namespace kvserve::sim {
namespace {

SimOptions SmallOptions() {
  SimOptions o;
  o.block_tokens = 16;
  o.hash_block_tokens = 16;
  o.check_invariants = true;
  return o;
}

TEST(FleetTest, OneReplicaIsTheSingleReplay) {
  const std::vector<TraceRequest> trace = SyntheticTrace(300, 16, 5);
  const SimOptions o = SmallOptions();
  auto single = SimulateCapacity(trace, o, 200);
  auto fleet = SimulateFleet(trace, o, 200, {.replicas = 1, .routing = Routing::kKvEvents});
  ASSERT_TRUE(single.ok() && fleet.ok());
  EXPECT_EQ(fleet->fleet.stats.prefix_hits_tokens, single->stats.prefix_hits_tokens);
  EXPECT_EQ(fleet->fleet.stats.prefix_queries_tokens, single->stats.prefix_queries_tokens);
  EXPECT_EQ(fleet->fleet.stats.evicted_blocks, single->stats.evicted_blocks);
  EXPECT_EQ(fleet->fleet.num_preemptions, single->num_preemptions);
  EXPECT_DOUBLE_EQ(fleet->fleet.mean_ttft_s, single->mean_ttft_s);
  EXPECT_DOUBLE_EQ(fleet->fleet.end_s, single->end_s);
}

TEST(FleetTest, CacheAwareRoutingKeepsConversationsTogether) {
  const std::vector<TraceRequest> trace = SyntheticTrace(600, 16, 9);
  const SimOptions o = SmallOptions();
  const int64_t capacity = 4000;  // no evictions: hits depend on routing alone
  std::map<Routing, double> hit;
  for (Routing r : AllRoutings()) {
    auto row = SimulateFleet(trace, o, capacity,
                             {.replicas = 4, .routing = r, .affinity_tokens = 32});
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    EXPECT_EQ(std::accumulate(row->requests_per_replica.begin(), row->requests_per_replica.end(),
                              int64_t{0}),
              static_cast<int64_t>(trace.size()))
        << RoutingName(r);
    EXPECT_EQ(row->fleet.num_requests, static_cast<int64_t>(trace.size()));
    hit[r] = row->fleet.token_hit_rate();
  }
  // A single replica that never evicts holds every conversation: the most any routing reaches.
  const double ceiling = SimulateUnbounded(trace, o).token_hit_rate();
  EXPECT_LT(hit[Routing::kRoundRobin], hit[Routing::kKvEvents] - 0.05);
  EXPECT_LT(hit[Routing::kLeastLoaded], hit[Routing::kKvEvents] - 0.05);
  EXPECT_NEAR(hit[Routing::kKvEvents], ceiling, 0.02);
  EXPECT_GT(hit[Routing::kPrefixAffinity], hit[Routing::kRoundRobin]);

  // A key of the shared system prompt alone (its first 16 tokens) sends everything that starts
  // with it to one replica.
  std::vector<TraceRequest> shared;
  for (const TraceRequest& r : trace) {
    if (!r.hash_ids.empty() && r.hash_ids.front() == 0) shared.push_back(r);
  }
  ASSERT_GT(shared.size(), 100u);
  auto one_key = SimulateFleet(shared, o, capacity,
                               {.replicas = 4, .routing = Routing::kPrefixAffinity,
                                .affinity_tokens = 16});
  ASSERT_TRUE(one_key.ok());
  EXPECT_EQ(*std::max_element(one_key->requests_per_replica.begin(),
                              one_key->requests_per_replica.end()),
            static_cast<int64_t>(shared.size()));
}

TEST(FleetTest, Errors) {
  const std::vector<TraceRequest> trace = SyntheticTrace(10, 16, 1);
  EXPECT_FALSE(SimulateFleet(trace, SmallOptions(), 100, {.replicas = 0}).ok());
  EXPECT_FALSE(
      SimulateFleet(trace, SmallOptions(), 100, {.replicas = 2, .affinity_tokens = 0}).ok());
  EXPECT_FALSE(ParseRouting("random").ok());
  EXPECT_EQ(*ParseRouting("kv-events"), Routing::kKvEvents);
}

}  // namespace
}  // namespace kvserve::sim
