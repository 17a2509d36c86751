#include "kv/block_pool.h"

#include <map>
#include <random>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kv/block_table.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;

TEST(BlockPoolTest, AllocatesLowestIdsFirstAndAllOrNothing) {
  BlockPool pool(4);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(3, &a));
  EXPECT_THAT(a, ElementsAre(0, 1, 2));
  std::vector<BlockId> b;
  EXPECT_FALSE(pool.allocate(2, &b));  // only one left: nothing handed out
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(1);
  ASSERT_TRUE(pool.allocate(2, &b));
  EXPECT_THAT(b, ElementsAre(1, 3));
  EXPECT_EQ(pool.num_in_use(), 4);
  pool.check_invariants();
}

TEST(BlockPoolTest, RefCountsAndSharing) {
  BlockPool pool(2);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(1, &a));
  pool.add_ref(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a[0]);
  EXPECT_EQ(pool.num_in_use(), 1);
  pool.release(a[0]);
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.num_free(), 2);
  pool.check_invariants();
}

TEST(BlockPoolTest, CachedBlocksAreEvictedInLruOrder) {
  BlockPool pool(4);
  std::vector<BlockId> seq;
  ASSERT_TRUE(pool.allocate(4, &seq));  // 0 1 2 3
  for (BlockId id : seq) pool.set_cached(id, true);
  pool.release_all({0, 1});  // released tail first: LRU order 1, 0
  pool.release(3);           // then 3
  EXPECT_EQ(pool.num_cached(), 3);
  EXPECT_EQ(pool.num_free(), 0);
  std::vector<BlockId> evicted;
  pool.set_evict_callback([&](BlockId id) { evicted.push_back(id); });
  // A prefix hit revives block 0: it leaves the LRU list.
  pool.add_ref(0);
  EXPECT_EQ(pool.ref_count(0), 1);
  std::vector<BlockId> got;
  ASSERT_TRUE(pool.allocate(2, &got));
  EXPECT_THAT(got, ElementsAre(1, 3));
  EXPECT_THAT(evicted, ElementsAre(1, 3));
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.num_evicted(), 2);
  EXPECT_FALSE(pool.allocate(1, &got));
  pool.check_invariants();
}

TEST(BlockPoolTest, UncachingAnUnreferencedBlockFreesIt) {
  BlockPool pool(2);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(1, &a));
  pool.set_cached(a[0], true);
  pool.release(a[0]);
  EXPECT_EQ(pool.num_cached(), 1);
  pool.set_cached(a[0], false);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 2);
  pool.check_invariants();
}

TEST(BlockPoolTest, EvictCallbackMayUncacheOtherBlocks) {
  // The prefix cache drops a whole subtree when its root block is evicted.
  BlockPool pool(3);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(3, &a));
  for (BlockId id : a) pool.set_cached(id, true);
  pool.release_all(a);  // LRU: 2, 1, 0
  pool.set_evict_callback([&](BlockId id) {
    if (id == 2) pool.set_cached(1, false);
  });
  std::vector<BlockId> got;
  ASSERT_TRUE(pool.allocate(2, &got));
  EXPECT_THAT(got, ElementsAre(2, 1));
  EXPECT_EQ(pool.num_evicted(), 1);
  EXPECT_EQ(pool.num_cached(), 1);
  pool.check_invariants();
}

// Random operations against a brute-force model of the states.
TEST(BlockPoolTest, RandomOperationsKeepInvariants) {
  std::mt19937 rng(7);
  const int kBlocks = 37;
  BlockPool pool(kBlocks);
  std::map<BlockId, int> refs;  // model: ref counts
  std::set<BlockId> cached;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0) {
      const int n = static_cast<int>(rng() % 5);
      const int64_t available = pool.num_available();
      std::vector<BlockId> got;
      const bool ok = pool.allocate(n, &got);
      ASSERT_EQ(ok, n <= available);
      for (BlockId id : got) {
        ASSERT_EQ(refs[id], 0);
        refs[id] = 1;
        cached.erase(id);
      }
    } else if (!refs.empty()) {
      auto it = refs.begin();
      std::advance(it, static_cast<long>(rng() % refs.size()));
      const BlockId id = it->first;
      if (op == 1 && it->second > 0) {
        pool.release(id);
        --it->second;
      } else if (op == 2 && (it->second > 0 || cached.count(id))) {
        pool.add_ref(id);
        ++it->second;
      } else if (op == 3 && it->second > 0) {
        const bool c = rng() % 2;
        pool.set_cached(id, c);
        if (c) cached.insert(id); else cached.erase(id);
      }
    }
    pool.check_invariants();
    int64_t in_use = 0, num_cached = 0;
    for (auto& [id, r] : refs) {
      ASSERT_EQ(pool.ref_count(id), r);
      in_use += r > 0;
      num_cached += r == 0 && cached.count(id);
    }
    ASSERT_EQ(pool.num_in_use(), in_use);
    ASSERT_EQ(pool.num_cached(), num_cached);
  }
}

TEST(BlockTableTest, SlotsAndGrowth) {
  BlockTable table(4);
  EXPECT_EQ(table.blocks_needed(0), 0);
  EXPECT_EQ(table.blocks_needed(1), 1);
  EXPECT_EQ(table.blocks_needed(9), 3);
  table.append_blocks({7, 2, 5});
  table.set_num_tokens(9);
  EXPECT_EQ(table.slot(0), 28);
  EXPECT_EQ(table.slot(3), 31);
  EXPECT_EQ(table.slot(4), 8);
  EXPECT_EQ(table.slot(8), 20);
  EXPECT_EQ(table.blocks_needed(12), 0);
  EXPECT_EQ(table.blocks_needed(13), 1);
  EXPECT_THAT(table.clear(), ElementsAre(7, 2, 5));
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_EQ(table.num_blocks(), 0);
}

}  // namespace
}  // namespace kvserve
