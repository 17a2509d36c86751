// Token eviction reference selections: hand-worked exact kept sets for every method, GQA
// combination, tie-breaking, pooling edges, PyramidKV's schedule, Validate errors, the dense
// attention oracle, and a randomized property test against a brute-force full sort.
#include "kv/token_eviction.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Positions = std::vector<int64_t>;

KvEvictionPolicy Policy(KvEvictionMethod method, int64_t budget, int64_t sink) {
  KvEvictionPolicy p;
  p.method = method;
  p.budget_tokens = budget;
  p.sink_tokens = sink;
  return p;
}

KvEvictionShape Shape(int64_t layers, int64_t q_heads, int64_t kv_heads, int64_t tokens) {
  return {.num_layers = layers, .num_q_heads = q_heads, .num_kv_heads = kv_heads,
          .num_tokens = tokens};
}

Positions Range(int64_t begin, int64_t end) {
  Positions p;
  for (int64_t i = begin; i < end; ++i) p.push_back(i);
  return p;
}

// SnapKV window weights [layers, q_heads, window, tokens] whose row 0 of every (layer, q head)
// is votes[layer][q_head] over the prefix and every other entry is 0: the row sum is exactly
// the given vote, so hand-worked cases stay readable.
std::vector<float> WindowWeightsFromVotes(const KvEvictionShape& shape, int64_t window,
                                          const std::vector<std::vector<std::vector<float>>>& v) {
  std::vector<float> w(shape.num_layers * shape.num_q_heads * window * shape.num_tokens, 0.0f);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (int64_t h = 0; h < shape.num_q_heads; ++h) {
      const auto& votes = v[l][h];
      float* row = w.data() + ((l * shape.num_q_heads + h) * window) * shape.num_tokens;
      std::copy(votes.begin(), votes.end(), row);
    }
  }
  return w;
}

// ---- names and Validate ----

TEST(KvEvictionMethodTest, NamesRoundTrip) {
  for (auto m : {KvEvictionMethod::kNone, KvEvictionMethod::kStreaming, KvEvictionMethod::kH2o,
                 KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    auto parsed = ParseKvEvictionMethod(KvEvictionMethodName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_STREQ(KvEvictionMethodName(KvEvictionMethod::kPyramidKv), "pyramidkv");
}

TEST(KvEvictionMethodTest, UnknownNameListsAllowedValues) {
  auto parsed = ParseKvEvictionMethod("SnapKV");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"SnapKV\""));
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("none, streaming, h2o, snapkv, pyramidkv"));
}

TEST(KvEvictionPolicyTest, DefaultsAreThePapers) {
  KvEvictionPolicy p;
  EXPECT_EQ(p.method, KvEvictionMethod::kNone);
  EXPECT_EQ(p.budget_tokens, 1024);
  EXPECT_EQ(p.sink_tokens, 4);
  EXPECT_FALSE(p.window_tokens.has_value());
  EXPECT_EQ(p.observation_window, 32);
  EXPECT_EQ(p.pooling_kernel, 5);
  EXPECT_EQ(p.pyramid_beta, 20);
  for (auto m : {KvEvictionMethod::kNone, KvEvictionMethod::kStreaming, KvEvictionMethod::kH2o,
                 KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    p.method = m;
    EXPECT_TRUE(p.Validate().ok()) << KvEvictionMethodName(m) << ": " << p.Validate().ToString();
  }
}

TEST(KvEvictionPolicyTest, RecentTokensPerMethod) {
  EXPECT_EQ(Policy(KvEvictionMethod::kStreaming, 1024, 4).recent_tokens(), 1020);
  EXPECT_EQ(Policy(KvEvictionMethod::kH2o, 1024, 4).recent_tokens(), 510);
  EXPECT_EQ(Policy(KvEvictionMethod::kH2o, 9, 4).recent_tokens(), 2);
  EXPECT_EQ(Policy(KvEvictionMethod::kSnapKv, 1024, 4).recent_tokens(), 32);
  EXPECT_EQ(Policy(KvEvictionMethod::kPyramidKv, 1024, 4).recent_tokens(), 32);
  EXPECT_EQ(Policy(KvEvictionMethod::kNone, 1024, 4).recent_tokens(), 0);
  KvEvictionPolicy p = Policy(KvEvictionMethod::kH2o, 1024, 4);
  p.window_tokens = 0;
  EXPECT_EQ(p.recent_tokens(), 0);
  EXPECT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.ToString(), "h2o budget=1024 sink=4 window=0");
  EXPECT_EQ(Policy(KvEvictionMethod::kPyramidKv, 256, 4).ToString(),
            "pyramidkv budget=256 sink=4 window=32 obs=32 pool=5 beta=20");
  EXPECT_EQ(Policy(KvEvictionMethod::kNone, 256, 4).ToString(), "none");
}

