// Token eviction's compaction of one running sequence (docs/kv-eviction.md): which slots every
// (layer, KV head) keeps, the new table, the moves, StreamingLLM's re-rotation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama.h"
#include "runtime/request.h"

namespace kvserve {

// What a compaction did (for Scheduler::record_compaction). Plain value type.
struct KvCompaction {
  // False: the pool cannot hold the compacted table now (KvCacheManager::can_compact), nothing
  // changed, and the caller preempts the request (Scheduler::preempt_running).
  bool compacted = false;
  int64_t num_kv_slots = 0;              // the compacted table's tokens
  std::vector<int64_t> layer_key_begin;  // CompactionLayout's, per layer
  int64_t num_evicted_tokens = 0;        // slots before minus kept, mean over layers and heads
  KvKeptTokens kept;                     // the old slots every (layer, KV head) kept
  KvCompactionLayout layout;             // where they went
};

// Compacts running request `r` (CompactionDue must hold): SelectKeptTokensFromMass over its
// num_kv_slots() slots with `attention_mass` ([layers, kv_heads, num_kv_slots]; empty for
// streaming), KvCacheManager::compact, KvStorage::MoveHeadSlots per layer, and for streaming
// LlamaModel::ShiftStoredKeys so that every kept key has its new slot as its position.
// Fails (compacted false, nothing moved) only when the new table's blocks are not available:
// blocks shared with other running sequences stay theirs. Engine thread only.
KvCompaction CompactSequenceKv(const Request& r, std::span<const float> attention_mass,
                              KvCacheManager* kv, KvStorage* storage, LlamaModel* model);

}  // namespace kvserve
