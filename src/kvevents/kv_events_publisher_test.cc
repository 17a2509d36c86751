// KV events on the wire: the config's fields, the msgpack layout of each event (decoded with
// msgpack here, independently of DecodeKvEventBatch), the ZeroMQ frames a subscriber receives
// and the replay socket. tests/kv_events_engine_test.cc runs an engine behind a publisher.
#include "kvevents/kv_events_publisher.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <msgpack.hpp>

#include "kvevents/testing/zmq_receive.h"


namespace kvserve {
namespace {

using testing::FromBigEndian;
using testing::Receive;

// A subscriber's view of one batch.
struct Decoded {
  double ts = 0;
  std::vector<KvCacheEvent> events;
  std::vector<int64_t> block_sizes;  // per BlockStored
  int64_t dp_rank = -1;
};

Decoded Decode(const std::string& payload) {
  Decoded d;
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  EXPECT_EQ(batch.type, msgpack::type::ARRAY);
  EXPECT_EQ(batch.via.array.size, 3u);
  d.ts = batch.via.array.ptr[0].as<double>();
  d.dp_rank = batch.via.array.ptr[2].as<int64_t>();
  const msgpack::object& events = batch.via.array.ptr[1];
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack::object& e = events.via.array.ptr[i];
    EXPECT_EQ(e.type, msgpack::type::ARRAY);
    const msgpack::object* f = e.via.array.ptr;
    const std::string tag = f[0].as<std::string>();
    KvCacheEvent out;
    if (tag == "BlockStored") {
      EXPECT_EQ(e.via.array.size, 8u);
      out.kind = KvCacheEvent::Kind::kBlockStored;
      out.block_hashes = f[1].as<std::vector<uint64_t>>();
      if (!f[2].is_nil()) out.parent_block_hash = f[2].as<uint64_t>();
      out.token_ids = f[3].as<std::vector<TokenId>>();
      d.block_sizes.push_back(f[4].as<int64_t>());
      EXPECT_TRUE(f[5].is_nil() && f[6].is_nil() && f[7].is_nil());  // lora_id, medium, lora_name
    } else if (tag == "BlockRemoved") {
      EXPECT_EQ(e.via.array.size, 3u);
      out.kind = KvCacheEvent::Kind::kBlockRemoved;
      out.block_hashes = f[1].as<std::vector<uint64_t>>();
      EXPECT_TRUE(f[2].is_nil());
    } else {
      EXPECT_EQ(tag, "AllBlocksCleared");
      EXPECT_EQ(e.via.array.size, 1u);
      out.kind = KvCacheEvent::Kind::kAllBlocksCleared;
    }
    d.events.push_back(std::move(out));
  }
  return d;
}

const std::vector<KvCacheEvent> kEvents = {
    {KvCacheEvent::Kind::kBlockStored, {0xfedcba9876543210ull, 7}, std::nullopt,
     {1, 2, 3, 4, 5, 6, 7, 8}, std::nullopt},
    {KvCacheEvent::Kind::kBlockStored, {9}, 7, {9, 10, 11, 12}, std::nullopt},
    {KvCacheEvent::Kind::kBlockRemoved, {9, 7}, std::nullopt, {}, std::nullopt},
    {KvCacheEvent::Kind::kAllBlocksCleared, {}, std::nullopt, {}, std::nullopt}};

TEST(KvEventsConfigTest, VllmFieldsAndDefaults) {
  auto c = ParseKvEventsConfig(R"({"enable_kv_cache_events": true, "topic": "kv@pod-1@m",
      "endpoint": "tcp://*:6000", "replay_endpoint": "tcp://*:6001", "buffer_steps": 50,
      "hwm": 10, "max_queue_size": 20, "publisher": "zmq"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->enable_kv_cache_events);
  EXPECT_EQ(c->topic, "kv@pod-1@m");
  EXPECT_EQ(c->endpoint, "tcp://*:6000");
  EXPECT_EQ(c->replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(c->buffer_steps, 50);
  EXPECT_EQ(c->max_queue_size, 20);
  auto d = ParseKvEventsConfig("{}");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->enable_kv_cache_events);
  EXPECT_EQ(d->endpoint, "tcp://*:5557");
  EXPECT_EQ(d->buffer_steps, 10000);
  EXPECT_EQ(d->hwm, 100000);
  EXPECT_FALSE(d->replay_endpoint.has_value());
  auto unknown = ParseKvEventsConfig(R"({"enable_kv_cache_event": true})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown field 'enable_kv_cache_event'"),
            std::string::npos);
  EXPECT_FALSE(ParseKvEventsConfig("[]").ok());
  EXPECT_FALSE(ParseKvEventsConfig(R"({"hwm": 0})").ok());
  EXPECT_FALSE(ParseKvEventsConfig(R"({"publisher": "kafka"})").ok());
  EXPECT_FALSE(ParseKvEventsConfig(R"({"topic": 5})").ok());
}