void ExpectInvalid(const KvEvictionPolicy& p, const std::string& field) {
  const Status s = p.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << p.ToString();
  EXPECT_THAT(s.message(), HasSubstr(field)) << s.message();
}

TEST(KvEvictionPolicyTest, ValidateNamesTheField) {
  ExpectInvalid(Policy(KvEvictionMethod::kSnapKv, 0, 0), "budget_tokens must be at least 1");
  ExpectInvalid(Policy(KvEvictionMethod::kH2o, 64, -1), "sink_tokens must be >= 0");

  KvEvictionPolicy p = Policy(KvEvictionMethod::kStreaming, 4, 4);
  ExpectInvalid(p, "budget_tokens (4) must exceed sink_tokens (4) for streaming");
  p.budget_tokens = 64;
  p.window_tokens = 32;
  ExpectInvalid(p, "window_tokens (32) must be unset or budget_tokens - sink_tokens (60)");
  p.window_tokens = 60;
  EXPECT_TRUE(p.Validate().ok());
  p.window_tokens = -1;
  ExpectInvalid(p, "window_tokens must be >= 0");

  p = Policy(KvEvictionMethod::kH2o, 64, 4);
  p.window_tokens = 60;
  ExpectInvalid(p, "budget_tokens (64) must exceed sink_tokens + window_tokens (4 + 60) for h2o");
  p = Policy(KvEvictionMethod::kH2o, 4, 4);
  ExpectInvalid(p, "budget_tokens (4) must exceed sink_tokens + window_tokens (4 + 0)");

  p = Policy(KvEvictionMethod::kSnapKv, 36, 4);
  ExpectInvalid(p, "budget_tokens (36) must exceed sink_tokens + window_tokens (4 + 32) for "
                   "snapkv");
  p.budget_tokens = 37;
  EXPECT_TRUE(p.Validate().ok());
  p.pooling_kernel = 4;
  ExpectInvalid(p, "pooling_kernel must be odd and >= 1");
  p.pooling_kernel = 0;
  ExpectInvalid(p, "pooling_kernel must be odd and >= 1");
  p.pooling_kernel = 1;
  EXPECT_TRUE(p.Validate().ok());
  p.observation_window = 0;
  ExpectInvalid(p, "observation_window must be at least 1");
  p.observation_window = 32;
  p.window_tokens = 16;
  ExpectInvalid(p, "window_tokens (16) must be at least observation_window (32) for snapkv");

  p = Policy(KvEvictionMethod::kPyramidKv, 256, 4);
  p.pyramid_beta = 0;
  ExpectInvalid(p, "pyramid_beta must be at least 1");
  // Fields a method does not use are not checked; kNone checks nothing.
  p = Policy(KvEvictionMethod::kStreaming, 64, 4);
  p.pooling_kernel = 2;
  EXPECT_TRUE(p.Validate().ok());
  EXPECT_TRUE(Policy(KvEvictionMethod::kNone, -5, -5).Validate().ok());
}

// ---- StreamingLLM ----

TEST(StreamingTest, KeepsSinksAndMostRecent) {
  // 10 tokens, budget 6, 2 sinks: {0, 1} + the last 4.
  const KvKeptTokens kept =
      SelectStreaming(Policy(KvEvictionMethod::kStreaming, 6, 2), Shape(2, 4, 2, 10));
  ASSERT_EQ(kept.positions.size(), 4u);
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t g = 0; g < 2; ++g) EXPECT_THAT(kept.at(l, g), ElementsAre(0, 1, 6, 7, 8, 9));
  }
  EXPECT_EQ(kept.total_kept(), 4 * 6);
  // No sinks: pure sliding window.
  EXPECT_THAT(SelectStreaming(Policy(KvEvictionMethod::kStreaming, 3, 0), Shape(1, 1, 1, 10))
                  .at(0, 0),
              ElementsAre(7, 8, 9));
}

