// SelectKeptTokensFromMass (the engine's entry point, fed by the kernels' accumulated attention
// mass) against the dense reference selections, and CompactionLayout.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kv/token_eviction.h"

namespace kvserve {
namespace {

struct Case {
  KvEvictionShape shape;
  std::vector<float> window_weights;  // [layers, q_heads, window, tokens]
  std::vector<float> window_mass;     // [layers, kv_heads, tokens]
};

// Random queries of the last `window` positions against random keys, per layer.
Case MakeCase(int64_t layers, int64_t q_heads, int64_t kv_heads, int64_t tokens, int64_t window,
              uint32_t seed) {
  Case c;
  c.shape = {layers, q_heads, kv_heads, tokens};
  const int64_t hd = 16;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<int64_t> positions;
  for (int64_t i = tokens - window; i < tokens; ++i) positions.push_back(i);
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<float> q(static_cast<size_t>(window * q_heads * hd));
    std::vector<float> k(static_cast<size_t>(tokens * kv_heads * hd));
    for (float& x : q) x = dist(rng);
    for (float& x : k) x = dist(rng);
    const std::vector<float> w = ReferenceAttentionWeights(
        q, k, positions, {.num_q_heads = q_heads, .num_kv_heads = kv_heads, .head_dim = hd,
                          .num_keys = tokens});
    c.window_weights.insert(c.window_weights.end(), w.begin(), w.end());
    std::vector<float> mass(static_cast<size_t>(kv_heads * tokens), 0.0f);
    AccumulateAttentionMass(w, q_heads, window, kv_heads, mass);
    c.window_mass.insert(c.window_mass.end(), mass.begin(), mass.end());
  }
  return c;
}

TEST(SelectFromMassTest, SnapKvAndPyramidKvMatchTheDenseReference) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const int64_t kv_heads = seed % 2 == 0 ? 2 : 1;
    const Case c = MakeCase(4, 4, kv_heads, 120 + 7 * seed, 16, seed);
    for (KvEvictionMethod method : {KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
      KvEvictionPolicy policy;
      policy.method = method;
      policy.budget_tokens = 48;
      policy.observation_window = 16;
      policy.pyramid_beta = 4;
      ASSERT_TRUE(policy.Validate().ok());
      const KvKeptTokens dense =
          method == KvEvictionMethod::kSnapKv
              ? SelectSnapKv(policy, c.shape, c.window_weights)
              : SelectPyramidKv(policy, c.shape, c.window_weights);
      const KvKeptTokens from_mass = SelectKeptTokensFromMass(policy, c.shape, c.window_mass);
      EXPECT_EQ(from_mass.positions, dense.positions)
          << KvEvictionMethodName(method) << " seed " << seed;
    }
  }
}

TEST(SelectFromMassTest, H2oAndStreamingAndNone) {
  const Case c = MakeCase(2, 4, 2, 90, 90, 9);  // every row recorded: H2O's mass
  KvEvictionPolicy policy;
  policy.method = KvEvictionMethod::kH2o;
  policy.budget_tokens = 40;
  EXPECT_EQ(SelectKeptTokensFromMass(policy, c.shape, c.window_mass).positions,
            SelectH2o(policy, c.shape, c.window_mass).positions);
  policy.method = KvEvictionMethod::kStreaming;
  EXPECT_EQ(SelectKeptTokensFromMass(policy, c.shape, {}).positions,
            SelectStreaming(policy, c.shape).positions);
  policy.method = KvEvictionMethod::kNone;
  EXPECT_EQ(SelectKeptTokensFromMass(policy, c.shape, {}).total_kept(), 2 * 2 * 90);
}