// The disk tier's events name their medium; the memory tier's leave it nil (above).
TEST(KvEventsWireTest, TheDiskTierNamesItsMedium) {
  const KvCacheEvent stored{KvCacheEvent::Kind::kBlockStored, {5}, 4, {1, 2, 3, 4}, "DISK"};
  const KvCacheEvent removed{KvCacheEvent::Kind::kBlockRemoved, {5}, std::nullopt, {}, "DISK"};
  const std::string payload = EncodeKvEventBatch(1.0, {stored, removed}, 4);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& events = oh.get().via.array.ptr[1];
  EXPECT_EQ(events.via.array.ptr[0].via.array.ptr[6].as<std::string>(), "DISK");
  EXPECT_EQ(events.via.array.ptr[1].via.array.ptr[2].as<std::string>(), "DISK");
  auto decoded = DecodeKvEventBatch(payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->events.size(), 2u);
  EXPECT_EQ(decoded->events[0], stored);
  EXPECT_EQ(decoded->events[1], removed);
}

TEST(KvEventsWireTest, VllmArrayLayout) {
  const Decoded d = Decode(EncodeKvEventBatch(1700000000.25, kEvents, 4));
  EXPECT_DOUBLE_EQ(d.ts, 1700000000.25);
  EXPECT_EQ(d.dp_rank, 0);
  EXPECT_EQ(d.events, kEvents);
  EXPECT_EQ(d.block_sizes, (std::vector<int64_t>{4, 4}));
}

TEST(KvEventPublisherTest, SubscriberGetsFramesAndReplay) {
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  c.topic = "kv@pod-1@model";
  auto pub = KvEventPublisher::Create(c, 4);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  ASSERT_EQ(zmq_connect(sub, (*pub)->endpoint().c_str()), 0);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, c.topic.data(), c.topic.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the subscription propagates

  for (size_t i = 0; i < kEvents.size(); ++i) (*pub)->Publish({kEvents[i]});
  (*pub)->Publish({});  // nothing to send: no message
  for (uint64_t seq = 0; seq < kEvents.size(); ++seq) {
    const std::vector<std::string> frames = Receive(sub);
    ASSERT_EQ(frames.size(), 3u) << "message " << seq;
    EXPECT_EQ(frames[0], c.topic);
    ASSERT_EQ(frames[1].size(), 8u);
    EXPECT_EQ(FromBigEndian(frames[1]), seq);
    EXPECT_EQ(Decode(frames[2]).events, std::vector<KvCacheEvent>{kEvents[seq]});
  }
  EXPECT_TRUE(Receive(sub, 200).empty());

  // Replay from sequence 2: batches 2 and 3, then the end marker. A DEALER client sends REQ's
  // framing (an empty delimiter, then the start) and reads every reply; each reply comes
  // back after the same empty delimiter.
  void* req = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(req, (*pub)->replay_endpoint().c_str()), 0);
  std::string start(8, '\0');
  start[7] = 2;
  ASSERT_EQ(zmq_send(req, "", 0, ZMQ_SNDMORE), 0);
  ASSERT_EQ(zmq_send(req, start.data(), start.size(), 0), 8);
  int linger = 0;
  for (uint64_t seq = 2; seq < kEvents.size(); ++seq) {
    const std::vector<std::string> frames = Receive(req);
    ASSERT_EQ(frames.size(), 4u);
    EXPECT_TRUE(frames[0].empty());
    EXPECT_EQ(frames[1], c.topic);
    EXPECT_EQ(FromBigEndian(frames[2]), seq);
    EXPECT_EQ(Decode(frames[3]).events, std::vector<KvCacheEvent>{kEvents[seq]});
  }
  const std::vector<std::string> end = Receive(req);
  ASSERT_EQ(end.size(), 4u);
  EXPECT_EQ(FromBigEndian(end[2]), ~uint64_t{0});
  EXPECT_TRUE(end[3].empty());
  EXPECT_EQ((*pub)->stats().batches_published, 4);
  EXPECT_EQ((*pub)->stats().replays_served, 1);
  zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(req, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(sub);
  zmq_close(req);
  zmq_ctx_term(ctx);
}

TEST(KvEventPublisherTest, AnEndpointThatCannotBeBoundIsAClearError) {
  KvEventsConfig c;
  c.endpoint = "tcp://*:notaport";
  auto pub = KvEventPublisher::Create(c, 16);
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("tcp://*:notaport"), std::string::npos);
}

TEST(KvEventsWireTest, DecodeReadsWhatEncodeWrites) {
  auto batch = DecodeKvEventBatch(EncodeKvEventBatch(12.5, kEvents, 4, 3));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->ts, 12.5);
  EXPECT_EQ(batch->data_parallel_rank, 3);
  EXPECT_EQ(batch->events, kEvents);
  EXPECT_FALSE(DecodeKvEventBatch("\x93\x01").ok());   // truncated
  EXPECT_FALSE(DecodeKvEventBatch("").ok());
  EXPECT_FALSE(DecodeKvEventBatch("\x91\x01").ok());   // [1]
}

}  // namespace
}  // namespace kvserve