TEST(StreamingTest, BudgetAtLeastLengthKeepsEverything) {
  for (int64_t n : {0, 1, 5, 6}) {
    const KvKeptTokens kept =
        SelectStreaming(Policy(KvEvictionMethod::kStreaming, 6, 2), Shape(1, 2, 2, n));
    for (const auto& p : kept.positions) EXPECT_EQ(p, Range(0, n)) << n;
  }
}

// ---- H2O ----

TEST(H2oTest, KeepsSinksRecentAndHeavyHitters) {
  // 10 tokens, budget 6, 1 sink, window 3: sink {0}, recent {7, 8, 9}, 2 heavy hitters among
  // positions 1..6. Two layers x two KV heads with different masses.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kH2o, 6, 1);
  p.window_tokens = 3;
  const std::vector<float> mass = {
      // layer 0, head 0: heavy 3 and 5 (9.0 at position 0 and 8.0 at 8 are protected anyway)
      9, 0.1f, 0.2f, 0.9f, 0.3f, 0.8f, 0.4f, 0.0f, 8.0f, 0.0f,
      // layer 0, head 1: heavy 1 and 6; position 7's big mass does not matter (recent)
      0, 0.7f, 0.1f, 0.1f, 0.1f, 0.1f, 0.6f, 5.0f, 0.0f, 0.0f,
      // layer 1, head 0: heavy 2 and 4
      0, 0.0f, 0.5f, 0.1f, 0.5f, 0.2f, 0.3f, 0.0f, 0.0f, 0.0f,
      // layer 1, head 1: heavy 5 and 6
      0, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 2.0f, 0.0f, 0.0f, 0.0f,
  };
  const KvKeptTokens kept = SelectH2o(p, Shape(2, 4, 2, 10), mass);
  EXPECT_THAT(kept.at(0, 0), ElementsAre(0, 3, 5, 7, 8, 9));
  EXPECT_THAT(kept.at(0, 1), ElementsAre(0, 1, 6, 7, 8, 9));
  EXPECT_THAT(kept.at(1, 0), ElementsAre(0, 2, 4, 7, 8, 9));
  EXPECT_THAT(kept.at(1, 1), ElementsAre(0, 5, 6, 7, 8, 9));
}

TEST(H2oTest, TiesKeepTheLowerPosition) {
  // All equal: the 3 heavy slots go to positions 1, 2, 3 (after sink 0, before recent 8, 9).
  KvEvictionPolicy p = Policy(KvEvictionMethod::kH2o, 6, 1);
  p.window_tokens = 2;
  const std::vector<float> flat(10, 0.5f);
  EXPECT_THAT(SelectH2o(p, Shape(1, 1, 1, 10), flat).at(0, 0), ElementsAre(0, 1, 2, 3, 8, 9));
  // A tie at the cut: 6 > {2, 4, 5 tied at 1} > rest; two of the tied go, lowest first.
  const std::vector<float> tied = {0, 0, 1, 0, 1, 1, 3, 0, 0, 0};
  EXPECT_THAT(SelectH2o(p, Shape(1, 1, 1, 10), tied).at(0, 0), ElementsAre(0, 2, 4, 6, 8, 9));
}

TEST(H2oTest, BudgetAtLeastLengthKeepsEverythingWithoutScores) {
  const KvKeptTokens kept = SelectH2o(Policy(KvEvictionMethod::kH2o, 8, 4), Shape(3, 2, 1, 8), {});
  for (const auto& p : kept.positions) EXPECT_EQ(p, Range(0, 8));
}

TEST(H2oTest, AccumulateAttentionMassSumsRowsAndGqaGroup) {
  // 4 query heads, 2 KV heads (heads 0,1 -> KV 0; 2,3 -> KV 1), 2 query rows, 3 keys.
  const std::vector<float> weights = {
      1, 0, 0, /**/ 0.5f, 0.5f, 0,        // q head 0
      0, 1, 0, /**/ 0, 0, 1,              // q head 1
      0.25f, 0.75f, 0, /**/ 1, 0, 0,      // q head 2
      0, 0, 1, /**/ 0, 0.5f, 0.5f,        // q head 3
  };
  std::vector<float> mass(2 * 3, 0.0f);
  AccumulateAttentionMass(weights, 4, 2, 2, mass);
  EXPECT_THAT(mass, ElementsAre(1.5f, 1.5f, 1.0f, 1.25f, 1.25f, 1.5f));
  // Accumulates across calls (decode steps).
  AccumulateAttentionMass(weights, 4, 2, 2, mass);
  EXPECT_THAT(mass, ElementsAre(3.0f, 3.0f, 2.0f, 2.5f, 2.5f, 3.0f));
}

