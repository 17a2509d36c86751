// Internals of the CPU paged attention kernels (kernels/paged_attention.h): the work items
// paged_attention.cc plans and one item kernel per SIMD level. Internal to kernels/cpu.
//
// A work item is (sequence, range of KV heads, tile of query tokens, key partition). Its rows
// are, per KV head, the tile's queries times the head's GQA group of query heads (RowMap).
// Partitions are a fixed kPartitionKeys keys, aligned to position 0, whatever the batch, the
// thread count or the tile; rows never interact. So a query row's result depends only on its
// sequence's KV and its own position: batched == alone and prefill == decode hold bit for bit
// at a given SIMD level, however the heads are split.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/paged_attention.h"

namespace kvserve::kernels::internal::paged {

// Keys per partition (flash-decoding split); a multiple of every chunk size below.
inline constexpr int64_t kPartitionKeys = 256;
// Target rows (query tokens x heads of a GQA group) per tile in prefill.
inline constexpr int64_t kTileRows = 32;

// Floats per row of a head vector as the item kernels store it: head_dim rounded up to 8
// (the tail is zero), so SIMD loops have no remainder.
inline int64_t PaddedHeadDim(int64_t head_dim) { return (head_dim + 7) / 8 * 8; }

// Keys converted to float per step (K and V chunks of chunk x padded head_dim floats stay in
// L1): 32 up to head_dim 64, 16 up to 128, else 8. Always a multiple of 8 dividing
// kPartitionKeys.
inline int64_t ChunkKeys(int64_t padded_head_dim) {
  return padded_head_dim <= 64 ? 32 : padded_head_dim <= 128 ? 16 : 8;
}

// Every level converts fp8 E4M3 to float as value / kE4M3Factor (the AVX2 path reinterprets
// the bits as f16, which is exactly that); the factor goes into the K and V factors below.
inline constexpr float kE4M3Factor = 256.0f;

// What converted K values of `kv_head` are multiplied by (besides int8 slot scales): the fp8
// head scale (times kE4M3Factor for E4M3), else 1. Powers of two keep the products exact.
inline float KFactor(const PagedKv& kv, int64_t kv_head) {
  if (kv.dtype == DType::kFp8E4M3) return kv.k_head_scales[kv_head] * kE4M3Factor;
  if (kv.dtype == DType::kFp8E5M2) return kv.k_head_scales[kv_head];
  return 1.0f;
}
// Same for V; applied once to each output row.
inline float VFactor(const PagedKv& kv, int64_t kv_head) {
  if (kv.dtype == DType::kFp8E4M3) return kv.v_head_scales[kv_head] * kE4M3Factor;
  if (kv.dtype == DType::kFp8E5M2) return kv.v_head_scales[kv_head];
  return 1.0f;
}

// Cache lines to prefetch, handed out a few at a time by the score and V loops so that the
// next chunk's K and V rows stream in while this chunk computes. Issuing a whole chunk's
// lines at once (hundreds) stalls the core: each miss holds one of a few dozen miss
// buffers, so the burst waits for memory before any arithmetic runs. Spans are contiguous
// byte ranges of span_bytes each (one slot's K or V rows of an item's KV heads).
struct PrefetchQueue {
  static constexpr int64_t kMaxSpans = 64;  // 2 x the largest chunk
  const char* spans[kMaxSpans];
  int64_t num_spans = 0;
  int64_t span_bytes = 0;
  int64_t next = 0;  // next span to prefetch

  void Reset(int64_t bytes_per_span) {
    num_spans = next = 0;
    span_bytes = bytes_per_span;
  }
  void Add(const void* p) { spans[num_spans++] = static_cast<const char*>(p); }
  // Prefetches the next span, if any is left.
  inline __attribute__((always_inline)) void Pump() {
    if (next == num_spans) return;
    const char* p = spans[next++];
    for (int64_t b = 0; b < span_bytes; b += 64) __builtin_prefetch(p + b);
  }
  void Flush() {
    while (next < num_spans) Pump();
  }
};

// Per-call constants shared by all items.
struct Problem {
  const float* q = nullptr;  // [total_rows, num_heads, head_dim]
  float* out = nullptr;      // [total_rows, num_heads, head_dim]
  const PagedKv* kv = nullptr;
  const PagedSeq* seqs = nullptr;
  int64_t num_heads = 0;
  int64_t group = 0;  // query heads per KV head
  float scale = 0.0f;
};

// Rows of an item (or merge group): KV head major, then query, then head of the GQA group:
// row r is query query_begin + (r % tile_rows) / group of query head
// (kv_head_begin + r / tile_rows) * group + r % group.
struct RowMap {
  int64_t kv_head_begin = 0;
  int64_t query_begin = 0;
  int64_t tile_rows = 0;  // queries of the tile x group
  int64_t group = 0;

  int64_t num_rows(int64_t num_kv_heads) const { return num_kv_heads * tile_rows; }
  int64_t kv_head(int64_t r) const { return kv_head_begin + r / tile_rows; }
  int64_t query(int64_t r) const { return query_begin + r % tile_rows / group; }
  int64_t head(int64_t r) const { return kv_head(r) * group + r % group; }
};

struct WorkItem {
  int64_t seq = 0;  // index into Problem::seqs
  int64_t kv_head_begin = 0, kv_head_end = 0;
  int64_t query_begin = 0, query_end = 0;  // query indices within the sequence
  // Keys [key_begin, key_end): one partition of kPartitionKeys keys (aligned to key 0),
  // key_begin raised to the sequence's key_begin, key_end clipped to the tile's last visible
  // key; never empty.
  int64_t key_begin = 0, key_end = 0;
  // Null: the item covers all the tile's keys and writes normalized rows to Problem::out.
  // Otherwise [rows, 2 + head_dim] floats: per row the running max m (of scaled scores), the
  // sum l of exp(score - m) and the unnormalized output sum_t exp(score_t - m) v_t, for
  // paged_attention.cc to merge; rows without visible keys here have m = -inf and l = 0.
  float* partial = nullptr;

  RowMap row_map(int64_t group) const {
    return {kv_head_begin, query_begin, (query_end - query_begin) * group, group};
  }
};

// Per-thread scratch, grown to the largest item seen and then reused (no allocation per
// block, nor per item once warm).
struct ItemScratch {
  std::vector<float> floats;
};

// Runs one item: same algorithm at every level (see paged_attention_item.inc). `next_item`,
// the item the thread runs after this one (or null), is only prefetched.
using ItemKernel = void (*)(const Problem& problem, const WorkItem& item,
                            const WorkItem* next_item, ItemScratch& scratch);
namespace scalar {
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch);
}  // namespace scalar
namespace avx2 {
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch);
}  // namespace avx2
namespace avx512 {
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch);
}  // namespace avx512

}  // namespace kvserve::kernels::internal::paged
