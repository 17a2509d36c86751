// Scalar oracles for the kernels of kernels/kernels.h: same signatures, plain loops, double
// accumulation. Slow on purpose; the fast kernels in kernels/cpu are tested against these.
// All functions are thread-safe (no shared state); `pool` arguments are accepted for signature
// parity and ignored.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/paged_attention.h"

namespace kvserve::reference {

std::vector<float> RopeInvFreqs(const RopeOptions& options);

void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool);

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out);

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows,
               int64_t n, float eps, float* out);

void Gelu(const float* x, int64_t n, float* out);

void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, RopeLayout layout);

void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

void Softmax(float* x, int64_t n);

void EmbeddingLookup(const Tensor& table, int64_t token, float* out);

void DenseAttention(const float* q, const float* k, const float* v,
                    const kernels::AttentionShape& shape, float* out, ThreadPool* pool);

// Dequantizes one sequence's paged K and V (all num_keys positions, all KV heads) through its
// block table into dense rows: k_out, v_out [seq.num_keys, kv.num_kv_heads, kv.head_dim].
// f16/bf16 convert exactly; fp8 is the decoded value times the KV head's scale; int8 is the
// value times its slot's and head's scale. Positions below seq.key_begin are zeros (their
// values and the block table entries of blocks wholly below it are not read).
void GatherPagedKv(const kernels::PagedKv& kv, const kernels::PagedSeq& seq, float* k_out,
                   float* v_out);

// Each sequence: GatherPagedKv, then DenseAttention over keys key_begin .. num_keys - 1 (first_pos
// = num_keys - num_queries - key_begin relative to those). Attention statistics
// (PagedSeq::stats_scores / stats_lse) are computed in double from the gathered K and rounded.
void PagedAttention(const float* q, const kernels::PagedKv& kv, const kernels::PagedSeq* seqs,
                    int64_t num_seqs, const kernels::PagedAttentionShape& shape, float* out,
                    ThreadPool* pool);

// kernels::AccumulateAttentionMass with each mass entry's additions summed in double (rows in
// order) and then added to the float mass.
void AccumulateAttentionMass(const float* scores, const float* lse, int64_t num_rows,
                             int64_t num_heads, int64_t num_kv_heads, int64_t num_keys,
                             int64_t key_begin, int64_t row0_last_key, float* mass,
                             int64_t mass_stride);

}  // namespace kvserve::reference