TEST(H2oTest, SumGqaGroupsUsesContiguousGroups) {
  // [outer 2, q heads 4, inner 2] -> [2, kv 2, 2].
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8, /**/ 10, 20, 30, 40, 50, 60, 70, 80};
  EXPECT_THAT(SumGqaGroups(in, 4, 2, 2), ElementsAre(4, 6, 12, 14, 40, 60, 120, 140));
  EXPECT_THAT(SumGqaGroups(in, 4, 4, 2), ElementsAreArray(in));
  EXPECT_THAT(SumGqaGroups(in, 4, 1, 2), ElementsAre(16, 20, 160, 200));
}

// ---- SnapKV ----

TEST(SnapKvTest, MaxPoolSamePaddingAtTheEdges) {
  const std::vector<float> in = {9, 0, 0, 0, 5, 0, 0, 0, 0, 7};
  EXPECT_THAT(MaxPool1dSame(in, 1), ElementsAreArray(in));
  EXPECT_THAT(MaxPool1dSame(in, 3), ElementsAre(9, 9, 0, 5, 5, 5, 0, 0, 7, 7));
  EXPECT_THAT(MaxPool1dSame(in, 5), ElementsAre(9, 9, 9, 5, 5, 5, 5, 7, 7, 7));
  // Kernel wider than the input: every output is the global max.
  EXPECT_THAT(MaxPool1dSame(std::vector<float>{1, 3, 2}, 7), ElementsAre(3, 3, 3));
  EXPECT_TRUE(MaxPool1dSame(std::vector<float>{}, 5).empty());
}

TEST(SnapKvTest, VotesSumRowsAndGroupOverThePrefixOnly) {
  // 2 q heads -> 1 KV head, 2 window rows, 6 tokens, prefix 4 (positions 4, 5 are the window).
  const std::vector<float> w = {
      0.1f, 0.2f, 0.0f, 0.0f, 0.7f, 0.0f,  /**/ 0.0f, 0.0f, 0.3f, 0.0f, 0.2f, 0.5f,  // head 0
      0.0f, 0.1f, 0.0f, 0.0f, 0.9f, 0.0f,  /**/ 0.0f, 0.0f, 0.0f, 0.4f, 0.1f, 0.5f,  // head 1
  };
  const std::vector<float> raw = SnapKvVotes(w, 2, 1, 2, 6, 4, 1);
  ASSERT_EQ(raw.size(), 4u);
  EXPECT_FLOAT_EQ(raw[0], 0.1f);
  EXPECT_FLOAT_EQ(raw[1], 0.3f);
  EXPECT_FLOAT_EQ(raw[2], 0.3f);
  EXPECT_FLOAT_EQ(raw[3], 0.4f);
  // Pooled with kernel 3 within the prefix: position 3 sees only 2 and 3, never the window's
  // 0.7 + 0.9 at position 4.
  const std::vector<float> pooled = SnapKvVotes(w, 2, 1, 2, 6, 4, 3);
  EXPECT_FLOAT_EQ(pooled[0], 0.3f);
  EXPECT_FLOAT_EQ(pooled[1], 0.3f);
  EXPECT_FLOAT_EQ(pooled[2], 0.4f);
  EXPECT_FLOAT_EQ(pooled[3], 0.4f);
}

