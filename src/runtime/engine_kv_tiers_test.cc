// An EngineCore with KV tiers: blocks written through to disk come back after a "restart"
// (a new cache and engine over the same folder), after eviction from memory, and never for
// another model; a slow tier or a damaged block costs a recompute, never a wrong token.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "kvtier/testing/memory_kv_store.h"
#include "model/testing/synthetic_model.h"
#include "runtime/engine_core.h"
#include "runtime/kv_tiers_setup.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kBlockSize = 4;

std::vector<TokenId> Prompt(TokenId first, int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<TokenId>((first + i * 7) % 250 + 1));
  return p;
}

// One server lifetime: a fresh paged cache, tiers over `dir`, an engine.
struct ServerRun {
  ServerRun(LlamaModel& model, const fs::path& dir, DType dtype, int64_t num_blocks,
      std::chrono::milliseconds load_timeout = std::chrono::milliseconds(5000)) {
    cache = testing::MakeTestCache(model, num_blocks, std::min<int64_t>(128, num_blocks * kBlockSize),
                                  dtype, kBlockSize);
    KvTierFlags flags;
    flags.offload_dir = dir.string();
    flags.offload_bytes = 64 << 20;
    auto t = CreateKvTiers(flags, KvTierFingerprint(model, nullptr, *cache.storage),
                           *cache.storage);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    tiers = std::move(t).value();
    EngineCoreOptions o = testing::TestCoreOptions(cache, 64);
    o.kv_tiers = tiers.get();
    o.kv_tier_load_timeout = load_timeout;
    core = testing::MakeTestCore(o, model, &cache, &pool);
  }
  // Runs one greedy request to its end; returns its last output.
  RequestOutput Generate(const std::vector<TokenId>& prompt, std::vector<TokenId>* tokens) {
    EXPECT_TRUE(core->add_request(next_id++, testing::GreedyRequest(prompt, 6)).ok());
    RequestOutput last;
    for (const RequestOutput& o : testing::RunToEnd(*core)) {
      tokens->insert(tokens->end(), o.new_token_ids.begin(), o.new_token_ids.end());
      last = o;
    }
    return last;
  }
  // Waits until the write-through queue is empty.
  void Flush() {
    for (int i = 0; i < 500 && tiers->stats().tiers[1].queued_write_bytes > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ThreadPool pool{1};
  PagedKvCache cache;
  std::unique_ptr<KvTierManager> tiers;
  std::unique_ptr<EngineCore> core;
  SeqId next_id = 0;
};

int64_t ByTier(const RequestOutput& o, KvTier t) {
  return o.num_cached_prompt_tokens_by_tier[static_cast<int>(t)];
}

class EngineKvTiersTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve_engine_tiers_" + std::to_string(::getpid()) + "_" +
            std::to_string(static_cast<int>(GetParam())) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(EngineKvTiersTest, ARestartServesThePrefixFromDiskWithTheSameTokens) {
  LlamaModel& model = testing::SharedSyntheticModel("tiny", 3);
  const std::vector<TokenId> prompt = Prompt(5, 37);  // 9 full blocks + 1 token
  std::vector<TokenId> first, second;
  {
    ServerRun run(model, dir_, GetParam(), 32);
    const RequestOutput o = run.Generate(prompt, &first);
    EXPECT_EQ(o.num_cached_prompt_tokens, 0);
    EXPECT_EQ(ByTier(o, KvTier::kMemory), 0);
  }  // the tiers flush their queue before they go
  ServerRun run(model, dir_, GetParam(), 32);
  const RequestOutput o = run.Generate(prompt, &second);
  EXPECT_EQ(o.num_cached_prompt_tokens, 36);
  EXPECT_EQ(ByTier(o, KvTier::kDisk), 36);
  EXPECT_EQ(ByTier(o, KvTier::kMemory), 0);
  EXPECT_EQ(second, first);  // the loaded KV is the computed KV, byte for byte
  const KvTierEngineStats& s = run.core->kv_tier_connector()->stats();
  EXPECT_EQ(s.hit_tokens[static_cast<int>(KvTier::kDisk)], 36);
  EXPECT_EQ(s.blocks_imported[static_cast<int>(KvTier::kDisk)], 9);
  // Once in memory, a repeat is a memory hit.
  std::vector<TokenId> third;
  const RequestOutput again = run.Generate(prompt, &third);
  EXPECT_EQ(ByTier(again, KvTier::kMemory), 36);
  EXPECT_EQ(third, first);
}

TEST_P(EngineKvTiersTest, BlocksEvictedFromMemoryComeBackFromDisk) {
  LlamaModel& model = testing::SharedSyntheticModel("tiny", 3);
  ServerRun run(model, dir_, GetParam(), /*num_blocks=*/12);
  const std::vector<TokenId> a = Prompt(5, 33);  // 8 blocks + 1
  std::vector<TokenId> first, ignored, second;
  run.Generate(a, &first);
  run.Flush();
  run.Generate(Prompt(100, 33), &ignored);  // evicts most of a's blocks from memory
  run.Flush();
  const RequestOutput o = run.Generate(a, &second);
  EXPECT_EQ(o.num_cached_prompt_tokens, 32);
  EXPECT_GT(ByTier(o, KvTier::kDisk), 0);
  EXPECT_EQ(ByTier(o, KvTier::kDisk) + ByTier(o, KvTier::kMemory), 32);
  EXPECT_EQ(second, first);
  run.core->check_invariants();
}

TEST_P(EngineKvTiersTest, AnotherModelNeverReadsTheBlocks) {
  const std::vector<TokenId> prompt = Prompt(5, 37);
  std::vector<TokenId> tokens;
  {
    ServerRun run(testing::SharedSyntheticModel("tiny", 3), dir_, GetParam(), 32);
    run.Generate(prompt, &tokens);
  }
  ServerRun run(testing::SharedSyntheticModel("tiny", 4), dir_, GetParam(), 32);  // other weights
  tokens.clear();
  const RequestOutput o = run.Generate(prompt, &tokens);
  EXPECT_EQ(o.finish_reason, FinishReason::kLength);
  EXPECT_EQ(o.num_cached_prompt_tokens, 0);
  run.Flush();
  // Its own 10 blocks (37 prompt + 6 generated tokens), in its own folder.
  EXPECT_EQ(run.tiers->stats().tiers[1].stored_blocks, 10);
}

TEST_P(EngineKvTiersTest, ADamagedBlockIsRecomputedNotUsed) {
  LlamaModel& model = testing::SharedSyntheticModel("tiny", 3);
  const std::vector<TokenId> prompt = Prompt(5, 37);
  std::vector<TokenId> first, second;
  {
    ServerRun run(model, dir_, GetParam(), 32);
    run.Generate(prompt, &first);
  }
  // Truncate the block files (a crash, a full disk): the first fails its check, the load
  // stops there, and the whole prefix is recomputed.
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.path().extension() == ".kvb") files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 10u);  // 37 prompt + 6 generated tokens: 10 full blocks
  for (const fs::path& f : files) fs::resize_file(f, fs::file_size(f) / 2);
  ServerRun run(model, dir_, GetParam(), 32);
  const RequestOutput o = run.Generate(prompt, &second);
  EXPECT_EQ(o.num_cached_prompt_tokens, 0);
  EXPECT_EQ(second, first);
  EXPECT_EQ(run.tiers->stats().tiers[1].corrupt_blocks, 1);  // the first: the load stops there
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EngineKvTiersTest, ::testing::Values(DType::kF32, DType::kI8),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// A store that does not answer within the load timeout: the request recomputes (the step
// never waits for it) and the late result is dropped.
TEST(EngineKvTiersTimeoutTest, ALateLoadFallsBackToRecompute) {
  LlamaModel& model = testing::SharedSyntheticModel("tiny", 3);
  PagedKvCache cache = testing::MakeTestCache(model, 32, 128, DType::kF32, kBlockSize);
  KvTierManagerOptions to;
  to.fingerprint = 1;
  to.block_size = kBlockSize;
  to.block_bytes = cache.storage->block_bytes();
  auto store = std::make_unique<testing::MemoryKvStore>(KvTier::kRedis);
  testing::MemoryKvStore* slow = store.get();
  slow->HoldLookups();  // answers nothing until the test is done
  to.redis = std::move(store);
  auto tiers = std::move(KvTierManager::Create(std::move(to))).value();
  // Released before the manager joins its loader, even when an assertion ends the test early.
  struct ReleaseAtExit {
    testing::MemoryKvStore* store;
    ~ReleaseAtExit() { store->ReleaseLookups(); }
  } release{slow};
  ThreadPool pool(1);
  EngineCoreOptions o = testing::TestCoreOptions(cache, 64);
  o.kv_tiers = tiers.get();
  o.kv_tier_load_timeout = std::chrono::milliseconds(50);
  auto core = testing::MakeTestCore(o, model, &cache, &pool);
  ASSERT_TRUE(core->add_request(1, testing::GreedyRequest(Prompt(5, 37), 4)).ok());
  const std::vector<RequestOutput> outs = testing::RunToEnd(*core);  // while the store hangs
  ASSERT_FALSE(outs.empty());
  EXPECT_EQ(outs.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(outs.back().num_cached_prompt_tokens, 0);
  EXPECT_EQ(core->kv_tier_connector()->stats().loads_timed_out, 1);
  EXPECT_EQ(slow->lookups_started(), 1);
}

}  // namespace
}  // namespace kvserve
