// KvCacheManager::compact (token eviction): shared prefix blocks are never written, the
// compaction fits unless the blocks it shares with other running sequences leave the pool
// short (can_compact says so beforehand), and every block comes back.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;

std::vector<TokenId> Range(TokenId first, TokenId last) {  // [first, last]
  std::vector<TokenId> t;
  for (TokenId x = first; x <= last; ++x) t.push_back(x);
  return t;
}

void Admit(KvCacheManager& kv, SeqId id, const std::vector<TokenId>& prompt) {
  const PrefixMatch m = kv.match("m", prompt);
  kv.start_sequence(id, "m", m);
  ASSERT_TRUE(kv.allocate_slots(id, static_cast<int64_t>(prompt.size())));
  kv.commit(id, prompt, static_cast<int64_t>(prompt.size()));
  kv.check_invariants();
}

TEST(KvCacheManagerCompactTest, SharedPrefixBlocksStayCachedAndReusable) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  const auto prompt = Range(1, 10);  // blocks 0, 1 committed, block 2 partial
  Admit(kv, 1, prompt);
  std::vector<BlockId> from_ids, to_ids;
  kv.compact(
      1, 5, [&](const BlockTable& from) { from_ids = from.block_ids(); },
      [&](const BlockTable& to) {
        to_ids = to.block_ids();
        EXPECT_EQ(to.num_tokens(), 5);
      });
  kv.check_invariants();
  EXPECT_THAT(from_ids, ElementsAre(0, 1, 2));
  // Blocks 0 and 1 are in the prefix cache, never written: the new table is elsewhere.
  ASSERT_EQ(to_ids.size(), 2u);
  for (BlockId b : to_ids) EXPECT_TRUE(b != 0 && b != 1) << b;
  EXPECT_TRUE(kv.is_detached(1));
  EXPECT_EQ(kv.block_table(1).num_tokens(), 5);
  KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 2);  // only the compacted table
  EXPECT_EQ(st.blocks_cached, 2);  // the prefix, unlocked and evictable
  EXPECT_EQ(st.blocks_in_prefix_cache, 2);

  // Another request still finds the whole prefix.
  const PrefixMatch m = kv.match("m", prompt);
  EXPECT_EQ(m.num_cached_tokens, 8);
  EXPECT_THAT(m.blocks, ElementsAre(0, 1));

  // The detached sequence grows without inserting anything.
  ASSERT_TRUE(kv.allocate_slots(1, 9));
  kv.commit_detached(1, 9);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_in_prefix_cache, 2);
  kv.free(1);
  kv.check_invariants();
  st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 0);
  EXPECT_EQ(st.blocks_free + st.blocks_cached, 8);
}

TEST(KvCacheManagerCompactTest, AFullPoolStillCompactsByEvictingItsOwnPrefix) {
  KvCacheManager kv({.num_blocks = 3, .block_size = 4});
  Admit(kv, 1, Range(1, 12));  // three committed blocks: the pool is full
  EXPECT_EQ(kv.stats().blocks_free, 0);
  bool scattered = false;
  kv.compact(
      1, 6, [](const BlockTable&) {}, [&](const BlockTable& to) {
        scattered = true;
        EXPECT_EQ(to.num_blocks(), 2);
      });
  EXPECT_TRUE(scattered);
  kv.check_invariants();
  const KvCacheManagerStats st = kv.stats();
  EXPECT_EQ(st.blocks_in_use, 2);
  EXPECT_EQ(st.evicted_blocks, 2);  // memory was short: LRU eviction of cached prefix blocks
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_in_use, 0);
}

TEST(KvCacheManagerCompactTest, WithoutPrefixCachingBlocksAreReused) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4, .enable_prefix_caching = false});
  Admit(kv, 1, Range(1, 10));
  kv.compact(1, 6, [](const BlockTable&) {}, [](const BlockTable&) {});
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_free, 2);
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_free, 4);
}

TEST(KvCacheManagerCompactTest, BlocksSharedWithRunningSequencesCanLeaveThePoolShort) {
  // Sequences 1 and 2 share a 3-block prefix; with their own last blocks the 5-block pool is
  // full. Compacting 1 to 6 tokens needs 2 blocks, but only its own last block comes back
  // (the prefix stays 2's): can_compact is false, and true again once 2 is gone.
  KvCacheManager kv({.num_blocks = 5, .block_size = 4});
  const auto shared = Range(1, 12);
  auto a = shared, b = shared;
  for (TokenId t : {100, 101, 102}) a.push_back(t);
  for (TokenId t : {200, 201, 202}) b.push_back(t);
  Admit(kv, 1, a);
  Admit(kv, 2, b);
  EXPECT_EQ(kv.stats().blocks_free + kv.stats().blocks_cached, 0);
  EXPECT_TRUE(kv.can_compact(1, 4));   // one block: its own comes back
  EXPECT_FALSE(kv.can_compact(1, 6));  // two blocks: one short
  kv.free(2);
  EXPECT_TRUE(kv.can_compact(1, 6));
  kv.compact(1, 6, [](const BlockTable&) {}, [](const BlockTable&) {});
  kv.check_invariants();
  kv.free(1);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_in_use, 0);
}

}  // namespace
}  // namespace kvserve
