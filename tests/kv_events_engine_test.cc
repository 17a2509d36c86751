// An engine publishing KV events (`--kv-events-config`): a ZeroMQ subscriber that follows the
// batches (DecodeKvEventBatch) holds exactly the blocks the engine's prefix cache holds, through
// shared prefixes, evictions and a reset (AllBlocksCleared).
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvevents/kv_events_publisher.h"
#include "kvevents/testing/zmq_receive.h"
#include "model/testing/synthetic_model.h"
#include "runtime/engine_core.h"
#include "runtime/testing/engine_test_util.h"

namespace kvserve {
namespace {

using testing::FromBigEndian;
using testing::Receive;

// An engine's events, received by a subscriber, rebuild the prefix cache's own blocks.
TEST(KvEventPublisherTest, AnEnginesEventsRebuildItsCache) {
  LlamaModel& model = testing::SharedSyntheticModel("tiny", 3);
  PagedKvCache cache = testing::MakeTestCache(model, /*num_blocks=*/12, /*max_model_len=*/40,
                                              DType::kF32, /*block_size=*/4);
  KvEventsConfig c;
  c.endpoint = "tcp://127.0.0.1:*";
  auto pub = KvEventPublisher::Create(c, 4);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  ASSERT_EQ(zmq_connect(sub, (*pub)->endpoint().c_str()), 0);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  ThreadPool pool(1);
  EngineCoreOptions o = testing::TestCoreOptions(cache, 64, /*prefix_caching=*/true);
  KvEventPublisher* p = pub->get();
  o.on_kv_events = [p](std::vector<KvCacheEvent> events) { p->Publish(std::move(events)); };
  auto core = testing::MakeTestCore(o, model, &cache, &pool);
  // Shared prefixes and more distinct prompts than the 12 blocks hold: hits and evictions.
  SeqId id = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<TokenId> prompt = {5, 6, 7, 8, 9, 10, 11, 12};
    for (int i = 0; i < 9; ++i) prompt.push_back(static_cast<TokenId>(20 + round * 10 + i));
    ASSERT_TRUE(core->add_request(id++, testing::GreedyRequest(prompt, 3)).ok());
    testing::RunToEnd(*core);
  }
  ASSERT_TRUE(core->reset_prefix_cache());
  ASSERT_TRUE(core->add_request(id++, testing::GreedyRequest({5, 6, 7, 8, 9, 10, 11, 12, 13}, 2)).ok());
  testing::RunToEnd(*core);

  const uint64_t published_batches = [&] {
    for (int i = 0; i < 500 && (*pub)->stats().batches_published == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Wait until the queue drained: the count stops moving.
    int64_t last = -1;
    while ((*pub)->stats().batches_published != last) {
      last = (*pub)->stats().batches_published;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return static_cast<uint64_t>(last);
  }();
  std::set<uint64_t> router;
  int stored = 0, removed = 0, cleared = 0;
  for (uint64_t i = 0; i < published_batches; ++i) {
    const std::vector<std::string> frames = Receive(sub);
    ASSERT_EQ(frames.size(), 3u) << "batch " << i << " of " << published_batches;
    ASSERT_EQ(FromBigEndian(frames[1]), i);
    auto batch = DecodeKvEventBatch(frames[2]);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    for (const KvCacheEvent& e : batch->events) {
      if (e.kind == KvCacheEvent::Kind::kBlockStored) {
        ++stored;
        for (uint64_t h : e.block_hashes) router.insert(h);
      } else if (e.kind == KvCacheEvent::Kind::kBlockRemoved) {
        ++removed;
        for (uint64_t h : e.block_hashes) EXPECT_EQ(router.erase(h), 1u);
      } else {
        ++cleared;
        router.clear();
      }
    }
  }
  EXPECT_GT(stored, 5);
  EXPECT_GT(removed, 0);
  EXPECT_EQ(cleared, 1);
  const std::vector<uint64_t> own = core->kv_manager().radix_cache().block_hashes();
  EXPECT_FALSE(own.empty());
  EXPECT_EQ(router, std::set<uint64_t>(own.begin(), own.end()));
  int linger = 0;
  zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(sub);
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace kvserve
