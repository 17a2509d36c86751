// BlockPool: the ids of every KV block, their reference counts, and an LRU list of blocks
// that no sequence holds but whose contents the prefix cache keeps for reuse.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <vector>

#include "base/ids.h"

namespace kvserve {

// Owns the ids of all KV blocks and their reference counts. Engine thread only (no locks).
//
// A block is in exactly one state:
//   free    ref_count == 0 and not cached: contents meaningless, allocated first;
//   cached  ref_count == 0 and cached (the prefix cache holds its contents): kept on an LRU
//           list, reusable by add_ref() on a prefix hit, evicted (least recently released
//           first) when allocate() runs out of free blocks;
//   in use  ref_count > 0 (held by one or more sequences; may also be cached).
// Invariant: num_free() + num_cached() + num_in_use() == num_blocks().
//
// Every block id of the pool is usable; kernels get exact block tables, so no padding block
// is reserved.
class BlockPool {
 public:
  // Called for each cached block that allocate() evicts, before it is handed out, so that the
  // prefix cache can forget it.
  using EvictCallback = std::function<void(BlockId)>;

  explicit BlockPool(int64_t num_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_cached() const { return static_cast<int64_t>(lru_.size()); }
  int64_t num_in_use() const { return num_in_use_; }
  // Blocks allocate() can hand out now: free plus evictable cached ones.
  int64_t num_available() const { return num_free() + num_cached(); }

  // All or nothing: n blocks, each with ref_count 1 and not cached, taken from the free list
  // first (lowest id first), then by evicting cached blocks in LRU order. Returns false and
  // changes nothing when fewer than n are available.
  bool allocate(int64_t n, std::vector<BlockId>* out);

  // One more holder of an in-use block, or revives a cached block (prefix hit): it leaves the
  // LRU list and becomes in use with ref_count 1.
  void add_ref(BlockId id);
  // One holder fewer. At ref_count 0 the block becomes cached (back of the LRU list: evicted
  // last) if it is marked cached, otherwise free.
  void release(BlockId id);
  // Releases blocks in reverse order, so that a sequence's tail blocks are evicted before its
  // head (the head is the part other requests are likelier to share).
  void release_all(const std::vector<BlockId>& ids);

  // Marks whether the prefix cache holds this block's contents. Unmarking a block with
  // ref_count 0 frees it.
  void set_cached(BlockId id, bool cached);
  bool is_cached(BlockId id) const { return block(id).cached; }
  int32_t ref_count(BlockId id) const { return block(id).ref_count; }

  void set_evict_callback(EvictCallback callback) { on_evict_ = std::move(callback); }
  // Blocks evicted from the cached state by allocate() since creation.
  int64_t num_evicted() const { return num_evicted_; }

  // KV_CHECKs every invariant (state counts, list membership, ref counts). O(num_blocks).
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool cached = false;
    bool in_free_list = false;
    std::list<BlockId>::iterator lru_it;  // valid when ref_count == 0 && cached
  };
  const Block& block(BlockId id) const;
  Block& block(BlockId id);
  void make_unreferenced(BlockId id);  // ref_count just hit 0: to the LRU or the free list

  std::vector<Block> blocks_;
  // Free block ids, kept so that the lowest id is handed out first (a min-heap in a vector),
  // which makes block placement deterministic and tests exact.
  std::vector<BlockId> free_;
  std::list<BlockId> lru_;  // front = least recently released
  int64_t num_in_use_ = 0;
  int64_t num_evicted_ = 0;
  EvictCallback on_evict_;
};

}  // namespace kvserve
