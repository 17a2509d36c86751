#include "kvtier/kv_tier_manager.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvtier/disk_kv_store.h"
#include "kvtier/kv_block_record.h"
#include "kvtier/testing/memory_kv_store.h"

namespace kvserve {
namespace {
namespace fs = std::filesystem;

constexpr uint64_t kFingerprint = 0x5eed;
constexpr int64_t kBlockBytes = 64;

using FakeStore = testing::MemoryKvStore;

KvTierBlock Block(uint64_t key, uint64_t parent) {
  return {key, parent, {static_cast<TokenId>(key), static_cast<TokenId>(key + 1)}};
}
std::string Payload(uint64_t key) { return std::string(kBlockBytes, static_cast<char>('a' + key)); }
void Offer(KvTierManager* m, uint64_t key, uint64_t parent) {
  const std::string p = Payload(key);
  m->Offer(Block(key, parent), [&](uint8_t* out) { std::memcpy(out, p.data(), p.size()); });
}

// Waits until `done` holds (at most 5 s).
template <typename F>
bool WaitFor(F done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Starts a load and gathers its chunks (checking their order) into one result.
KvTierLoadResult LoadAndWait(KvTierManager* m, KvTierLoadRequest req) {
  const int64_t first = req.first_block;
  m->StartLoad(std::move(req));
  KvTierLoadResult all;
  all.first_block = first;
  bool last = false;
  EXPECT_TRUE(WaitFor([&] {
    for (KvTierLoadResult& r : m->TakeLoaded()) {
      EXPECT_FALSE(last) << "a chunk after the last";
      EXPECT_EQ(r.load_first_block, first);
      EXPECT_EQ(r.first_block, first + all.num_blocks());
      all.id = r.id;
      for (size_t i = 0; i < r.payloads.size(); ++i) {
        all.payloads.push_back(r.payloads[i]);
        all.tiers.push_back(r.tiers[i]);
      }
      last = r.last;
      m->Recycle(std::move(r.payloads));
    }
    return last;
  }));
  return all;
}

class KvTierManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvserve_tiers_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A manager over a disk store in dir_ and, with `redis`, a fake Redis (kept in redis_).
  std::unique_ptr<KvTierManager> Make(bool disk, bool redis) {
    KvTierManagerOptions o;
    o.fingerprint = kFingerprint;
    o.block_size = 2;
    o.block_bytes = kBlockBytes;
    if (disk) o.disk = std::move(DiskKvStore::Open({dir_.string(), kFingerprint, 1 << 20})).value();
    if (redis) {
      auto r = std::make_unique<FakeStore>(KvTier::kRedis);
      redis_ = r.get();
      o.redis = std::move(r);
    }
    return std::move(KvTierManager::Create(std::move(o))).value();
  }
  fs::path dir_;
  FakeStore* redis_ = nullptr;
};

TEST_F(KvTierManagerTest, WritesThroughAndLoadsBackInOrder) {
  auto m = Make(/*disk=*/true, /*redis=*/false);
  EXPECT_TRUE(m->wants(1));
  for (uint64_t k = 1; k <= 3; ++k) Offer(m.get(), k, k - 1);
  ASSERT_TRUE(WaitFor([&] { return m->stats().tiers[1].blocks_written == 3; }));
  EXPECT_FALSE(m->wants(1));  // on disk: not copied again
  EXPECT_TRUE(m->may_have(1));
  EXPECT_FALSE(m->may_have(9));
  KvTierLoadRequest req{7, 5, {Block(1, 0), Block(2, 1), Block(3, 2), Block(4, 3)}};
  KvTierLoadResult r = LoadAndWait(m.get(), req);
  EXPECT_EQ(r.id, 7);
  EXPECT_EQ(r.first_block, 5);
  ASSERT_EQ(r.num_blocks(), 3);  // block 4 was never written
  for (uint64_t k = 1; k <= 3; ++k) {
    EXPECT_EQ(r.payloads[k - 1], Payload(k));
    EXPECT_EQ(r.tiers[k - 1], KvTier::kDisk);
  }
  const KvTierStats s = m->stats();
  EXPECT_EQ(s.tiers[1].blocks_read, 3);
  EXPECT_EQ(s.tiers[1].stored_blocks, 3);
  EXPECT_EQ(s.loads, 1);
  EXPECT_EQ(s.loads_with_hits, 1);
}

TEST_F(KvTierManagerTest, HandsOutLongLoadsInChunks) {
  auto m = Make(true, false);  // chunks of 16
  KvTierLoadRequest req{3, 0, {}};
  for (uint64_t k = 1; k <= 40; ++k) {
    Offer(m.get(), k, k - 1);
    req.blocks.push_back(Block(k, k - 1));
  }
  ASSERT_TRUE(WaitFor([&] { return m->stats().tiers[1].blocks_written == 40; }));
  m->StartLoad(req);
  std::vector<KvTierLoadResult> chunks;
  ASSERT_TRUE(WaitFor([&] {
    for (auto& r : m->TakeLoaded()) chunks.push_back(std::move(r));
    return !chunks.empty() && chunks.back().last;
  }));
  ASSERT_EQ(chunks.size(), 3u);  // 16 + 16 + 8 (the last)
  EXPECT_EQ(chunks[0].num_blocks(), 16);
  EXPECT_EQ(chunks[1].first_block, 16);
  EXPECT_EQ(chunks[2].num_blocks(), 8);
  EXPECT_EQ(chunks[2].payloads[7], Payload(40));
  EXPECT_EQ(m->num_loads_in_flight(), 0);
}

TEST_F(KvTierManagerTest, AnnouncesBlocksWrittenToDisk) {
  KvTierManagerOptions o;
  o.fingerprint = kFingerprint;
  o.block_size = 2;
  o.block_bytes = kBlockBytes;
  o.disk = std::move(DiskKvStore::Open({dir_.string(), kFingerprint, 1 << 20})).value();
  std::mutex mu;
  std::vector<KvCacheEvent> events;
  o.on_disk_events = [&](std::vector<KvCacheEvent> batch) {
    std::lock_guard<std::mutex> lock(mu);
    for (KvCacheEvent& e : batch) events.push_back(std::move(e));
  };
  auto m = std::move(KvTierManager::Create(std::move(o))).value();
  Offer(m.get(), 1, 0);
  Offer(m.get(), 2, 1);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return events.size() == 2;
  }));
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::kBlockStored);
  EXPECT_EQ(events[0].block_hashes, std::vector<uint64_t>{1});
  EXPECT_FALSE(events[0].parent_block_hash.has_value());
  EXPECT_EQ(events[1].parent_block_hash, 1u);
  EXPECT_EQ(events[1].token_ids, Block(2, 1).tokens);
  EXPECT_EQ(events[1].medium, "DISK");
}

