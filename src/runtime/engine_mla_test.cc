// DeepSeek MLA + MoE models through the engine (issue 14): greedy tokens over the paged latent
// cache (absorbed attention, chunked prefill) equal the naive reference path's (the dense
// path expands every head's keys and values), alone and batched, with and without a prefix
// cache hit; int8 and fp8 latent caches run and return every block.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model/testing/synthetic_model.h"
#include "runtime/engine_core.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

RequestInput Greedy(std::vector<TokenId> prompt, int64_t max_tokens) {
  return testing::GreedyRequest(std::move(prompt), max_tokens);
}

// Greedy continuation through the dense reference path, token by token.
std::vector<TokenId> ReferenceGreedy(LlamaModel& model, const std::vector<TokenId>& prompt,
                                     int64_t n) {
  const int64_t V = model.config().vocab_size;
  auto cache = model.NewCache(static_cast<int64_t>(prompt.size()) + n);
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<TokenId> feed = prompt, out;
  for (int64_t i = 0; i < n; ++i) {
    KV_CHECK(model.Forward(feed, cache.get(), nullptr, logits.data()).ok());
    const TokenId next =
        static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    feed = {next};
  }
  return out;
}

std::vector<TokenId> Prompt(int64_t n, int64_t salt) {
  std::vector<TokenId> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<TokenId>(16 + (i * 37 + salt * 11) % 480));
  return p;
}

TEST(EngineMlaTest, GreedyEqualsTheNaiveReferenceAloneBatchedAndWithPrefixHits) {
  for (const char* preset : {"deepseek-v2-tiny", "deepseek-v3-tiny"}) {
    LlamaModel& model = testing::SharedSyntheticModel(preset, 3);
    const std::vector<TokenId> shared = Prompt(40, 1);
    std::vector<TokenId> a = shared, b = shared;
    a.insert(a.end(), {20, 21, 22});
    b.insert(b.end(), {30, 31});
    const std::vector<TokenId> ref_a = ReferenceGreedy(model, a, 10);
    const std::vector<TokenId> ref_b = ReferenceGreedy(model, b, 10);
    for (bool prefix_caching : {false, true}) {
      PagedKvCache cache = testing::MakeTestCache(model, 64, 256, DType::kF32, 16);
      ThreadPool pool(2);
      // A 24-token step budget: the prompts are prefilled in chunks.
      auto core = testing::MakeTestCore(testing::TestCoreOptions(cache, 24, prefix_caching),
                                        model, &cache, &pool);
      ASSERT_NE(core, nullptr);
      // Alone.
      ASSERT_TRUE(core->add_request(1, Greedy(a, 10)).ok());
      std::vector<TokenId> alone;
      for (const RequestOutput& o : testing::RunToEnd(*core)) {
        alone.insert(alone.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
      EXPECT_EQ(alone, ref_a) << preset;
      // Batched: both at once; with prefix caching b's shared prefix comes from a's blocks.
      ASSERT_TRUE(core->add_request(2, Greedy(a, 10)).ok());
      ASSERT_TRUE(core->add_request(3, Greedy(b, 10)).ok());
      std::vector<TokenId> got_a, got_b;
      int64_t cached_b = 0;
      for (const RequestOutput& o : testing::RunToEnd(*core)) {
        auto& dst = o.id == 2 ? got_a : got_b;
        dst.insert(dst.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.id == 3) cached_b = std::max(cached_b, o.num_cached_prompt_tokens);
      }
      EXPECT_EQ(got_a, ref_a) << preset << " prefix_caching=" << prefix_caching;
      EXPECT_EQ(got_b, ref_b) << preset << " prefix_caching=" << prefix_caching;
      if (prefix_caching) {
        EXPECT_EQ(cached_b, 32) << "two full 16-token blocks of the shared prefix";
      } else {
        EXPECT_EQ(cached_b, 0);
      }
      EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
      core->check_invariants();
    }
  }
}

TEST(EngineMlaTest, QuantizedLatentCachesRunAndReturnEveryBlock) {
  LlamaModel& model = testing::SharedSyntheticModel("deepseek-v3-tiny", 3);
  for (DType dtype : {DType::kI8, DType::kFp8E4M3, DType::kBF16}) {
    PagedKvCache cache = testing::MakeTestCache(model, 32, 128, dtype, 8);
    if (dtype == DType::kFp8E4M3) {
      KvScales scales;
      scales.k.assign(static_cast<size_t>(model.config().num_layers), 8.0f / 448.0f);
      scales.v = scales.k;
      scales.source = KvScaleSource::kManual;
      ASSERT_TRUE(cache.storage->SetScales(scales).ok());
    }
    ThreadPool pool(2);
    auto core = testing::MakeTestCore(testing::TestCoreOptions(cache, 16), model, &cache, &pool);
    ASSERT_NE(core, nullptr);
    ASSERT_TRUE(core->add_request(1, Greedy(Prompt(30, 2), 8)).ok());
    ASSERT_TRUE(core->add_request(2, Greedy(Prompt(20, 3), 8)).ok());
    int64_t tokens = 0;
    for (const RequestOutput& o : testing::RunToEnd(*core)) tokens += o.new_token_ids.size();
    EXPECT_EQ(tokens, 16) << DTypeName(dtype);
    EXPECT_EQ(core->kv_manager().stats().blocks_in_use, 0);
  }
}

}  // namespace
}  // namespace kvserve
