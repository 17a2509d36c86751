// KvTierManager: the KV tiers beyond the process's paged memory (a disk folder, a shared
// Redis), driven from background threads so that the engine step never waits on I/O.
//
// Writes are write-through: the engine offers each block as it enters the prefix cache
// (KvCacheManager::take_stored_blocks), a copy of its bytes is queued, and one writer thread
// per store writes it, so a block is already on disk when memory evicts it, a restarted
// server finds every block it had computed, and a replica sharing Redis finds blocks another
// one is still holding. Reads: the engine starts a load for a waiting request's prompt blocks
// beyond its memory hit; the loader thread reads disk first and Redis for what disk lacks,
// verifies every record (checksum, fingerprint, key, tokens, parent) and hands the payloads
// back; the engine copies them into free blocks of the memory tier
// (KvCacheManager::import_blocks) before the request is scheduled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/ids.h"
#include "base/status.h"
#include "kv/kv_events.h"
#include "kvtier/kv_block_store.h"

namespace kvserve {

struct KvTierManagerOptions {
  uint64_t fingerprint = 0;  // what every record must carry (KvTierFingerprint)
  int64_t block_size = 16;   // tokens per block
  int64_t block_bytes = 0;   // KvStorage::block_bytes(): payload bytes per block
  std::unique_ptr<KvBlockStore> disk;   // null: no disk tier
  std::unique_ptr<KvBlockStore> redis;  // null: no Redis tier
  // Copies queued for one store beyond this are dropped (counted): a slow store never holds
  // more than this much of the engine's memory.
  int64_t max_queued_write_bytes = int64_t{256} << 20;
  // A load hands its blocks to the engine in chunks of this many (the engine copies a chunk
  // in while the next is read, and the buffers go round instead of piling up).
  int64_t load_chunk_blocks = 16;
  // Buffers kept for reuse (records being written, loaded payloads): fresh memory costs a page
  // fault per 4 KiB, which on a VM is slower than reading the block.
  int64_t max_pooled_bytes = int64_t{64} << 20;
  // KV events of the disk tier (a DiskKvStore): BlockStored for blocks written, BlockRemoved
  // for blocks deleted (budget, corruption), medium "DISK", in the order they happened, in
  // batches, from the tiers' threads. Must not block (KvEventPublisher::Publish).
  std::function<void(std::vector<KvCacheEvent>)> on_disk_events;
  // On destruction, queued writes still get this long; what remains after is dropped.
  std::chrono::milliseconds shutdown_drain{10000};
  // A block published to Redis is not published again for this long (Redis keeps it for its
  // TTL; 0: publish each time it is offered).
  std::chrono::seconds redis_republish_after{1800};
};

// A block entering the prefix cache, as the engine offers it.
struct KvTierBlock {
  uint64_t key = 0;         // PrefixBlockKey(NamespaceKey(ns), chain)
  uint64_t parent_key = 0;  // of the block before it; 0 for a first block
  std::vector<TokenId> tokens;
};

// A load: consecutive prompt blocks, in order, that the memory tier lacks.
struct KvTierLoadRequest {
  SeqId id = 0;             // the request it is for (returned as is)
  int64_t first_block = 0;  // index in the prompt of blocks[0] (returned as is)
  std::vector<KvTierBlock> blocks;
  // Past it nobody waits: a load not started by then is skipped, one under way stops reading
  // (its last chunk says what it found).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// A chunk of what a load found: consecutive blocks from first_block on, each from
// `tiers[i]`. A load's chunks arrive in order; the last one (possibly empty) has last set.
struct KvTierLoadResult {
  SeqId id = 0;
  int64_t load_first_block = 0;  // the load's first_block (which load this chunk is of)
  int64_t first_block = 0;       // this chunk's first block
  std::vector<KvTier> tiers;
  std::vector<std::string> payloads;  // block_bytes each; hand back with Recycle()
  bool last = false;
  double seconds = 0.0;  // on the last chunk: from StartLoad to done
  int64_t num_blocks() const { return static_cast<int64_t>(payloads.size()); }
};

// A latency histogram with fixed bounds (seconds): counts per bucket, not cumulative; the
// last bucket is +Inf.
struct KvTierLatency {
  static constexpr double kBounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                       0.01,   0.025,   0.05,   0.1,   0.25,   1.0};
  static constexpr int kNumBuckets = static_cast<int>(std::size(kBounds)) + 1;
  int64_t counts[kNumBuckets] = {};
  double sum = 0.0;
  int64_t count = 0;
  void observe(double seconds, int64_t times = 1);
};

// Counters of one tier (disk or Redis).
struct KvTierCounters {
  bool enabled = false;
  bool available = true;            // Redis: connected at the last attempt
  int64_t blocks_written = 0;
  int64_t bytes_written = 0;
  int64_t write_errors = 0;         // a store that failed (disk full, Redis down)
  int64_t writes_dropped = 0;       // queue full: not written
  int64_t blocks_read = 0;          // verified and handed to the engine
  int64_t bytes_read = 0;
  int64_t corrupt_blocks = 0;       // failed verification: dropped from the store
  int64_t read_errors = 0;          // a store that could not be asked
  int64_t lookups = 0;              // GetPrefix calls
  double read_seconds = 0.0;        // time in GetPrefix and verification
  int64_t stored_blocks = -1;       // resident now (disk; -1: unknown, as for Redis)
  int64_t stored_bytes = -1;
  int64_t queued_write_bytes = 0;   // waiting for the writer now
  KvTierLatency block_read_seconds;   // per block read and verified (a lookup's time / blocks)
  KvTierLatency block_write_seconds;  // per block written (successful or not)
};

struct KvTierStats {
  KvTierCounters tiers[kNumKvTiers];  // indexed by KvTier (kMemory unused)
  int64_t loads = 0;                  // loads started
  int64_t loads_with_hits = 0;        // of which found at least one block
  int64_t loads_expired = 0;          // skipped or cut short: past their deadline
  double load_seconds_total = 0.0;    // StartLoad to done, summed
};

// Owns the stores, one writer thread per store and one loader thread. Thread-safe: the
// engine thread calls Offer / StartLoad / TakeLoaded; stats() from any thread. The destructor
// finishes the queued writes (so a graceful stop keeps what was offered) and joins.
class KvTierManager {
 public:
  // Fails when no store is given or the geometry is invalid.
  static StatusOr<std::unique_ptr<KvTierManager>> Create(KvTierManagerOptions options);
  ~KvTierManager();
  KvTierManager(const KvTierManager&) = delete;
  KvTierManager& operator=(const KvTierManager&) = delete;