TEST_F(KvTierManagerTest, NeverHandsOutACorruptedOrMismatchedBlock) {
  auto m = Make(true, false);
  for (uint64_t k = 1; k <= 3; ++k) Offer(m.get(), k, k - 1);
  ASSERT_TRUE(WaitFor([&] { return m->stats().tiers[1].blocks_written == 3; }));
  // Flip one payload byte of block 2's file.
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.path().filename() == "0000000000000002.kvb") {
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(70);
      f.put('X');
    }
  }
  KvTierLoadResult r = LoadAndWait(m.get(), {1, 0, {Block(1, 0), Block(2, 1), Block(3, 2)}});
  EXPECT_EQ(r.num_blocks(), 1);
  EXPECT_EQ(m->stats().tiers[1].corrupt_blocks, 1);
  EXPECT_TRUE(m->wants(2));  // dropped from the tier: it will be written again
  // A block whose tokens differ from the prompt's (a key collision) is not used either.
  KvTierBlock other = Block(1, 0);
  other.tokens[0] = 99;
  EXPECT_EQ(LoadAndWait(m.get(), {2, 0, {other}}).num_blocks(), 0);
}

TEST_F(KvTierManagerTest, ReadsRedisForWhatDiskLacks) {
  auto m = Make(true, true);
  Offer(m.get(), 1, 0);
  ASSERT_TRUE(WaitFor([&] {
    const KvTierStats s = m->stats();
    return s.tiers[1].blocks_written == 1 && s.tiers[2].blocks_written == 1;
  }));
  // Block 2 only in Redis (another replica wrote it).
  ASSERT_TRUE(redis_->Put(2, EncodeKvBlockRecord(kFingerprint, 2, 1, Block(2, 1).tokens,
                                                 Payload(2))).ok());
  KvTierLoadResult r = LoadAndWait(m.get(), {1, 0, {Block(1, 0), Block(2, 1), Block(3, 2)}});
  ASSERT_EQ(r.num_blocks(), 2);
  EXPECT_EQ(r.tiers[0], KvTier::kDisk);
  EXPECT_EQ(r.tiers[1], KvTier::kRedis);
  EXPECT_EQ(r.payloads[1], Payload(2));
}

