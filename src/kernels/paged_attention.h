// Paged attention: causal attention whose keys and values live in fixed-size blocks of a
// shared pool (see kv/kv_storage.h), reached through each sequence's block table, stored as
// f32, f16, bf16, fp8 (E4M3/E5M2, per-KV-head scales) or int8 (per-token, per-KV-head
// scales) and converted to float on the fly.
//
// Signatures are backend-neutral; kernels/reference has the scalar oracle (gather the
// sequence's KV into dense float rows, then reference::DenseAttention), kernels/cpu the SIMD
// and threaded versions. All functions are thread-safe for distinct `out` buffers.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace kvserve::kernels {

// One layer's paged K/V as the kernels read it (a view; owns nothing).
struct PagedKv {
  DType dtype = DType::kF32;  // f32, f16, bf16, fp8_e4m3, fp8_e5m2 or int8 (kI8)
  int64_t block_size = 0;     // tokens per block
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // [num_blocks, block_size, num_kv_heads, head_dim] values of `dtype`. Slot s (token s %
  // block_size of block s / block_size) starts at element s * num_kv_heads * head_dim.
  const void* k = nullptr;
  const void* v = nullptr;
  // fp8 only: one scale per KV head ([num_kv_heads]); the real value is stored * scale.
  const float* k_head_scales = nullptr;
  const float* v_head_scales = nullptr;
  // int8 only: one scale per slot and KV head ([num_blocks, block_size, num_kv_heads]); the
  // real value is stored * scale.
  const float* k_token_scales = nullptr;
  const float* v_token_scales = nullptr;
};

// One sequence of a batch. Its keys are positions 0 .. num_keys - 1; its queries are the last
// num_queries positions (num_keys - num_queries .. num_keys - 1), each attending causally to
// keys key_begin .. its own position. Query rows are q[query_offset .. query_offset +
// num_queries).
struct PagedSeq {
  const int32_t* block_table = nullptr;  // ceil(num_keys / block_size) block ids
  int64_t num_keys = 0;                  // >= num_queries >= 1
  int64_t num_queries = 0;
  int64_t query_offset = 0;
  // Keys (positions in the block table's token space) below key_begin are not attended at all,
  // as if absent: neither their K/V values nor the block table entries of blocks wholly below
  // key_begin are read (those entries may hold anything). 0 <= key_begin <= num_keys -
  // num_queries, so every query sees at least one key. For per-layer KV budgets (PyramidKV),
  // where a layer that keeps fewer tokens than others has padding slots first. Partitions of
  // the flash-decoding split stay aligned to key 0, so results stay batch-invariant.
  int64_t key_begin = 0;

  // Optional attention statistics for queries q >= stats_query_begin (query indices within
  // the sequence, 0 .. num_queries - 1; null pointers: off, at no measurable cost). Each
  // pointer may be set or null independently.
  // stats_scores[((q - stats_query_begin) * num_heads + head) * num_keys + t] = the scaled
  //   logit scale * q . k_t (the true value: fp8 head scales and int8 slot scales applied) for
  //   every key t the query attends (key_begin <= t <= its position); other entries are not
  //   written.
  // stats_lse[(q - stats_query_begin) * num_heads + head] = log(sum over those keys of
  //   exp(logit)), in float.
  // So exp(stats_scores - stats_lse) is the query's softmax weight of key t (see
  // AccumulateAttentionMass). Outputs are bit-identical with statistics on or off.
  // 0 <= stats_query_begin <= num_queries.
  float* stats_scores = nullptr;
  float* stats_lse = nullptr;
  int64_t stats_query_begin = 0;
};

struct PagedAttentionShape {
  int64_t num_heads = 0;  // query heads; head h uses KV head h / (num_heads / num_kv_heads)
  float scale = 0.0f;     // usually 1 / sqrt(head_dim)
};

// q, out: [total_rows, num_heads, head_dim] float32 (rows of all sequences).
//
// Prefill (or any chunk): one sequence with num_queries >= 1 tokens; cached context plus the
// chunk itself.
void PagedPrefillAttention(const float* q, const PagedKv& kv, const PagedSeq& seq,
                           const PagedAttentionShape& shape, float* out, ThreadPool* pool);
// Decode: many sequences with num_queries == 1 each, in one call. Long contexts are split
// into partitions processed in parallel and merged (flash-decoding), so that one long
// sequence still uses every thread.
void PagedDecodeAttention(const float* q, const PagedKv& kv, const PagedSeq* seqs,
                          int64_t num_seqs, const PagedAttentionShape& shape, float* out,
                          ThreadPool* pool);
// A mixed batch: decode sequences (num_queries == 1) through PagedDecodeAttention, the others
// through PagedPrefillAttention.
void PagedAttention(const float* q, const PagedKv& kv, const PagedSeq* seqs, int64_t num_seqs,
                    const PagedAttentionShape& shape, float* out, ThreadPool* pool);

// Attention mass for token eviction (H2O heavy hitters, SnapKV observation windows): sums the
// softmax weights recorded by PagedSeq::stats_scores / stats_lse over rows and GQA groups.
// For every recorded row i in 0 .. num_rows - 1 (in that order, so float sums are
// deterministic) and query head h, adds
//   exp(scores[(i * num_heads + h) * num_keys + t] - lse[i * num_heads + h])
// to mass[(h / (num_heads / num_kv_heads)) * mass_stride + t] for t in [key_begin,
// row0_last_key + i], row i's visible keys (row0_last_key: the position of the first recorded
// query, num_keys - num_queries + stats_query_begin for a PagedSeq; row0_last_key + num_rows
// - 1 < num_keys). Other entries of mass are untouched; mass_stride >= num_keys. The same
// result at every SIMD level up to exp's rounding (about 1e-7 relative per term).
void AccumulateAttentionMass(const float* scores, const float* lse, int64_t num_rows,
                             int64_t num_heads, int64_t num_kv_heads, int64_t num_keys,
                             int64_t key_begin, int64_t row0_last_key, float* mass,
                             int64_t mass_stride);

// Token eviction's attention mass wanted from one sequence of PagedAttentionWithMass.
struct PagedMassRequest {
  int64_t seq = 0;          // index into the call's seqs; at most one request per sequence
  int64_t query_begin = 0;  // its first query (0 .. num_queries) whose weights are added
  float* mass = nullptr;    // [num_kv_heads, mass_stride], added to
  int64_t mass_stride = 0;  // >= the sequence's num_keys
};

// PagedAttention, plus for each request the softmax weights of its sequence's queries
// query_begin .. num_queries - 1 added to its mass (the sums of AccumulateAttentionMass: over
// the rows in order and the KV head's GQA group, keys key_begin .. each row's position).
// The sequences' own stats pointers must be null. Outputs equal PagedAttention's bit for bit.
// The scores scratch (owned by the calling thread, reused) stays under max_score_floats floats
// where one query tile fits: sequences with requests run in slices of whole query tiles (the
// kernels' unit of work), which changes no result, several slices and sequences per parallel
// section.
void PagedAttentionWithMass(const float* q, const PagedKv& kv, const PagedSeq* seqs,
                            int64_t num_seqs, const PagedAttentionShape& shape,
                            const PagedMassRequest* requests, int64_t num_requests, float* out,
                            ThreadPool* pool, int64_t max_score_floats = int64_t{1} << 21);

}  // namespace kvserve::kernels