TEST(SnapKvTest, KeepsTopPooledPrefixPlusObservationWindow) {
  // 12 tokens, observation window 4 (positions 8..11), budget 7, no sinks: 3 prefix tokens of
  // 0..7 by pooled vote. 1 layer, 4 q heads -> 2 KV heads.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kSnapKv, 7, 0);
  p.observation_window = 4;
  p.pooling_kernel = 3;
  const KvEvictionShape shape = Shape(1, 4, 2, 12);
  // KV head 0: q heads 0 and 1 vote; their sum is 1.0 at 2 and 0.6 at 6 -> pooled
  // {0, 1, 1, 1, 0, 0.6, 0.6, 0.6}: positions 1, 2, 3.
  // KV head 1: q head 2 spikes at 0 (0.5), q head 3 at 7 (0.4) and 4 (0.45) -> pooled
  // {0.5, 0.5, 0, 0.45, 0.45, 0.45, 0.4, 0.4}: positions 0, 1, 3.
  std::vector<std::vector<std::vector<float>>> votes(1, std::vector<std::vector<float>>(4));
  votes[0][0] = {0, 0, 0.6f, 0, 0, 0, 0.6f, 0};
  votes[0][1] = {0, 0, 0.4f, 0, 0, 0, 0, 0};
  votes[0][2] = {0.5f, 0, 0, 0, 0, 0, 0, 0};
  votes[0][3] = {0, 0, 0, 0, 0.45f, 0, 0, 0.4f};
  const std::vector<float> w = WindowWeightsFromVotes(shape, 4, votes);
  const KvKeptTokens kept = SelectSnapKv(p, shape, w);
  EXPECT_THAT(kept.at(0, 0), ElementsAre(1, 2, 3, 8, 9, 10, 11));
  EXPECT_THAT(kept.at(0, 1), ElementsAre(0, 1, 3, 8, 9, 10, 11));
  // Without pooling the raw votes decide: head 0 {2 (1.0), 6 (0.6), then 0 by tie}; head 1
  // {0, 4, 7}.
  p.pooling_kernel = 1;
  const KvKeptTokens raw = SelectSnapKv(p, shape, w);
  EXPECT_THAT(raw.at(0, 0), ElementsAre(0, 2, 6, 8, 9, 10, 11));
  EXPECT_THAT(raw.at(0, 1), ElementsAre(0, 4, 7, 8, 9, 10, 11));
  // With one sink (position 0 protected), 2 slots remain for the prefix.
  p.sink_tokens = 1;
  const KvKeptTokens sunk = SelectSnapKv(p, shape, w);
  EXPECT_THAT(sunk.at(0, 0), ElementsAre(0, 2, 6, 8, 9, 10, 11));
  EXPECT_THAT(sunk.at(0, 1), ElementsAre(0, 4, 7, 8, 9, 10, 11));
}

TEST(SnapKvTest, WiderWindowIsProtectedAndNotScored) {
  // window_tokens 6 > observation window 4: positions 6..11 always kept; the pooled votes of
  // positions 6, 7 (in the prefix) are ignored. Budget 8 -> 2 selected from 0..5.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kSnapKv, 8, 0);
  p.observation_window = 4;
  p.pooling_kernel = 1;
  p.window_tokens = 6;
  const KvEvictionShape shape = Shape(1, 1, 1, 12);
  std::vector<std::vector<std::vector<float>>> votes = {{{0.1f, 0, 0.3f, 0, 0.2f, 0, 9, 9}}};
  const KvKeptTokens kept = SelectSnapKv(p, shape, WindowWeightsFromVotes(shape, 4, votes));
  EXPECT_THAT(kept.at(0, 0), ElementsAre(2, 4, 6, 7, 8, 9, 10, 11));
}

TEST(SnapKvTest, BudgetAtLeastLengthKeepsEverything) {
  KvEvictionPolicy p = Policy(KvEvictionMethod::kSnapKv, 40, 4);
  for (int64_t n : {0, 3, 40}) {
    const KvKeptTokens kept = SelectSnapKv(p, Shape(2, 2, 1, n), {});
    for (const auto& pos : kept.positions) EXPECT_EQ(pos, Range(0, n));
  }
}

TEST(SnapKvTest, FromDenseQkTheAttendedTokenIsKept) {
  // 1 KV head, 2 query heads, head_dim 2, 10 tokens. Keys are small except key 3, which aligns
  // with every query: the observation window's softmax rows put their mass on it.
  const int64_t n = 10, window = 2;
  std::vector<float> k(n * 2, 0.01f);
  k[3 * 2 + 0] = 4.0f;
  k[3 * 2 + 1] = 4.0f;
  std::vector<float> q(window * 2 * 2, 1.0f);  // [window queries, 2 q heads, 2]
  const std::vector<int64_t> query_pos = {n - 2, n - 1};
  const std::vector<float> w = ReferenceAttentionWeights(
      q, k, query_pos, {.num_q_heads = 2, .num_kv_heads = 1, .head_dim = 2, .num_keys = n});
  KvEvictionPolicy p = Policy(KvEvictionMethod::kSnapKv, window + 1, 0);
  p.observation_window = window;
  p.pooling_kernel = 1;
  EXPECT_THAT(SelectSnapKv(p, Shape(1, 2, 1, n), w).at(0, 0), ElementsAre(3, 8, 9));
}

