// Memory accounting of a paged KV cache: what is reserved, what holds tokens, and the
// internal fragmentation of partly filled last blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_spec.h"

namespace kvserve {

// Plain value type, filled by ComputeKvMemoryStats.
struct KvMemoryStats {
  int64_t num_blocks = 0;         // in the pool
  int64_t num_blocks_in_use = 0;  // held by sequences
  int64_t num_blocks_cached = 0;  // held only by the prefix cache
  int64_t num_blocks_free = 0;
  int64_t capacity_tokens = 0;    // num_blocks * block_size
  int64_t num_tokens_stored = 0;  // distinct token slots holding KV in in-use blocks
  int64_t bytes_capacity = 0;     // num_blocks * bytes_per_block
  int64_t bytes_reserved = 0;     // in-use blocks * bytes_per_block
  int64_t bytes_holding_tokens = 0;  // num_tokens_stored * bytes_per_token
  // Unused slots of in-use blocks (partly filled last blocks) over their slots, in percent;
  // 0 when nothing is in use.
  double fragmentation_perc = 0.0;
  // In-use blocks over all blocks, in percent (vLLM's kv_cache_usage).
  double usage_perc = 0.0;
};

// Counts a block shared by several tables once, with the largest fill any of them gives it.
KvMemoryStats ComputeKvMemoryStats(const KvCacheSpec& spec, const BlockPool& pool,
                                   const std::vector<const BlockTable*>& tables);

// One sequence of num_tokens tokens in num_seq_blocks blocks of a num_blocks cache, as if it
// were the only one holding blocks (e.g. a finished request's footprint).
KvMemoryStats SequenceKvMemoryStats(const KvCacheSpec& spec, int64_t num_blocks,
                                    int64_t num_seq_blocks, int64_t num_tokens);

}  // namespace kvserve
