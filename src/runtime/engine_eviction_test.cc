// Token eviction through the EngineCore on the synthetic "tiny" model: StreamingLLM keeps the
// cache at its window whatever the length (past max_model_len), compacts at the same points
// whatever the chunking (so the output does not depend on it), composes with prefix caching
// and int8 KV, and every block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kv/kv_storage.h"
#include "model/testing/synthetic_model.h"
#include "runtime/engine_core.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

LlamaModel& Model() { return kvserve::testing::SharedSyntheticModel("tiny", 11); }

PagedKvCache MakeCache(int64_t num_blocks, int64_t max_model_len, DType dtype = DType::kF32) {
  return testing::MakeTestCache(Model(), num_blocks, max_model_len, dtype, 4);
}

std::unique_ptr<EngineCore> MakeCore(PagedKvCache* cache, int64_t step_budget,
                                     bool prefix_caching = true) {
  return testing::MakeTestCore(testing::TestCoreOptions(*cache, step_budget, prefix_caching),
                               Model(), cache, nullptr);
}

RequestInput Streaming(int64_t prompt_len, int64_t max_tokens, int64_t budget) {
  RequestInput in;
  for (int64_t i = 0; i < prompt_len; ++i) in.prompt_ids.push_back(1 + (i * 7) % 50);
  in.max_tokens = max_tokens;
  in.sampling.temperature = 0.0f;
  in.ignore_eos = true;
  in.kv_policy.method = KvEvictionMethod::kStreaming;
  in.kv_policy.budget_tokens = budget;
  return in;
}

struct RunResult {
  std::vector<TokenId> tokens;
  int64_t max_slots = 0;  // the largest table seen between steps
  RequestOutput last;
};

RunResult RunOne(EngineCore& core, RequestInput in) {
  RunResult run;
  EXPECT_TRUE(core.add_request(1, std::move(in)).ok());
  while (core.has_unfinished()) {
    for (RequestOutput& o : core.step().outputs) {
      run.tokens.insert(run.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) run.last = o;
    }
    if (core.kv_manager().has_sequence(1)) {
      run.max_slots = std::max(run.max_slots, core.kv_manager().block_table(1).num_tokens());
    }
  }
  return run;
}

TEST(EngineEvictionTest, StreamingMemoryIsBoundedPastTheContextAndChunkingDoesNotMatter) {
  // Window: 12 tokens (4 sinks + 8 recent) + one 4-token block of slack.
  const int64_t budget = 12, max_model_len = 32;
  std::vector<TokenId> reference;
  for (int64_t step_budget : {64, 5, 4}) {
    PagedKvCache cache = MakeCache(64, max_model_len);
    auto core = MakeCore(&cache, step_budget);
    // 40 prompt + 60 output tokens: three times the model length.
    const RunResult run = RunOne(*core, Streaming(40, 60, budget));
    ASSERT_EQ(run.tokens.size(), 60u) << "step budget " << step_budget;
    EXPECT_EQ(run.last.finish_reason, FinishReason::kLength);
    EXPECT_LE(run.max_slots, budget + 4);
    EXPECT_LE(run.last.num_kv_tokens, budget + 4);
    EXPECT_EQ(run.last.num_kv_tokens + run.last.num_kv_tokens_evicted, 40 + 60 - 1);
    if (reference.empty()) {
      reference = run.tokens;
    } else {
      EXPECT_EQ(run.tokens, reference) << "step budget " << step_budget;
    }
    EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
  }
}

TEST(EngineEvictionTest, WithinTheWindowStreamingEqualsTheFullCache) {
  PagedKvCache cache = MakeCache(64, 64);
  auto core = MakeCore(&cache, 64);
  const RunResult streaming = RunOne(*core, Streaming(6, 9, 12));  // 15 tokens < 12 + 4
  RequestInput full = Streaming(6, 9, 12);
  full.kv_policy = KvEvictionPolicy{};
  const RunResult plain = RunOne(*core, full);
  EXPECT_EQ(streaming.tokens, plain.tokens);
  EXPECT_EQ(streaming.last.num_kv_tokens_evicted, 0);
}