// ---- PyramidKV ----

TEST(PyramidKvTest, BudgetsDecreaseAndSumToTheTotal) {
  // 4 layers, budget 20, window 4 (observation), no sinks: P = 4, C = 16, 100 tokens.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kPyramidKv, 20, 0);
  p.observation_window = 4;
  p.pyramid_beta = 2;  // c_min 8, c_max 24, c_l = 24, 18.67, 13.33, 8 -> 24, 19, 13, 8
  EXPECT_THAT(PyramidKvLayerBudgets(p, 4, 100), ElementsAre(28, 23, 17, 12));
  p.pyramid_beta = 20;  // c_min 0, c_max 32, c_l = 32, 21.33, 10.67, 0 -> 32, 21, 11, 0
  EXPECT_THAT(PyramidKvLayerBudgets(p, 4, 100), ElementsAre(36, 25, 15, 4));
  p.pyramid_beta = 1;  // uniform: SnapKV
  EXPECT_THAT(PyramidKvLayerBudgets(p, 4, 100), ElementsAre(20, 20, 20, 20));
  EXPECT_THAT(PyramidKvLayerBudgets(p, 1, 100), ElementsAre(20));
}

TEST(PyramidKvTest, LowestLayerCapsAtTheSequence) {
  // 30 tokens: S = 26 selectable < c_max 32, so c_max = 26, c_min = 32 - 26 = 6:
  // c_l = 26, 19.33, 12.67, 6 -> 26, 19, 13, 6; layer 0 keeps all 30 tokens.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kPyramidKv, 20, 0);
  p.observation_window = 4;
  EXPECT_THAT(PyramidKvLayerBudgets(p, 4, 30), ElementsAre(30, 23, 17, 10));
  // Short sequences keep everything in every layer.
  EXPECT_THAT(PyramidKvLayerBudgets(p, 3, 20), ElementsAre(20, 20, 20));
}

TEST(PyramidKvTest, ScheduleOverManyShapes) {
  for (int64_t layers : {2, 3, 7, 16, 32, 80}) {
    for (int64_t budget : {38, 64, 128, 1000}) {
      for (int64_t beta : {1, 2, 7, 20}) {
        for (int64_t n : {budget + 1, budget + 37, 2 * budget, 10 * budget}) {
          KvEvictionPolicy p = Policy(KvEvictionMethod::kPyramidKv, budget, 4);
          p.pyramid_beta = beta;
          const std::vector<int64_t> b = PyramidKvLayerBudgets(p, layers, n);
          int64_t total = 0;
          for (int64_t l = 0; l < layers; ++l) {
            total += b[l];
            EXPECT_GE(b[l], 4 + 32);
            EXPECT_LE(b[l], n);
            if (l > 0) {
              EXPECT_LE(b[l], b[l - 1]) << "layer " << l;
            }
          }
          EXPECT_EQ(total, layers * budget)
              << "layers " << layers << " budget " << budget << " beta " << beta << " n " << n;
          if (beta > 1 && n >= 3 * budget) {
            EXPECT_GT(b.front(), b.back());
          }
        }
      }
    }
  }
}

TEST(PyramidKvTest, SelectsPerLayerWithItsBudget) {
  // 2 layers, budget 6, observation window 2, no sinks, beta 20: P = 2, C = 4, c_min 0,
  // c_max 8 -> layers keep 10 and 2 of 14 tokens. Votes rank positions 11 > 10 > ... > 0.
  KvEvictionPolicy p = Policy(KvEvictionMethod::kPyramidKv, 6, 0);
  p.observation_window = 2;
  p.pooling_kernel = 1;
  const KvEvictionShape shape = Shape(2, 1, 1, 14);
  std::vector<float> ramp(12);
  for (int64_t t = 0; t < 12; ++t) ramp[t] = static_cast<float>(t);
  const std::vector<float> w = WindowWeightsFromVotes(shape, 2, {{ramp}, {ramp}});
  const KvKeptTokens kept = SelectPyramidKv(p, shape, w);
  EXPECT_THAT(kept.at(0, 0), ElementsAreArray(Range(4, 14)));
  EXPECT_THAT(kept.at(1, 0), ElementsAre(12, 13));
  EXPECT_EQ(kept.total_kept(), 2 * 6);
}

