// EngineCore on the synthetic "tiny" model (f32 KV): the context limit, the footprint of a
// finished sequence, determinism across thread counts, scoring requests (prompt logits
// against the dense reference path, chunked, with and without prefix caching), validation,
// and every block back at the end.
#include "runtime/engine_core.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kv/kv_storage.h"
#include "model/testing/synthetic_model.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

LlamaModel& Model() { return kvserve::testing::SharedSyntheticModel("tiny", 11); }

PagedKvCache MakeCache(int64_t num_blocks, int64_t max_model_len, int64_t block_size = 16) {
  return testing::MakeTestCache(Model(), num_blocks, max_model_len, DType::kF32, block_size);
}

std::unique_ptr<EngineCore> MakeCore(PagedKvCache* cache, ThreadPool* pool, int64_t budget,
                                     bool prefix_caching = true) {
  return testing::MakeTestCore(testing::TestCoreOptions(*cache, budget, prefix_caching), Model(),
                               cache, pool);
}

// Runs one request to its end; returns its outputs in order.
std::vector<RequestOutput> RunOne(EngineCore& core, SeqId id, RequestInput in) {
  EXPECT_TRUE(core.add_request(id, std::move(in)).ok());
  return testing::RunToEnd(core);
}

std::vector<TokenId> Tokens(const std::vector<RequestOutput>& outs) {
  std::vector<TokenId> ids;
  for (const RequestOutput& o : outs) {
    ids.insert(ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  }
  return ids;
}

RequestInput Greedy(std::vector<TokenId> prompt, int64_t max_tokens) {
  return testing::GreedyRequest(std::move(prompt), max_tokens);
}

TEST(EngineCoreTest, StopsAtTheContextLimitAndReportsTheFootprint) {
  PagedKvCache cache = MakeCache(8, 16);
  ThreadPool pool(1);
  auto core = MakeCore(&cache, &pool, 16);
  // prompt + output <= max_model_len (vLLM's --max-model-len).
  auto outs = RunOne(*core, 1, Greedy({5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 100));
  ASSERT_FALSE(outs.empty());
  EXPECT_EQ(Tokens(outs).size(), 6u);
  const RequestOutput& last = outs.back();
  EXPECT_EQ(last.finish_reason, FinishReason::kLength);
  EXPECT_EQ(last.num_kv_tokens, 15);  // the last token is sampled, never fed
  EXPECT_EQ(last.num_kv_blocks, 1);
  const KvMemoryStats ks = core->finished_sequence_memory_stats(last);
  EXPECT_EQ(ks.num_tokens_stored, 15);
  EXPECT_EQ(ks.num_blocks_in_use, 1);
  EXPECT_EQ(ks.bytes_reserved, cache.spec.bytes_per_block());
  EXPECT_NEAR(ks.fragmentation_perc, 100.0 / 16.0, 1e-9);
  outs = RunOne(*core, 2, Greedy({5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 3));
  EXPECT_EQ(Tokens(outs).size(), 3u);

  // Refused before anything runs: a prompt that leaves no room, an empty one, a token outside
  // the vocabulary, max_tokens 0 without prompt logits.
  EXPECT_FALSE(core->add_request(3, Greedy(std::vector<TokenId>(16, 5), 4)).ok());
  EXPECT_FALSE(core->add_request(3, Greedy({}, 4)).ok());
  EXPECT_FALSE(core->add_request(3, Greedy({1, 1 << 20}, 4)).ok());
  EXPECT_FALSE(core->add_request(3, Greedy({1, 2}, 0)).ok());
  EXPECT_FALSE(core->has_unfinished());
  EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
  core->check_invariants();
}

TEST(EngineCoreTest, GreedyIsDeterministicAcrossThreadCountsAndBatching) {
  ThreadPool one(1), two(2);
  PagedKvCache a_cache = MakeCache(64, 128), b_cache = MakeCache(64, 128);
  auto a = MakeCore(&a_cache, &one, 128);
  auto b = MakeCore(&b_cache, &two, 128);
  const std::vector<TokenId> prompt = {1, 50, 60, 70};
  const std::vector<TokenId> alone = Tokens(RunOne(*a, 1, Greedy(prompt, 12)));
  EXPECT_EQ(alone.size(), 12u);
  EXPECT_EQ(Tokens(RunOne(*b, 1, Greedy(prompt, 12))), alone);
  // Beside another request (one batch per step), still the same tokens.
  ASSERT_TRUE(b->add_request(2, Greedy({1, 9, 8, 7, 6, 5, 4, 3, 2}, 20)).ok());
  std::vector<TokenId> batched;
  ASSERT_TRUE(b->add_request(3, Greedy(prompt, 12)).ok());
  while (b->has_unfinished()) {
    for (const RequestOutput& o : b->step().outputs) {
      if (o.id == 3) batched.insert(batched.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  EXPECT_EQ(batched, alone);
  EXPECT_EQ(b->kv_manager().stats().blocks_in_use, 0);
}

// The logits rows of a scoring request equal the dense reference path's, for every chunking
// and with a prefix-cache hit on the blocks before prompt_logits_start.
TEST(EngineCoreTest, ScoringRequestReturnsPromptLogitsLikeTheDensePath) {
  LlamaModel& model = Model();
  const int64_t V = model.config().vocab_size;
  const int64_t n = 40;
  const std::vector<TokenId> prompt = SyntheticTokenIds(n, V);
  std::vector<float> dense(static_cast<size_t>(n * V));
  auto dense_cache = model.NewCache(n);
  ASSERT_TRUE(model.Forward(prompt, dense_cache.get(), nullptr, dense.data(), true).ok());

  for (int64_t budget : {7, 16, 64}) {
    for (bool prefix_caching : {false, true}) {
      for (int64_t start : {0, 17}) {
        PagedKvCache cache = MakeCache(16, n);  // a scoring prompt may fill max_model_len
        ThreadPool pool(2);
        auto core = MakeCore(&cache, &pool, budget, prefix_caching);
        for (int round = 0; round < 2; ++round) {  // round 1 may hit the prefix cache
          RequestInput in;
          in.prompt_ids = prompt;
          in.max_tokens = 0;
          in.prompt_logits_start = start;
          const auto outs = RunOne(*core, 10 + round, in);
          ASSERT_FALSE(outs.empty());
          EXPECT_EQ(outs.back().finish_reason, FinishReason::kLength);
          EXPECT_TRUE(Tokens(outs).empty());
          EXPECT_LE(outs.back().num_cached_prompt_tokens, start);
          if (prefix_caching && round == 1 && start == 17) {
            EXPECT_EQ(outs.back().num_cached_prompt_tokens, 16);  // one block before start
          }
          int64_t next = start;
          for (const RequestOutput& o : outs) {
            const PromptLogits& pl = o.prompt_logits;
            if (pl.num_rows == 0) continue;
            ASSERT_EQ(pl.first_position, next);
            for (int64_t r = 0; r < pl.num_rows; ++r) {
              const float* got = pl.rows.data() + r * V;
              const float* want = dense.data() + (next + r) * V;
              float max_err = 0.0f;
              for (int64_t j = 0; j < V; ++j) max_err = std::max(max_err, std::fabs(got[j] - want[j]));
              ASSERT_LT(max_err, 1e-3f) << "position " << next + r << " budget " << budget;
            }
            next += pl.num_rows;
          }
          EXPECT_EQ(next, n - 1) << "budget " << budget;
        }
        EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
      }
    }
  }
}

// A scoring request preempted by recompute mid-prompt returns every row exactly once, and
// the rows still equal the dense path's.
TEST(EngineCoreTest, PreemptedScoringRequestReturnsEachRowOnce) {
  LlamaModel& model = Model();
  const int64_t V = model.config().vocab_size;
  const std::vector<TokenId> scored = SyntheticTokenIds(40, V);
  std::vector<float> dense(static_cast<size_t>(40 * V));
  auto dense_cache = model.NewCache(40);
  ASSERT_TRUE(model.Forward(scored, dense_cache.get(), nullptr, dense.data(), true).ok());

  PagedKvCache cache = MakeCache(4, 64);  // 64 tokens: both requests cannot grow at once
  ThreadPool pool(1);
  auto core = MakeCore(&cache, &pool, 8, /*prefix_caching=*/false);
  ASSERT_TRUE(core->add_request(1, Greedy(SyntheticTokenIds(20, V / 2), 40)).ok());
  RequestInput in;
  in.prompt_ids = scored;
  in.max_tokens = 0;
  in.prompt_logits_start = 0;
  ASSERT_TRUE(core->add_request(2, in).ok());
  int64_t next = 0;
  int64_t generated = 0;
  while (core->has_unfinished()) {
    for (const RequestOutput& o : core->step().outputs) {
      if (o.id == 1) generated += static_cast<int64_t>(o.new_token_ids.size());
      const PromptLogits& pl = o.prompt_logits;
      if (o.id != 2 || pl.num_rows == 0) continue;
      ASSERT_EQ(pl.first_position, next) << "a row returned twice or skipped";
      for (int64_t r = 0; r < pl.num_rows; ++r) {
        for (int64_t j = 0; j < V; ++j) {
          ASSERT_NEAR(pl.rows[r * V + j], dense[(next + r) * V + j], 1e-3f);
        }
      }
      next += pl.num_rows;
    }
  }
  EXPECT_EQ(next, 39);
  EXPECT_EQ(generated, 40);
  EXPECT_GT(core->scheduler().stats().num_preemptions_total, 0) << "the case did not preempt";
  EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
}

TEST(EngineCoreTest, ScoringRequestValidation) {
  PagedKvCache cache = MakeCache(8, 16);
  ThreadPool pool(1);
  auto core = MakeCore(&cache, &pool, 16);
  RequestInput in;
  in.prompt_ids = std::vector<TokenId>(16, 5);  // == max_model_len: fine for scoring
  in.max_tokens = 0;
  in.prompt_logits_start = 0;
  EXPECT_TRUE(core->ValidateInput(in).ok());
  in.prompt_ids.push_back(5);
  EXPECT_FALSE(core->ValidateInput(in).ok());
  in.prompt_ids.resize(8);
  in.prompt_logits_start = 8;  // outside the prompt
  EXPECT_FALSE(core->ValidateInput(in).ok());
  in.prompt_logits_start = -2;
  EXPECT_FALSE(core->ValidateInput(in).ok());
  // Prompt logits beside generation: rows for the prompt, then tokens.
  in.prompt_logits_start = 2;
  in.max_tokens = 3;
  in.sampling.temperature = 0.0f;
  in.ignore_eos = true;
  const auto outs = RunOne(*core, 1, in);
  int64_t rows = 0;
  for (const RequestOutput& o : outs) rows += o.prompt_logits.num_rows;
  EXPECT_EQ(rows, 8 - 1 - 2);
  EXPECT_EQ(Tokens(outs).size(), 3u);
}

}  // namespace
}  // namespace kvserve
