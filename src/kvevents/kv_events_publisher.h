// KV events on the wire, as vLLM publishes them (`--kv-events-config`), so that cache-aware
// routers (llm-d's KV-cache-aware scheduler, NVIDIA Dynamo's KV router) consume kvserve's
// unchanged:
//
//   ZeroMQ PUB, one multipart message per engine step that changed the prefix cache:
//     [topic, sequence number (uint64, 8 bytes big-endian, from 0), msgpack payload]
//   payload: [ts (float64 seconds since the epoch), [event, ...], data_parallel_rank (0)]
//   events, msgspec's array form with the class name first (vLLM up to 0.23; later routers
//   accept it too):
//     ["BlockStored", [block_hash, ...], parent_block_hash | nil, [token_id, ...],
//      block_size, lora_id (nil), medium, lora_name (nil)]
//     ["BlockRemoved", [block_hash, ...], medium]
//     ["AllBlocksCleared"]
//   Replay (optional ROUTER socket): a client sends the 8-byte big-endian sequence number to
//   start from and gets [topic, seq, payload] for every buffered batch from there, then
//   ["", 0xffffffffffffffff, ""].
//
// Block hashes are kvserve's (kv/kv_events.h: the namespace-keyed hash chain, uint64), not
// vLLM's SHA-256 ones: routers that recompute their own hash from token_ids (Dynamo) or key on
// the engine's (llm-d) work with either. `medium` is nil for the primary (memory) tier and
// "DISK" for the disk tier.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kv/kv_events.h"

namespace kvserve {

// vLLM's KVEventsConfig: the fields and defaults of `--kv-events-config '{...}'`.
struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "zmq";  // "zmq" or "null" (events computed, nothing sent)
  std::string endpoint = "tcp://*:5557";  // bound when it has '*' or '::' or is ipc:// /
                                          // inproc://, else connected (as vLLM)
  std::optional<std::string> replay_endpoint;  // a ROUTER socket, bound
  int64_t buffer_steps = 10000;     // batches kept for replay
  int64_t hwm = 100000;             // the PUB socket's send high-water mark
  int64_t max_queue_size = 100000;  // batches waiting for the publisher thread; more are dropped
  std::string topic;
};

// Parses the JSON object of `--kv-events-config` (unknown fields refused, naming them).
StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json_text);

// The msgpack payload of one batch (the layout above).
std::string EncodeKvEventBatch(double ts, const std::vector<KvCacheEvent>& events,
                               int64_t block_size, int64_t data_parallel_rank = 0);

// A payload read back (what a subscriber does): InvalidArgument for anything but the layout
// above.
struct KvEventBatch {
  double ts = 0.0;
  std::vector<KvCacheEvent> events;
  int64_t data_parallel_rank = 0;
};
StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload);

// Owns the ZeroMQ context and sockets and one thread that encodes, sends and answers replay
// requests (ZeroMQ sockets stay on that thread). Publish() is thread-safe and never blocks.
class KvEventPublisher {
 public:
  struct Stats {
    int64_t batches_published = 0;
    int64_t events_published = 0;
    int64_t batches_dropped = 0;  // the queue held max_queue_size batches
    int64_t replays_served = 0;
  };

  // Binds or connects the sockets (Unavailable naming the endpoint when that fails).
  static StatusOr<std::unique_ptr<KvEventPublisher>> Create(const KvEventsConfig& config,
                                                            int64_t block_size);
  ~KvEventPublisher();  // sends what is queued, then closes the sockets
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one step's events, time-stamped now.
  void Publish(std::vector<KvCacheEvent> events);
  Stats stats() const;
  // The endpoints in force (a wildcard port resolved: "tcp://0.0.0.0:41234").
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  KvEventPublisher(const KvEventsConfig& config, int64_t block_size);
  Status Open();
  void Loop();
  void ServeReplay();

  KvEventsConfig config_;
  int64_t block_size_;
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* replay_ = nullptr;
  std::string endpoint_, replay_endpoint_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<double, std::vector<KvCacheEvent>>> queue_;  // guarded by mu_
  bool stop_ = false;                                              // guarded by mu_
  Stats stats_;                                                    // guarded by mu_
  // Publisher thread only: the next sequence number and the replay buffer.
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> sent_;
};

}  // namespace kvserve
