#include "kv/kv_stats.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

KvCacheSpec Spec() {
  KvCacheSpec spec;
  spec.num_layers = 2;
  spec.num_kv_heads = 2;
  spec.head_dim = 4;
  spec.dtype = DType::kF16;
  spec.block_size = 4;
  return spec;  // 2 * 2*2*4 * 2 bytes = 64 bytes per token, 256 per block
}

TEST(KvStatsTest, CountsReservedStoredAndFragmentation) {
  const KvCacheSpec spec = Spec();
  ASSERT_EQ(spec.bytes_per_token(), 64);
  BlockPool pool(10);
  BlockTable a(4), b(4);
  std::vector<BlockId> ids;
  ASSERT_TRUE(pool.allocate(2, &ids));
  a.append_blocks(ids);
  a.set_num_tokens(5);  // one full block + 1 token: 3 slots wasted
  ids.clear();
  ASSERT_TRUE(pool.allocate(1, &ids));
  b.append_blocks(ids);
  b.set_num_tokens(4);  // full
  const KvMemoryStats s = ComputeKvMemoryStats(spec, pool, {&a, &b});
  EXPECT_EQ(s.num_blocks, 10);
  EXPECT_EQ(s.num_blocks_in_use, 3);
  EXPECT_EQ(s.num_blocks_free, 7);
  EXPECT_EQ(s.capacity_tokens, 40);
  EXPECT_EQ(s.num_tokens_stored, 9);
  EXPECT_EQ(s.bytes_capacity, 10 * 256);
  EXPECT_EQ(s.bytes_reserved, 3 * 256);
  EXPECT_EQ(s.bytes_holding_tokens, 9 * 64);
  EXPECT_DOUBLE_EQ(s.fragmentation_perc, 100.0 * 3 / 12);
  EXPECT_DOUBLE_EQ(s.usage_perc, 30.0);
}

TEST(KvStatsTest, SharedBlocksCountOnce) {
  const KvCacheSpec spec = Spec();
  BlockPool pool(4);
  std::vector<BlockId> shared;
  ASSERT_TRUE(pool.allocate(1, &shared));
  pool.add_ref(shared[0]);  // two sequences share their first block
  BlockTable a(4), b(4);
  a.append_blocks(shared);
  b.append_blocks(shared);
  a.set_num_tokens(4);
  b.set_num_tokens(3);  // b sees the block before its 4th token
  const KvMemoryStats s = ComputeKvMemoryStats(spec, pool, {&a, &b});
  EXPECT_EQ(s.num_blocks_in_use, 1);
  EXPECT_EQ(s.num_tokens_stored, 4);
  EXPECT_DOUBLE_EQ(s.fragmentation_perc, 0.0);
}

TEST(KvStatsTest, EmptyPool) {
  BlockPool pool(3);
  const KvMemoryStats s = ComputeKvMemoryStats(Spec(), pool, {});
  EXPECT_EQ(s.num_blocks_in_use, 0);
  EXPECT_DOUBLE_EQ(s.fragmentation_perc, 0.0);
  EXPECT_DOUBLE_EQ(s.usage_perc, 0.0);
}

}  // namespace
}  // namespace kvserve
