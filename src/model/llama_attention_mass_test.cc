// The paged forward pass's attention statistics (AttentionMassRequest, per-layer key_begin)
// against the dense path's double-precision reference (Forward(..., attention_mass)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kv/block_table.h"
#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "model/llama.h"
#include "model/synthetic.h"
#include "model/testing/synthetic_model.h"

namespace kvserve {
namespace {

LlamaModel& Model() { return kvserve::testing::SharedSyntheticModel("tiny", 21); }

// A sequence of 150 tokens in chunks of 1, 60, 40 and single decode steps, next to another
// sequence that records nothing: each layer's recorded mass equals the reference (rows from
// first_row of the first recorded chunk on), in f32 and int8 KV, with and without threads.
TEST(LlamaAttentionMassTest, PagedMassEqualsDenseReference) {
  LlamaModel& model = Model();
  const ModelConfig& c = model.config();
  const int64_t n = 150, block_size = 16, kvh = c.num_kv_heads;
  const std::vector<TokenId> tokens = SyntheticTokenIds(n, c.vocab_size);
  const int64_t record_from = 30;  // positions whose rows are recorded

  std::vector<float> want;
  {
    auto dense = model.NewCache(n);
    std::vector<float> logits(c.vocab_size);
    const std::vector<TokenId> head(tokens.begin(), tokens.begin() + record_from);
    const std::vector<TokenId> tail(tokens.begin() + record_from, tokens.end());
    ASSERT_TRUE(model.Forward(head, dense.get(), nullptr, logits.data()).ok());
    ASSERT_TRUE(model.Forward(tail, dense.get(), nullptr, logits.data(), false, &want).ok());
  }
  ThreadPool pool(2);
  for (DType dtype : {DType::kF32, DType::kI8}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      auto storage = KvStorage::Create(model.kv_spec(dtype, block_size), 24);
      ASSERT_TRUE(storage.ok());
      BlockTable table(block_size), other(block_size);
      std::vector<BlockId> ids, other_ids;
      for (BlockId b = 0; b < 10; ++b) ids.push_back(23 - b);
      for (BlockId b = 0; b < 10; ++b) other_ids.push_back(b);
      table.append_blocks(ids);
      other.append_blocks(other_ids);
      const int64_t stride = n + 5;
      std::vector<float> got(c.num_layers * kvh * stride, 0.0f);
      std::vector<float> logits(2 * c.vocab_size);
      int64_t pos = 0;
      for (int64_t chunk : {1, 60, 40, 1, 1, 1, 1, 45}) {
        ForwardBatch batch;
        batch.AddSequence(tokens.data() + pos, 1, other.num_tokens(), other);
        batch.AddSequence(tokens.data() + pos, chunk, pos, table);
        std::vector<AttentionMassRequest> mass;
        if (pos + chunk > record_from) {
          mass.push_back({1, std::max<int64_t>(0, record_from - pos), got.data(), stride});
        }
        ASSERT_TRUE(model.Forward(batch, storage->get(), p, logits.data(), mass).ok());
        other.set_num_tokens(other.num_tokens() + 1);
        pos += chunk;
        table.set_num_tokens(pos);
      }
      ASSERT_EQ(pos, n);
      const double tolerance = dtype == DType::kF32 ? 1e-4 : 2e-2;
      for (int64_t l = 0; l < c.num_layers; ++l) {
        double total = 0.0;
        for (int64_t h = 0; h < kvh; ++h) {
          for (int64_t t = 0; t < n; ++t) {
            const float w = want[(l * kvh + h) * n + t];
            const float g = got[(l * kvh + h) * stride + t];
            ASSERT_NEAR(g, w, tolerance * (1.0 + w))
                << DTypeName(dtype) << " layer " << l << " head " << h << " slot " << t;
            total += g;
          }
        }
        // Every recorded (row, query head) spreads a weight of 1.
        EXPECT_NEAR(total, static_cast<double>((n - record_from) * c.num_heads), 1e-2);
      }
    }
  }
}

// Per-layer key_begin (PyramidKV's padding slots): a step whose layers read only slots 8.. of
// a 40-slot table gives the logits of a table holding only those slots' K/V (positions kept by
// the position offset); a key_begin past the step's first slot, or a vector of the wrong
// length, is refused.
TEST(LlamaAttentionMassTest, LayerKeyBeginSkipsTheFirstSlots) {
  LlamaModel& model = Model();
  const ModelConfig& c = model.config();
  const int64_t block_size = 4;
  const std::vector<TokenId> tokens = SyntheticTokenIds(40, c.vocab_size);
  auto storage = KvStorage::Create(model.kv_spec(DType::kF32, block_size), 24);
  ASSERT_TRUE(storage.ok());
  // Sequence A: 40 tokens, slots 0..39; then one more token attending only slots 8..40.
  BlockTable a(block_size);
  a.append_blocks({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  std::vector<float> logits(c.vocab_size);
  ForwardBatch prefill;
  prefill.AddSequence(tokens.data(), 40, 0, a);
  ASSERT_TRUE(model.Forward(prefill, storage->get(), nullptr, logits.data()).ok());
  a.set_num_tokens(40);
  const TokenId next = 7;
  ForwardBatch step;
  step.AddSequence(&next, 1, 40, a);
  step.layer_key_begin[0].assign(static_cast<size_t>(c.num_layers), 8);
  ASSERT_TRUE(model.Forward(step, storage->get(), nullptr, logits.data()).ok());
  // Sequence B: tokens 8..39 at positions 8..39 in slots 0..31 (position offset 8), then the
  // same token: the same keys and values in the same positions.
  BlockTable b(block_size);
  b.append_blocks({12, 13, 14, 15, 16, 17, 18, 19, 20});
  std::vector<float> b_logits(c.vocab_size);
  // Computing B's tokens would give other K/V (they would not see tokens 0..7): copy A's
  // stored K/V of slots 8..39 into B's slots instead.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::vector<std::vector<int64_t>> from(c.num_kv_heads), to(c.num_kv_heads);
    for (int64_t h = 0; h < c.num_kv_heads; ++h) {
      for (int64_t t = 0; t < 32; ++t) {
        from[h].push_back(a.slot(8 + t));
        to[h].push_back(b.slot(t));
      }
    }
    KvStorage::SlotRows rows;
    (*storage)->GatherHeadSlots(l, from, &rows);
    (*storage)->ScatterHeadSlots(l, to, rows);
  }
  b.set_num_tokens(32);
  ForwardBatch b_step;
  b_step.AddSequence(&next, 1, 32, b, false, 8);
  ASSERT_TRUE(model.Forward(b_step, storage->get(), nullptr, b_logits.data()).ok());
  for (int64_t i = 0; i < c.vocab_size; ++i) ASSERT_NEAR(logits[i], b_logits[i], 1e-4) << i;
  // A key_begin past the first new token's slot is refused.
  ForwardBatch bad;
  bad.AddSequence(&next, 1, 40, a);
  bad.layer_key_begin[0].assign(static_cast<size_t>(c.num_layers), 41);
  EXPECT_FALSE(model.Forward(bad, storage->get(), nullptr, logits.data()).ok());
  bad.layer_key_begin[0].assign(2, 0);  // wrong number of layers
  EXPECT_FALSE(model.Forward(bad, storage->get(), nullptr, logits.data()).ok());
  // Mass requests out of range, too short or repeated are refused.
  ForwardBatch ok;
  ok.AddSequence(&next, 1, 40, a);
  std::vector<float> mass(c.num_layers * c.num_kv_heads * 41);
  const AttentionMassRequest good{0, 0, mass.data(), 41};
  for (const std::vector<AttentionMassRequest>& reqs :
       std::vector<std::vector<AttentionMassRequest>>{
           {{1, 0, mass.data(), 41}}, {{0, 0, mass.data(), 40}}, {{0, 2, mass.data(), 41}},
           {{0, 0, nullptr, 41}}, {good, good}}) {
    EXPECT_FALSE(model.Forward(ok, storage->get(), nullptr, logits.data(), reqs).ok());
  }
  EXPECT_TRUE(model.Forward(ok, storage->get(), nullptr, logits.data(), {&good, 1}).ok());
}

}  // namespace
}  // namespace kvserve
