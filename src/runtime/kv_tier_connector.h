// KvTierConnector: the engine thread's side of the KV tiers (disk, Redis): it decides which
// waiting requests to load for, holds them while their blocks load, copies loaded blocks
// into the memory tier, offers new blocks for write-through, and accounts which tier served
// each request's cached tokens. The I/O itself runs on KvTierManager's threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "kvtier/kv_tier_manager.h"
#include "runtime/scheduler.h"

namespace kvserve {

// Engine-side counters (EngineStats).
struct KvTierEngineStats {
  // Prompt tokens served from the prefix cache at admission, by the tier that held them
  // (kMemory: the memory tier's own hits, filled by the caller from the prefix counters).
  int64_t hit_tokens[kNumKvTiers] = {};
  int64_t blocks_imported[kNumKvTiers] = {};  // loaded blocks copied into memory
  int64_t loads_timed_out = 0;   // a request scheduled without its load (recomputed)
  int64_t loads_discarded = 0;   // finished too late, or for a request gone
  double import_seconds = 0.0;   // copying loaded blocks into the memory tier
  int64_t blocks_offered = 0;    // blocks copied out for write-through
  double offer_seconds = 0.0;    // copying them out
};

// Borrows the manager (it must outlive the connector). Engine thread only.
// Invariant: a request is held (Scheduler::set_held) exactly while it has a load in flight.
class KvTierConnector {
 public:
  KvTierConnector(KvTierManager* manager, int64_t block_size,
                  std::chrono::milliseconds load_timeout);

  // Before Scheduler::schedule(): copies finished loads into the memory tier and releases
  // their requests, releases requests whose load is late (they recompute), and starts loads
  // for waiting requests not looked up yet whose prompt continues past the memory hit into a
  // tier that may hold it.
  void before_schedule(Scheduler* scheduler, KvCacheManager* kv, KvStorage* storage);
  // After schedule(): counts the tier hits of requests admitted in this step.
  void after_schedule(const SchedulerOutput& out, const Scheduler& scheduler);
  // After update() (before anything can evict): offers the blocks that entered the prefix
  // cache for write-through, fills the outputs' per-tier counts and forgets finished requests.
  void after_update(KvCacheManager* kv, const KvStorage& storage,
                    std::vector<RequestOutput>* outputs);

  const KvTierEngineStats& stats() const { return stats_; }

 private:
  struct State {
    bool loading = false;
    std::chrono::steady_clock::time_point deadline;
    int64_t load_first_block = 0;
    // Blocks copied in for this request: (block index in the prompt, tier it came from).
    std::vector<std::pair<int64_t, KvTier>> imported;
    bool counted = false;  // hits counted at admission
    int64_t by_tier[kNumKvTiers] = {};
  };
  // Looks the waiting request up in the tiers: a load and a hold, or nothing to load.
  void start_load(const Request& request, Scheduler* scheduler, KvCacheManager* kv);
  // Copies one chunk of a load into the memory tier; the last chunk releases the request.
  void import(KvTierLoadResult* loaded, Scheduler* scheduler, KvCacheManager* kv,
              KvStorage* storage);

  KvTierManager* manager_;
  int64_t block_size_;
  std::chrono::milliseconds load_timeout_;
  std::unordered_map<SeqId, State> states_;  // every request looked up, until it finishes
  KvTierEngineStats stats_;
};

}  // namespace kvserve
