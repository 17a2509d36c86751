#include "kv/block_pool.h"

#include <algorithm>
#include <functional>

#include "base/check.h"

namespace kvserve {

BlockPool::BlockPool(int64_t num_blocks) {
  KV_CHECK(num_blocks >= 0 && num_blocks <= INT32_MAX) << "num_blocks=" << num_blocks;
  blocks_.resize(static_cast<size_t>(num_blocks));
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t i = num_blocks - 1; i >= 0; --i) {
    free_.push_back(static_cast<BlockId>(i));
    blocks_[static_cast<size_t>(i)].in_free_list = true;
  }
  std::make_heap(free_.begin(), free_.end(), std::greater<>());
}

const BlockPool::Block& BlockPool::block(BlockId id) const {
  KV_CHECK(id >= 0 && id < num_blocks()) << "block id " << id << " outside [0, " << num_blocks() << ")";
  return blocks_[static_cast<size_t>(id)];
}

BlockPool::Block& BlockPool::block(BlockId id) {
  KV_CHECK(id >= 0 && id < num_blocks()) << "block id " << id << " outside [0, " << num_blocks() << ")";
  return blocks_[static_cast<size_t>(id)];
}

bool BlockPool::allocate(int64_t n, std::vector<BlockId>* out) {
  KV_CHECK(n >= 0);
  if (n > num_available()) return false;
  for (int64_t i = 0; i < n; ++i) {
    BlockId id;
    if (!free_.empty()) {
      std::pop_heap(free_.begin(), free_.end(), std::greater<>());
      id = free_.back();
      free_.pop_back();
      block(id).in_free_list = false;
    } else {
      id = lru_.front();
      lru_.pop_front();
      Block& b = block(id);
      b.cached = false;
      ++num_evicted_;
      if (on_evict_) on_evict_(id);
      KV_CHECK(!b.cached && b.ref_count == 0) << "evict callback re-cached block " << id;
    }
    Block& b = block(id);
    KV_DCHECK(b.ref_count == 0);
    b.ref_count = 1;
    ++num_in_use_;
    out->push_back(id);
  }
  return true;
}

void BlockPool::add_ref(BlockId id) {
  Block& b = block(id);
  if (b.ref_count == 0) {
    KV_CHECK(b.cached) << "add_ref on free block " << id << " (allocate it instead)";
    lru_.erase(b.lru_it);
    ++num_in_use_;
  }
  ++b.ref_count;
}

void BlockPool::make_unreferenced(BlockId id) {
  Block& b = block(id);
  --num_in_use_;
  if (b.cached) {
    b.lru_it = lru_.insert(lru_.end(), id);
  } else {
    b.in_free_list = true;
    free_.push_back(id);
    std::push_heap(free_.begin(), free_.end(), std::greater<>());
  }
}

void BlockPool::release(BlockId id) {
  Block& b = block(id);
  KV_CHECK(b.ref_count > 0) << "release of unreferenced block " << id;
  if (--b.ref_count == 0) make_unreferenced(id);
}

void BlockPool::release_all(const std::vector<BlockId>& ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) release(*it);
}

void BlockPool::set_cached(BlockId id, bool cached) {
  Block& b = block(id);
  KV_CHECK(!b.in_free_list) << "set_cached on free block " << id;
  if (b.cached == cached) return;
  if (b.ref_count > 0) {
    b.cached = cached;
    return;
  }
  // ref_count == 0 and the block was cached (a free block never gets here): uncache frees it.
  KV_CHECK(!cached);
  lru_.erase(b.lru_it);
  b.cached = false;
  b.in_free_list = true;
  free_.push_back(id);
  std::push_heap(free_.begin(), free_.end(), std::greater<>());
}

void BlockPool::check_invariants() const {
  int64_t free_count = 0, cached_count = 0, in_use_count = 0;
  for (const Block& b : blocks_) {
    KV_CHECK(b.ref_count >= 0);
    if (b.ref_count > 0) {
      ++in_use_count;
      KV_CHECK(!b.in_free_list);
    } else if (b.cached) {
      ++cached_count;
      KV_CHECK(!b.in_free_list);
    } else {
      ++free_count;
      KV_CHECK(b.in_free_list);
    }
  }
  KV_CHECK_EQ(free_count, num_free());
  KV_CHECK_EQ(cached_count, num_cached());
  KV_CHECK_EQ(in_use_count, num_in_use());
  KV_CHECK_EQ(free_count + cached_count + in_use_count, num_blocks());
  for (BlockId id : lru_) {
    const Block& b = block(id);
    KV_CHECK(b.ref_count == 0 && b.cached && *b.lru_it == id) << "LRU entry " << id;
  }
  KV_CHECK(std::is_heap(free_.begin(), free_.end(), std::greater<>()));
}

}  // namespace kvserve