TEST(EngineEvictionTest, StreamingDiffersFromTheFullCacheOnceItEvicts) {
  PagedKvCache cache = MakeCache(64, 128);
  auto core = MakeCore(&cache, 64);
  const RunResult streaming = RunOne(*core, Streaming(40, 20, 12));
  RequestInput full = Streaming(40, 20, 12);
  full.kv_policy = KvEvictionPolicy{};
  const RunResult plain = RunOne(*core, full);
  EXPECT_NE(streaming.tokens, plain.tokens);  // the model saw less: the eviction is real
  EXPECT_GT(streaming.last.num_kv_tokens_evicted, 0);
}

TEST(EngineEvictionTest, PrefixCacheStaysReusableAndInt8Works) {
  PagedKvCache cache = MakeCache(64, 64, DType::kI8);
  auto core = MakeCore(&cache, 64);
  RequestInput full = Streaming(40, 4, 12);
  full.kv_policy = KvEvictionPolicy{};
  RunOne(*core, full);  // caches the 40-token prompt's 9 full blocks
  const RunResult streaming = RunOne(*core, Streaming(40, 10, 12));
  EXPECT_EQ(streaming.tokens.size(), 10u);
  EXPECT_LE(streaming.max_slots, 16);
  // The streaming request read at most its window from the cache and wrote nothing into it:
  // a full-cache request still finds the whole prefix.
  const PrefixMatch m = core->kv_manager().match(core->scheduler_config().model_namespace,
                                                 full.prompt_ids);
  EXPECT_EQ(m.num_cached_tokens, 36);
  core->check_invariants();
}

TEST(EngineEvictionTest, ACompactionThePoolCannotHoldPreemptsInsteadOfCrashing) {
  // Two streaming requests (budget 16, 4-token blocks) share their first 16 prompt tokens.
  // In a 7-block pool the 4 shared blocks and each one's own block leave one free; when the
  // first reaches 20 slots its compaction needs 4 blocks but only its own comes back (the
  // prefix is the other's too): it is preempted, recomputed later, and its output is what it
  // is alone.
  RequestInput a = Streaming(18, 8, 16), b = Streaming(18, 8, 16);
  b.prompt_ids[16] = 60;
  b.prompt_ids[17] = 61;
  std::vector<TokenId> alone;
  {
    PagedKvCache big = MakeCache(64, 64);
    auto core = MakeCore(&big, 64);
    alone = RunOne(*core, a).tokens;
  }
  PagedKvCache cache = MakeCache(7, 28);
  auto core = MakeCore(&cache, 64);
  ASSERT_TRUE(core->add_request(1, a).ok());
  ASSERT_TRUE(core->add_request(2, b).ok());
  std::vector<TokenId> tokens_a, tokens_b;
  for (int steps = 0; core->has_unfinished() && steps < 1000; ++steps) {
    for (RequestOutput& o : core->step().outputs) {
      auto& t = o.id == 1 ? tokens_a : tokens_b;
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
    core->check_invariants();
  }
  EXPECT_FALSE(core->has_unfinished());
  EXPECT_EQ(tokens_a.size(), 8u);
  EXPECT_EQ(tokens_b.size(), 8u);
  EXPECT_EQ(tokens_a, alone);
  EXPECT_GE(core->scheduler().stats().num_preemptions_total, 1);
  EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
}

TEST(EngineEvictionTest, InvalidPoliciesAreRefusedNamingTheField) {
  PagedKvCache cache = MakeCache(64, 32);
  auto core = MakeCore(&cache, 64);
  RequestInput in = Streaming(10, 4, 12);
  in.kv_policy.budget_tokens = 2;  // not more than the sinks
  Status s = core->ValidateInput(in);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kv_policy"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("budget_tokens"), std::string::npos) << s.message();
  in.kv_policy.budget_tokens = 40;  // the window does not fit max_model_len 32
  EXPECT_FALSE(core->ValidateInput(in).ok());
  // Without eviction a prompt past max_model_len is refused; with streaming it runs.
  RequestInput long_prompt = Streaming(50, 4, 12);
  EXPECT_TRUE(core->ValidateInput(long_prompt).ok());
  long_prompt.kv_policy = KvEvictionPolicy{};
  EXPECT_FALSE(core->ValidateInput(long_prompt).ok());
}

}  // namespace
}  // namespace kvserve
