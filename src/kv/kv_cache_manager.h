// KvCacheManager: the scheduler's only door into the KV cache: the block pool plus the radix
// prefix cache. It knows sequences by id and token lists, never requests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/ids.h"
#include "base/status.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_spec.h"
#include "kv/kv_stats.h"
#include "kv/radix_cache.h"

namespace kvserve {

struct KvCacheManagerOptions {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  bool enable_prefix_caching = true;
  // Evicted prefixes remembered to tell "evicted" misses from "never seen" ones (0: the
  // larger of 4 * num_blocks and 65536).
  int64_t eviction_history_size = 0;
  // Record KV events (kv_events.h) for take_events(): blocks entering and leaving the prefix
  // cache, for `--kv-events-config`.
  bool record_events = false;
  // Record each block entering the prefix cache for take_stored_blocks() (the KV tiers'
  // write-through).
  bool record_stored_blocks = false;
};

// A block that entered the prefix cache (record_stored_blocks): its KV is in `block` until
// the next allocation that may evict it.
struct StoredKvBlock {
  BlockId block = kNoBlock;
  uint64_t key = 0;         // PrefixBlockKey(NamespaceKey(ns), chain), as KvCacheEvent
  uint64_t parent_key = 0;  // the block before it; 0 for a first block
  std::vector<TokenId> tokens;
};

// Result of looking up a prompt.
struct PrefixMatch {
  int64_t num_prompt_tokens = 0;  // tokens looked up
  int64_t num_cached_tokens = 0;  // a multiple of block_size, < prompt length
  std::vector<BlockId> blocks;    // the cached blocks, in order
  // Uncached prompt tokens by reason (indexed by PrefixMissReason). With prefix caching on,
  // num_cached_tokens + the sum of miss_tokens == num_prompt_tokens; off, all are 0.
  int64_t miss_tokens[kNumPrefixMissReasons] = {};
};

// Cumulative counters and the current state.
struct KvCacheManagerStats {
  int64_t num_blocks = 0;
  int64_t blocks_in_use = 0;    // referenced by sequences
  int64_t blocks_cached = 0;    // held only by the prefix cache (evictable)
  int64_t blocks_free = 0;
  int64_t blocks_in_prefix_cache = 0;  // resident in the tree, in use or not
  // Lookups, counted once per started sequence (see start_sequence).
  int64_t prefix_queries = 0;         // sequences started
  int64_t prefix_hits = 0;            // of which with at least one cached block
  int64_t prefix_queries_tokens = 0;  // prompt tokens looked up
  int64_t prefix_hits_tokens = 0;     // of which served from the cache
  int64_t prefix_queries_blocks = 0;  // full prompt blocks looked up
  int64_t prefix_hits_blocks = 0;
  int64_t evicted_blocks = 0;
  int64_t miss_tokens[kNumPrefixMissReasons] = {};
};

// Owns the BlockPool, the radix tree (RadixCache) and the block table of every live sequence.
// Engine thread only.
//
// A sequence's "path" is the chain of tree nodes that its committed full blocks spell; it
// holds one tree lock and one pool reference per path node. Usually the node's block is the
// table's block; when another sequence inserted the same tokens first, the sequence keeps its
// own copy in its table (its KV is identical) and holds the tree's block by an extra pool
// reference, so that the path stays protected. Eviction is driven by the tree (least
// recently used unlocked leaves) just before the pool would run out of free blocks; the pool
// never evicts on its own.
//
// Invariants (check_invariants): the pool's and the tree's; a block's pool reference count ==
// the number of live tables holding it + the extra references; a tree node's block is cached
// in the pool and referenced exactly lock_count times (so unlocked == evictable == the pool's
// cached blocks); blocks outside the tree are not cached; once every sequence is freed, every
// block is free or cached.
class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheManagerOptions& options);
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int64_t block_size() const;
  int64_t num_blocks() const;
  bool prefix_caching_enabled() const;

  // Longest cached prefix of `tokens` under `cache_namespace` (model id + cache salt): whole
  // blocks only, at most max_cached_tokens, and never the last token (so that there are
  // logits to sample from), plus why the rest missed (cached blocks beyond those limits count
  // as kLastTokenRecomputed: recomputed for their logits). Changes nothing, counts nothing: a
  // waiting request may be matched every step. With prefix caching off, nothing is cached.
  PrefixMatch match(const std::string& cache_namespace, const std::vector<TokenId>& tokens,
                    int64_t max_cached_tokens = INT64_MAX) const;

  // True when start_sequence(match) followed by allocate_slots(num_tokens) would succeed now:
  // the blocks beyond the match fit in the free and evictable blocks that the match itself does
  // not revive.
  bool can_start(const PrefixMatch& match, int64_t num_tokens) const;

  // Starts sequence `seq` with the matched blocks (a `match` result of this namespace with
  // no cache change in between): references and locks taken, so they stop being evictable.
  // The sequence then holds match.num_cached_tokens computed tokens. Counts the lookup in the
  // stats, unless the sequence is freed before its first successful allocate_slots (an
  // admission that did not fit is not a query).
  void start_sequence(SeqId seq, const std::string& cache_namespace, const PrefixMatch& match);

  // Blocks allocate_slots would need to take from the pool for `seq` to hold num_tokens.
  int64_t blocks_needed(SeqId seq, int64_t num_tokens) const;
  // True when that many blocks are available (free or evictable).
  bool can_allocate(int64_t num_blocks) const;
  // Grows seq's table to hold num_tokens tokens, evicting cached blocks if the free ones do
  // not suffice; all or nothing (false: nothing changed).
  bool allocate_slots(SeqId seq, int64_t num_tokens);

  // Records that seq's first num_computed tokens hold KV (`tokens` are the sequence's tokens
  // so far, at least num_computed; never fewer computed tokens than before), and inserts its
  // newly full blocks into the prefix cache. Cheap when no block became full. Not for a
  // detached sequence (commit_detached).
  void commit(SeqId seq, const std::vector<TokenId>& tokens, int64_t num_computed);

  // True when compact(seq, num_kv_tokens) can allocate its new table: the blocks it needs fit
  // in the available ones plus those only this sequence holds (which its release makes free or
  // evictable). Blocks it shares with other running sequences stay theirs, so a sequence that
  // shares more blocks than it keeps fewer can find the pool short under memory pressure.
  bool can_compact(SeqId seq, int64_t num_kv_tokens) const;
  // Token eviction: replaces seq's table by a compacted one holding num_kv_tokens tokens
  // (1 .. the current count; can_compact must hold). Calls gather(old table) (the caller
  // copies the kept KV out: KvStorage::GatherHeadSlots), then returns every reference and
  // prefix-cache lock of the sequence (blocks the prefix cache holds stay cached and reusable
  // by others: one request's eviction never modifies a shared block), allocates the new table
  // (under memory pressure it may evict cached prefix blocks, the sequence's own included,
  // least recently used first) and calls scatter(new table) (the caller writes the kept KV:
  // KvStorage::ScatterHeadSlots). Afterwards the sequence is detached: it inserts nothing more
  // into the prefix cache (its slots no longer spell a token prefix).
  void compact(SeqId seq, int64_t num_kv_tokens,
               const std::function<void(const BlockTable& from)>& gather,
               const std::function<void(const BlockTable& to)>& scatter);
  // A detached sequence's commit: its table now holds num_kv_tokens tokens (never fewer than
  // before, within capacity).
  void commit_detached(SeqId seq, int64_t num_kv_tokens);
  bool is_detached(SeqId seq) const;

  // Ends a sequence (finished, aborted or preempted): its references and locks return; blocks
  // that the cache holds stay resident (evictable), the others become free.
  void free(SeqId seq);

  const BlockTable& block_table(SeqId seq) const;
  bool has_sequence(SeqId seq) const;
  int64_t num_sequences() const;

  KvCacheManagerStats stats() const;
  // Blocks, bytes and fragmentation of the live sequences' tables (ComputeKvMemoryStats).
  // O(blocks in use).
  KvMemoryStats memory_stats(const KvCacheSpec& spec) const;
  // The tree, for tests and diagnostics.
  const RadixCache& radix_cache() const;
  void check_invariants() const;

  // The blocks that entered the prefix cache since the last call (record_stored_blocks) and
  // are still in it under the same key, in order (one evicted since, its id perhaps reused,
  // is left out). Take them before the forward pass that may overwrite a reused block.
  std::vector<StoredKvBlock> take_stored_blocks();

  // KV tiers: adds blocks [first_block, first_block + num_blocks) of `tokens` (whole blocks of
  // a prompt) to the prefix cache under `cache_namespace` as cached, evictable blocks, their
  // KV written by fill(block id, index in [0, num_blocks)) first. The tree must hold blocks
  // [0, first_block) of that prefix; blocks it already holds are skipped (not filled). Takes
  // free blocks, else evicts least recently used cached ones (never the prefix it extends).
  // Returns how many blocks were added: fewer when the pool runs short, 0 when the prefix
  // before first_block is no longer cached or prefix caching is off. The added blocks are
  // blocks [*first_added, *first_added + result) of the prompt (when first_added is given).
  int64_t import_blocks(const std::string& cache_namespace, const std::vector<TokenId>& tokens,
                        int64_t first_block, int64_t num_blocks,
                        const std::function<void(BlockId block, int64_t index)>& fill,
                        int64_t* first_added = nullptr);

  // The events recorded since the last call (record_events; empty otherwise), in order.
  std::vector<KvCacheEvent> take_events();
  // Empties the prefix cache when no sequence holds a cached block (vLLM's
  // reset_prefix_cache): every cached block becomes free and one AllBlocksCleared event is
  // recorded. Returns false, changing nothing, while a sequence holds one.
  bool reset_prefix_cache();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
