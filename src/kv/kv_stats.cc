#include "kv/kv_stats.h"

#include <algorithm>
#include <unordered_map>

namespace kvserve {

namespace {

// Fills the fields that follow from the block counts and num_tokens_stored.
void FillDerived(const KvCacheSpec& spec, KvMemoryStats* s) {
  s->capacity_tokens = s->num_blocks * spec.block_size;
  s->bytes_capacity = s->num_blocks * spec.bytes_per_block();
  s->bytes_reserved = s->num_blocks_in_use * spec.bytes_per_block();
  s->bytes_holding_tokens = s->num_tokens_stored * spec.bytes_per_token();
  const int64_t slots_in_use = s->num_blocks_in_use * spec.block_size;
  if (slots_in_use > 0) {
    s->fragmentation_perc = 100.0 * static_cast<double>(slots_in_use - s->num_tokens_stored) /
                            static_cast<double>(slots_in_use);
  }
  if (s->num_blocks > 0) {
    s->usage_perc = 100.0 * static_cast<double>(s->num_blocks_in_use) /
                    static_cast<double>(s->num_blocks);
  }
}

}  // namespace

KvMemoryStats ComputeKvMemoryStats(const KvCacheSpec& spec, const BlockPool& pool,
                                   const std::vector<const BlockTable*>& tables) {
  KvMemoryStats s;
  s.num_blocks = pool.num_blocks();
  s.num_blocks_in_use = pool.num_in_use();
  s.num_blocks_cached = pool.num_cached();
  s.num_blocks_free = pool.num_free();
  std::unordered_map<BlockId, int64_t> fill;  // block -> tokens it holds
  for (const BlockTable* table : tables) {
    const int64_t n = table->num_tokens();
    const auto& ids = table->block_ids();
    for (size_t b = 0; b < ids.size(); ++b) {
      const int64_t first = static_cast<int64_t>(b) * spec.block_size;
      const int64_t tokens = std::clamp<int64_t>(n - first, 0, spec.block_size);
      int64_t& f = fill[ids[b]];
      f = std::max(f, tokens);
    }
  }
  for (const auto& [id, tokens] : fill) s.num_tokens_stored += tokens;
  FillDerived(spec, &s);
  return s;
}

KvMemoryStats SequenceKvMemoryStats(const KvCacheSpec& spec, int64_t num_blocks,
                                    int64_t num_seq_blocks, int64_t num_tokens) {
  KvMemoryStats s;
  s.num_blocks = num_blocks;
  s.num_blocks_in_use = num_seq_blocks;
  s.num_blocks_free = num_blocks - num_seq_blocks;
  s.num_tokens_stored = num_tokens;
  FillDerived(spec, &s);
  return s;
}

}  // namespace kvserve