TEST(CompactionLayoutTest, LayersKeepingFewerStartLater) {
  const Case c = MakeCase(4, 2, 1, 200, 8, 3);
  KvEvictionPolicy policy;
  policy.method = KvEvictionMethod::kPyramidKv;
  policy.budget_tokens = 40;
  policy.observation_window = 8;
  const KvKeptTokens kept = SelectKeptTokensFromMass(policy, c.shape, c.window_mass);
  const KvCompactionLayout layout = CompactionLayout(kept);
  const std::vector<int64_t> budgets = PyramidKvLayerBudgets(policy, 4, 200);
  EXPECT_EQ(layout.num_slots, budgets[0]);
  ASSERT_EQ(layout.layer_key_begin.size(), 4u);
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(layout.layer_key_begin[l], budgets[0] - budgets[l]) << "layer " << l;
  }
  EXPECT_EQ(layout.layer_key_begin[0], 0);

  policy.method = KvEvictionMethod::kSnapKv;
  const KvCompactionLayout flat =
      CompactionLayout(SelectKeptTokensFromMass(policy, c.shape, c.window_mass));
  EXPECT_EQ(flat.num_slots, 40);
  EXPECT_EQ(flat.layer_key_begin, std::vector<int64_t>(4, 0));
}

}  // namespace
}  // namespace kvserve

namespace kvserve {
namespace {

KvEvictionPolicy Policy(KvEvictionMethod method) {
  KvEvictionPolicy p;
  p.method = method;
  p.budget_tokens = 64;
  return p;
}

TEST(CompactionScheduleTest, OneShotMethodsCompactAtTheCompressionPoint) {
  for (KvEvictionMethod m : {KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    const KvEvictionPolicy p = Policy(m);
    EXPECT_EQ(TokensUntilCompaction(p, {0, 0, 300}, 16), 300);
    EXPECT_EQ(TokensUntilCompaction(p, {256, 256, 300}, 16), 44);
    EXPECT_TRUE(CompactionDue(p, {300, 300, 300}, 16));
    EXPECT_FALSE(CompactionDue(p, {60, 60, 60}, 16));  // within the budget
    EXPECT_EQ(TokensUntilCompaction(p, {300, 64, 300}, 16), INT64_MAX);
    EXPECT_FALSE(CompactionDue(p, {400, 164, 300}, 16));  // decoding: never again
    EXPECT_EQ(MaxCachedTokensWithEviction(p, 300, 16), 300 - 32);
  }
}

TEST(CompactionScheduleTest, StreamingCompactsEveryBlockOfSlack) {
  const KvEvictionPolicy p = Policy(KvEvictionMethod::kStreaming);
  EXPECT_EQ(ContinuousCompactionSlots(p, 16), 80);
  EXPECT_EQ(TokensUntilCompaction(p, {0, 0, 1000}, 16), 80);  // prefill chunks stop there
  EXPECT_TRUE(CompactionDue(p, {80, 80, 1000}, 16));
  EXPECT_EQ(TokensUntilCompaction(p, {80, 64, 1000}, 16), 16);
  EXPECT_FALSE(CompactionDue(p, {95, 79, 1000}, 16));
  EXPECT_TRUE(CompactionDue(p, {96, 80, 1000}, 16));
  EXPECT_EQ(MaxCachedTokensWithEviction(p, 1000, 16), 79);
}

TEST(CompactionScheduleTest, H2oHoldsThePromptThenEvictsContinuously) {
  const KvEvictionPolicy p = Policy(KvEvictionMethod::kH2o);
  EXPECT_EQ(TokensUntilCompaction(p, {0, 0, 200}, 16), 200);  // no eviction inside the prompt
  EXPECT_TRUE(CompactionDue(p, {200, 200, 200}, 16));
  EXPECT_EQ(TokensUntilCompaction(p, {200, 64, 200}, 16), 16);
  EXPECT_TRUE(CompactionDue(p, {216, 80, 200}, 16));
  EXPECT_FALSE(CompactionDue(p, {50, 50, 200}, 16));
  EXPECT_EQ(MaxCachedTokensWithEviction(p, 200, 16), 0);  // every prompt row is scored
  // A short prompt: nothing at the compression point, then the continuous rule.
  EXPECT_FALSE(CompactionDue(p, {20, 20, 20}, 16));
  EXPECT_EQ(TokensUntilCompaction(p, {20, 20, 20}, 16), 60);
  const KvEvictionPolicy none = Policy(KvEvictionMethod::kNone);
  EXPECT_EQ(TokensUntilCompaction(none, {0, 0, 20}, 16), INT64_MAX);
  EXPECT_FALSE(CompactionDue(none, {5000, 5000, 20}, 16));
}

}  // namespace
}  // namespace kvserve
