// BlockTable: the KV blocks of one sequence, in position order, and how many tokens they hold.
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"
#include "kv/block_pool.h"

namespace kvserve {

// Owns a list of block ids (not the blocks: references are counted by BlockPool, and whoever
// appends ids must have allocated or add_ref'ed them). Not thread-safe.
// Invariant: num_tokens() <= capacity_tokens() = num_blocks() * block_size(); position p lives
// in block block_ids()[p / block_size] at offset p % block_size. Append-only, except that
// clear() empties it (on finish or preemption).
class BlockTable {
 public:
  explicit BlockTable(int64_t block_size) : block_size_(block_size) {
    KV_CHECK(block_size > 0);
  }

  int64_t block_size() const { return block_size_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_blocks() const { return static_cast<int64_t>(block_ids_.size()); }
  int64_t capacity_tokens() const { return num_blocks() * block_size_; }
  const std::vector<BlockId>& block_ids() const { return block_ids_; }

  // Blocks to append before the table can hold `num_tokens` tokens (0 if it already can).
  int64_t blocks_needed(int64_t num_tokens) const {
    const int64_t need = (num_tokens + block_size_ - 1) / block_size_;
    return need > num_blocks() ? need - num_blocks() : 0;
  }
  void append_blocks(const std::vector<BlockId>& ids) {
    block_ids_.insert(block_ids_.end(), ids.begin(), ids.end());
  }
  // Records that positions 0 .. num_tokens - 1 hold KV (within capacity).
  void set_num_tokens(int64_t num_tokens) {
    KV_CHECK(num_tokens >= 0 && num_tokens <= capacity_tokens())
        << "num_tokens=" << num_tokens << " capacity=" << capacity_tokens();
    num_tokens_ = num_tokens;
  }
  // KV slot (block_id * block_size + offset) of a position within capacity.
  int64_t slot(int64_t position) const {
    KV_DCHECK(position >= 0 && position < capacity_tokens());
    return static_cast<int64_t>(block_ids_[static_cast<size_t>(position / block_size_)]) *
               block_size_ + position % block_size_;
  }
  // Empties the table and returns its ids (for BlockPool::release_all).
  std::vector<BlockId> clear() {
    num_tokens_ = 0;
    std::vector<BlockId> ids;
    ids.swap(block_ids_);
    return ids;
  }

 private:
  int64_t block_size_;
  int64_t num_tokens_ = 0;
  std::vector<BlockId> block_ids_;
};

}  // namespace kvserve