// ---- dense attention oracle ----

TEST(ReferenceAttentionWeightsTest, CausalSoftmaxWithGqa) {
  // 2 q heads share 1 KV head; head_dim 1; keys 0..2 with values 0, 1, 2 (as k); query 0 at
  // position 1 (sees keys 0, 1), query 1 at position 2. scale 1.
  const std::vector<float> k = {0, 1, 2};
  const std::vector<float> q = {1, 0, /**/ 1, 2};  // [query, q head, dim]
  const std::vector<int64_t> pos = {1, 2};
  const std::vector<float> w = ReferenceAttentionWeights(
      q, k, pos, {.num_q_heads = 2, .num_kv_heads = 1, .head_dim = 1, .num_keys = 3,
                  .scale = 1.0f});
  ASSERT_EQ(w.size(), 2u * 2u * 3u);  // [q head, query, key]
  const double e = std::exp(1.0);
  EXPECT_NEAR(w[0], 1 / (1 + e), 1e-6);  // head 0, query 0: softmax(0, 1)
  EXPECT_NEAR(w[1], e / (1 + e), 1e-6);
  EXPECT_EQ(w[2], 0.0f);                 // masked
  const double s = 1 + e + e * e;        // head 0, query 1: softmax(0, 1, 2)
  EXPECT_NEAR(w[3], 1 / s, 1e-6);
  EXPECT_NEAR(w[5], e * e / s, 1e-6);
  EXPECT_NEAR(w[6], 0.5, 1e-6);          // head 1, query 0: q = 0 -> uniform over 2
  EXPECT_NEAR(w[7], 0.5, 1e-6);
  EXPECT_EQ(w[8], 0.0f);
  for (int64_t row = 0; row < 4; ++row) {
    EXPECT_NEAR(w[row * 3] + w[row * 3 + 1] + w[row * 3 + 2], 1.0, 1e-6);
  }
}

TEST(ReferenceAttentionWeightsTest, DefaultScaleIsInverseSqrtHeadDim) {
  // head_dim 4, q . k = 4 for key 1 and 0 for key 0: logits 0 and 4 / 2 = 2.
  const std::vector<float> k = {0, 0, 0, 0, /**/ 1, 1, 1, 1};
  const std::vector<float> q = {1, 1, 1, 1};
  const std::vector<int64_t> pos = {1};
  const std::vector<float> w = ReferenceAttentionWeights(
      q, k, pos, {.num_q_heads = 1, .num_kv_heads = 1, .head_dim = 4, .num_keys = 2});
  const double e2 = std::exp(2.0);
  EXPECT_NEAR(w[0], 1 / (1 + e2), 1e-6);
  EXPECT_NEAR(w[1], e2 / (1 + e2), 1e-6);
}

// ---- randomized property test ----

// Brute force for one head: sort every unprotected candidate by (score desc, position asc).
Positions BruteForce(int64_t n, int64_t sink, int64_t recent, int64_t selected,
                     const std::vector<float>& scores /* [n_scored] */) {
  Positions cand;
  for (int64_t t = sink; t < std::min<int64_t>(n - recent, scores.size()); ++t) cand.push_back(t);
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  cand.resize(selected);
  std::set<int64_t> kept(cand.begin(), cand.end());
  for (int64_t t = 0; t < sink; ++t) kept.insert(t);
  for (int64_t t = n - recent; t < n; ++t) kept.insert(t);
  return Positions(kept.begin(), kept.end());
}

