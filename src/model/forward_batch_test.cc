#include "model/forward_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

using ::testing::ElementsAre;

TEST(ForwardBatchTest, AddSequenceBuildsFlatArrays) {
  BlockTable a(4), b(4);
  a.append_blocks({3, 1});
  a.set_num_tokens(5);  // cached: positions 0..4
  b.append_blocks({0});
  ForwardBatch batch;
  batch.AddSequence({7}, a);             // decode at position 5
  batch.AddSequence({8, 9, 10}, b, true);  // prefill 0..2 with all logits
  EXPECT_THAT(batch.token_ids, ElementsAre(7, 8, 9, 10));
  EXPECT_THAT(batch.positions, ElementsAre(5, 0, 1, 2));
  EXPECT_THAT(batch.slot_mapping, ElementsAre(1 * 4 + 1, 0, 1, 2));
  EXPECT_THAT(batch.query_start, ElementsAre(0, 1, 4));
  EXPECT_THAT(batch.seq_lens, ElementsAre(6, 3));
  EXPECT_THAT(batch.logits_indices, ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(batch.Validate(4, 4).ok());
}

// Token eviction: a compacted sequence's slots and positions differ by the evicted tokens.
TEST(ForwardBatchTest, PositionOffsetOfACompactedSequence) {
  BlockTable table(4);
  table.append_blocks({3, 1});
  table.set_num_tokens(5);  // 5 slots hold the kept tokens
  ForwardBatch batch;
  const TokenId tokens[2] = {7, 8};
  batch.AddSequence(tokens, 2, 5, table, false, /*position_offset=*/100);
  EXPECT_THAT(batch.positions, ElementsAre(105, 106));
  EXPECT_THAT(batch.slot_mapping, ElementsAre(1 * 4 + 1, 1 * 4 + 2));
  EXPECT_THAT(batch.seq_lens, ElementsAre(7));
  EXPECT_TRUE(batch.Validate(4, 4).ok());
  batch.positions = {3, 4};  // before the first slot
  EXPECT_FALSE(batch.Validate(4, 4).ok());
}

TEST(ForwardBatchTest, ValidateRejectsInconsistentBatches) {
  BlockTable a(4);
  a.append_blocks({2});
  ForwardBatch good;
  good.AddSequence({1, 2}, a);
  ASSERT_TRUE(good.Validate(4, 3).ok());
  EXPECT_FALSE(good.Validate(4, 2).ok());  // block 2 outside a 2-block cache

  ForwardBatch bad = good;
  bad.slot_mapping[1] = 0;
  EXPECT_FALSE(bad.Validate(4, 3).ok());
  bad = good;
  bad.positions[0] = 5;  // not consecutive
  EXPECT_FALSE(bad.Validate(4, 3).ok());
  bad = good;
  bad.positions = {5, 6};  // an offset (a compacted sequence's evicted slots) is fine
  EXPECT_TRUE(bad.Validate(4, 3).ok());
  bad = good;
  bad.seq_lens[0] = 9;  // table too short for 9 tokens
  EXPECT_FALSE(bad.Validate(4, 3).ok());
  bad = good;
  bad.logits_indices = {2};
  EXPECT_FALSE(bad.Validate(4, 3).ok());
  bad = good;
  bad.query_start = {0, 1};
  EXPECT_FALSE(bad.Validate(4, 3).ok());
  EXPECT_FALSE(ForwardBatch{}.Validate(4, 3).ok());
}

}  // namespace
}  // namespace kvserve