  uint64_t fingerprint() const { return options_.fingerprint; }
  int64_t block_bytes() const { return options_.block_bytes; }
  bool has_tier(KvTier tier) const;

  // Whether Offer() of `key` would write it anywhere (not on disk yet, or not published to
  // Redis recently). Call before copying a block's bytes out. Cheap, no I/O.
  bool wants(uint64_t key) const;
  // Queues the block for the stores that want it: fill(payload) writes its block_bytes bytes
  // (KvStorage::CopyBlockOut) straight into the record to be written. Never blocks.
  void Offer(const KvTierBlock& block, const std::function<void(uint8_t* payload)>& fill);

  // Whether a load starting at `key` could find anything (disk index, or Redis on). No I/O.
  bool may_have(uint64_t key) const;
  // Queues a load. Never blocks.
  void StartLoad(KvTierLoadRequest load);
  // Load chunks ready since the last call, in order.
  std::vector<KvTierLoadResult> TakeLoaded();
  // Buffers of taken chunks, once copied: kept for reuse.
  void Recycle(std::vector<std::string> buffers);
  // Loads started whose last chunk was not taken yet.
  int64_t num_loads_in_flight() const;

  KvTierStats stats() const;
  // For the banner: "disk DIR (N blocks, X of Y), redis URL ...".
  std::string description() const;

 private:
  struct Write {
    KvTierBlock block;
    std::shared_ptr<std::string> record;  // encoded once, shared by the stores; back to the pool
  };
  struct Writer {
    KvBlockStore* store = nullptr;
    std::deque<Write> queue;
    int64_t queued_bytes = 0;
    std::thread thread;
  };
  explicit KvTierManager(KvTierManagerOptions options);
  void write_loop(Writer* w);
  void load_loop();
  // Runs one load, handing out chunks as they fill.
  void load(const KvTierLoadRequest& request, std::chrono::steady_clock::time_point started);
  // Reads blocks[0, count) from `store` while they verify, appending their payloads to
  // *chunk (handed out via emit() whenever it holds load_chunk_blocks); returns how many.
  size_t read_verified(KvBlockStore* store, const KvTierBlock* blocks, size_t count,
                       KvTierLoadResult* chunk, const std::function<void()>& emit);
  KvBlockStore* store(KvTier tier) const;
  // Redis is on and `key` was not published within redis_republish_after.
  bool redis_wants(uint64_t key) const;
  // Disk-tier KV events, kept in order across threads and handed out in batches.
  void note_disk_event(KvCacheEvent event);
  void flush_disk_events();
  std::string take_buffer();             // from the pool, or a new one
  void give_back(std::string buffer);    // to the pool (dropped when it is full)

  KvTierManagerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point drain_deadline_;  // set when stopping
  std::vector<std::unique_ptr<Writer>> writers_;
  std::deque<std::pair<KvTierLoadRequest, std::chrono::steady_clock::time_point>> loads_;
  std::vector<KvTierLoadResult> loaded_;
  int64_t loads_in_flight_ = 0;
  std::thread loader_;
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> published_;  // Redis
  KvTierStats stats_;
  std::mutex events_mu_;  // held while a batch is handed out, so batches keep their order
  std::vector<KvCacheEvent> disk_events_;
  std::mutex pool_mu_;
  std::vector<std::string> pool_;
  int64_t pooled_bytes_ = 0;
};

}  // namespace kvserve