TEST(TokenEvictionPropertyTest, RandomPoliciesAndScores) {
  std::mt19937_64 rng(13);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const KvEvictionMethod methods[] = {KvEvictionMethod::kNone, KvEvictionMethod::kStreaming,
                                      KvEvictionMethod::kH2o, KvEvictionMethod::kSnapKv,
                                      KvEvictionMethod::kPyramidKv};
  int64_t checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    KvEvictionPolicy p;
    p.method = methods[iter % 5];
    p.sink_tokens = uniform(0, 4);
    p.observation_window = uniform(1, 6);
    p.pooling_kernel = 2 * uniform(0, 3) + 1;
    p.pyramid_beta = uniform(1, 25);
    if (uniform(0, 1) == 1 && p.method != KvEvictionMethod::kStreaming) {
      p.window_tokens = p.observation_window + uniform(0, 3);
    }
    if (p.method == KvEvictionMethod::kStreaming) {
      p.budget_tokens = uniform(p.sink_tokens + 1, 20);
    } else if (p.method == KvEvictionMethod::kH2o && !p.window_tokens.has_value()) {
      p.budget_tokens = p.sink_tokens + uniform(1, 24);  // recent = (budget - sink) / 2
    } else {
      p.budget_tokens = p.sink_tokens + p.recent_tokens() + uniform(1, 12);
    }
    ASSERT_TRUE(p.Validate().ok()) << p.ToString() << ": " << p.Validate().ToString();
    const int64_t kv_heads = uniform(1, 3);
    const KvEvictionShape shape =
        Shape(uniform(1, 5), kv_heads * uniform(1, 3), kv_heads, uniform(0, 3 * p.budget_tokens));
    const int64_t n = shape.num_tokens;
    // Scores on a coarse grid so that ties are common.
    auto score = [&] { return static_cast<float>(uniform(0, 4)) * 0.25f; };
    std::vector<float> mass(shape.num_layers * kv_heads * n);
    for (float& m : mass) m = score();
    std::vector<float> window(shape.num_layers * shape.num_q_heads * p.observation_window * n);
    for (float& v : window) v = score();
    const KvKeptTokens kept =
        SelectKeptTokens(p, shape, {.accumulated_mass = mass, .window_weights = window});

    std::vector<int64_t> budgets(shape.num_layers, p.budget_tokens);
    if (p.method == KvEvictionMethod::kPyramidKv) {
      budgets = PyramidKvLayerBudgets(p, shape.num_layers, n);
    }
    ASSERT_EQ(kept.positions.size(), static_cast<size_t>(shape.num_layers * kv_heads));
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      for (int64_t g = 0; g < kv_heads; ++g) {
        const Positions& pos = kept.at(l, g);
        const std::string where = p.ToString() + " n=" + std::to_string(n) + " layer " +
                                  std::to_string(l) + " head " + std::to_string(g);
        if (p.method == KvEvictionMethod::kNone) {
          EXPECT_EQ(pos, Range(0, n)) << where;
          continue;
        }
        ASSERT_EQ(static_cast<int64_t>(pos.size()), std::min(budgets[l], n)) << where;
        EXPECT_TRUE(std::adjacent_find(pos.begin(), pos.end(), std::greater_equal<>()) ==
                    pos.end())
            << where << ": not strictly ascending";
        if (!pos.empty()) {
          EXPECT_TRUE(pos.front() >= 0 && pos.back() < n) << where;
        }
        const std::set<int64_t> s(pos.begin(), pos.end());
        for (int64_t t = 0; t < std::min(p.sink_tokens, n); ++t) EXPECT_TRUE(s.count(t)) << where;
        for (int64_t t = std::max<int64_t>(0, n - p.recent_tokens()); t < n; ++t) {
          EXPECT_TRUE(s.count(t)) << where << ": recent " << t;
        }
        if (n <= budgets[l]) continue;
        // Against brute force on the same scores.
        const int64_t recent = p.recent_tokens();
        const int64_t selected = budgets[l] - p.sink_tokens - recent;
        if (p.method == KvEvictionMethod::kH2o) {
          std::vector<float> head(mass.begin() + (l * kv_heads + g) * n,
                                  mass.begin() + (l * kv_heads + g + 1) * n);
          EXPECT_EQ(pos, BruteForce(n, p.sink_tokens, recent, selected, head)) << where;
        } else if (p.method == KvEvictionMethod::kSnapKv ||
                   p.method == KvEvictionMethod::kPyramidKv) {
          const int64_t prefix = n - p.observation_window;
          const int64_t group = shape.num_q_heads / kv_heads;
          std::vector<float> votes(prefix, 0.0f);
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            for (int64_t r = 0; r < p.observation_window; ++r) {
              const int64_t row = (l * shape.num_q_heads + h) * p.observation_window + r;
              for (int64_t t = 0; t < prefix; ++t) votes[t] += window[row * n + t];
            }
          }
          EXPECT_EQ(pos, BruteForce(n, p.sink_tokens, recent, selected,
                                    MaxPool1dSame(votes, p.pooling_kernel)))
              << where;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);  // the brute-force branch ran often
}

}  // namespace
}  // namespace kvserve
