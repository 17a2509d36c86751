// AttentionMassTracker: which rows each method records, the buffer's growth, what a compaction
// and a preemption do to it.
#include "runtime/attention_mass.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvserve {
namespace {

constexpr int64_t kLayers = 2, kKvHeads = 3;

std::unique_ptr<Request> MakeRequest(KvEvictionMethod method, int64_t prompt_len,
                                     SeqId id = 7) {
  RequestInput in;
  in.prompt_ids.assign(static_cast<size_t>(prompt_len), 5);
  in.kv_policy.method = method;
  in.kv_policy.budget_tokens = 16;
  in.kv_policy.observation_window = 8;
  auto r = std::make_unique<Request>(id, in, 0, "ns");
  r->start_running(0);
  return r;
}

// Adds `value` to every recorded slot of the request's buffer, as a forward pass would.
void Record(const AttentionMassRequest& m, int64_t num_slots, float value) {
  for (int64_t i = 0; i < kLayers * kKvHeads; ++i) {
    for (int64_t t = 0; t < num_slots; ++t) m.mass[i * m.mass_stride + t] += value;
  }
}

TEST(AttentionMassTrackerTest, WhichRowsRecord) {
  AttentionMassTracker tracker(kLayers, kKvHeads);
  for (KvEvictionMethod m : {KvEvictionMethod::kNone, KvEvictionMethod::kStreaming}) {
    EXPECT_FALSE(tracker.prepare(*MakeRequest(m, 100), 0, 50).has_value());
  }
  // H2O: every row of every chunk.
  auto h2o = MakeRequest(KvEvictionMethod::kH2o, 100);
  auto m = tracker.prepare(*h2o, 3, 50);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->seq, 3);
  EXPECT_EQ(m->first_row, 0);
  EXPECT_GE(m->mass_stride, 50);
  // SnapKV: only the observation window [92, 100) of a prompt longer than the budget.
  for (KvEvictionMethod method : {KvEvictionMethod::kSnapKv, KvEvictionMethod::kPyramidKv}) {
    auto snap = MakeRequest(method, 100);
    EXPECT_FALSE(tracker.prepare(*snap, 0, 92).has_value()) << "before the window";
    snap->advance_computed(90);
    auto w = tracker.prepare(*snap, 1, 10);
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(w->first_row, 2);  // position 92
    EXPECT_GE(w->mass_stride, 100);
    snap->advance_computed(10);
    EXPECT_FALSE(tracker.prepare(*snap, 0, 1).has_value()) << "decoding";
    // A prompt within the budget is never compacted: nothing recorded.
    EXPECT_FALSE(tracker.prepare(*MakeRequest(method, 12), 0, 12).has_value());
  }
}

TEST(AttentionMassTrackerTest, GrowsKeepingWhatWasRecordedAndResetsOnPreemption) {
  AttentionMassTracker tracker(kLayers, kKvHeads);
  auto r = MakeRequest(KvEvictionMethod::kH2o, 40);
  auto m = tracker.prepare(*r, 0, 40);
  Record(*m, 40, 1.0f);
  r->advance_computed(40);
  m = tracker.prepare(*r, 0, 200);  // grows past the first stride
  ASSERT_GE(m->mass_stride, 240);
  Record(*m, 240, 0.5f);
  std::vector<float> packed = tracker.packed(r->id(), 240);
  ASSERT_EQ(packed.size(), static_cast<size_t>(kLayers * kKvHeads * 240));
  for (int64_t i = 0; i < kLayers * kKvHeads; ++i) {
    EXPECT_EQ(packed[i * 240 + 39], 1.5f) << i;
    EXPECT_EQ(packed[i * 240 + 40], 0.5f) << i;
  }
  // Preempted: recomputed from slot 0, the old sums must not count twice.
  tracker.erase(r->id());
  for (float x : tracker.packed(r->id(), 240)) ASSERT_EQ(x, 0.0f);
  EXPECT_EQ(tracker.num_tracked(), 0);
}

TEST(AttentionMassTrackerTest, CompactionMovesH2oMassAndDropsSnapKvVotes) {
  AttentionMassTracker tracker(kLayers, kKvHeads);
  auto r = MakeRequest(KvEvictionMethod::kH2o, 10);
  auto m = tracker.prepare(*r, 0, 10);
  for (int64_t i = 0; i < kLayers * kKvHeads; ++i) {
    for (int64_t t = 0; t < 10; ++t) m->mass[i * m->mass_stride + t] = 100.0f * i + t;
  }
  r->advance_computed(10);
  // Layer 0 keeps 4 slots, layer 1 keeps 3 (at slots 1..3, PyramidKV-like).
  KvKeptTokens kept;
  kept.num_layers = kLayers;
  kept.num_kv_heads = kKvHeads;
  for (int64_t h = 0; h < kKvHeads; ++h) kept.positions.push_back({0, 2 + h, 8, 9});
  for (int64_t h = 0; h < kKvHeads; ++h) kept.positions.push_back({1, 5, 9});
  const KvCompactionLayout layout = CompactionLayout(kept);
  ASSERT_EQ(layout.num_slots, 4);
  tracker.compacted(*r, kept, layout);
  const std::vector<float> packed = tracker.packed(r->id(), 10);
  for (int64_t h = 0; h < kKvHeads; ++h) {
    const float* l0 = packed.data() + h * 10;
    EXPECT_EQ(std::vector<float>(l0, l0 + 5),
              (std::vector<float>{100.0f * h + 0, 100.0f * h + 2 + h, 100.0f * h + 8,
                                  100.0f * h + 9, 0.0f}));
    const float* l1 = packed.data() + (kKvHeads + h) * 10;
    const float base = 100.0f * (kKvHeads + h);
    EXPECT_EQ(std::vector<float>(l1, l1 + 5),
              (std::vector<float>{0.0f, base + 1, base + 5, base + 9, 0.0f}));
  }
  auto snap = MakeRequest(KvEvictionMethod::kSnapKv, 30, 8);
  snap->advance_computed(20);
  ASSERT_TRUE(tracker.prepare(*snap, 0, 10).has_value());
  tracker.compacted(*snap, kept, layout);
  EXPECT_EQ(tracker.num_tracked(), 1);  // only the h2o request
  tracker.erase(r->id());
  EXPECT_EQ(tracker.num_tracked(), 0);
}

}  // namespace
}  // namespace kvserve