TEST_F(KvTierManagerTest, ARedisOutageCostsHitsNeverErrors) {
  auto m = Make(false, true);
  redis_->down = true;
  Offer(m.get(), 1, 0);
  ASSERT_TRUE(WaitFor([&] { return m->stats().tiers[2].write_errors == 1; }));
  EXPECT_EQ(LoadAndWait(m.get(), {1, 0, {Block(1, 0)}}).num_blocks(), 0);
  KvTierStats s = m->stats();
  EXPECT_FALSE(s.tiers[2].available);
  EXPECT_EQ(s.tiers[2].read_errors, 1);
  // Back up: a failed publish is retried when the block is offered again.
  redis_->down = false;
  EXPECT_TRUE(m->wants(1));
  Offer(m.get(), 1, 0);
  ASSERT_TRUE(WaitFor([&] { return m->stats().tiers[2].blocks_written == 1; }));
  EXPECT_EQ(LoadAndWait(m.get(), {1, 0, {Block(1, 0)}}).num_blocks(), 1);
  EXPECT_TRUE(m->stats().tiers[2].available);
}

TEST_F(KvTierManagerTest, DropsWritesBeyondItsQueueAndFlushesTheRestOnDestruction) {
  KvTierManagerOptions o;
  o.fingerprint = kFingerprint;
  o.block_size = 2;
  o.block_bytes = kBlockBytes;
  auto store = std::make_unique<FakeStore>(KvTier::kRedis);
  store->put_delay = std::chrono::milliseconds(20);  // the writer falls behind 50 quick offers
  const std::shared_ptr<std::atomic<int64_t>> puts = store->puts;
  o.redis = std::move(store);
  o.max_queued_write_bytes = 300;  // about two 128-byte records
  auto m = std::move(KvTierManager::Create(std::move(o))).value();
  for (uint64_t k = 1; k <= 50; ++k) Offer(m.get(), k, k - 1);
  const int64_t dropped = m->stats().tiers[2].writes_dropped;  // final: only Offer drops
  EXPECT_GT(dropped, 0);
  m.reset();  // joins after writing what was queued (the store goes with it)
  EXPECT_EQ(puts->load(), 50 - dropped);
}

TEST_F(KvTierManagerTest, RefusesNoStoreAndBadGeometry) {
  KvTierManagerOptions o;
  o.block_bytes = kBlockBytes;
  EXPECT_FALSE(KvTierManager::Create(std::move(o)).ok());
  KvTierManagerOptions p;
  p.redis = std::make_unique<FakeStore>(KvTier::kRedis);
  p.block_bytes = 0;
  EXPECT_FALSE(KvTierManager::Create(std::move(p)).ok());
}

}  // namespace
}  // namespace kvserve
