// Token eviction (KV compression) policies and their selection logic as plain scalar reference
// code on dense score arrays: StreamingLLM (arXiv 2309.17453), H2O (arXiv 2306.14048), SnapKV
// (arXiv 2404.14469) and PyramidKV (arXiv 2406.02069). Each Select* function answers "which
// token positions does every (layer, KV head) keep", nothing else: no cache, no blocks, no
// requests. Later paged code (compaction, kernel statistics) is tested against these functions.
// docs/kv-eviction.md describes every method exactly as implemented here.
//
// Conventions shared by every function in this header:
// - A "position" is an index 0..num_tokens-1 into the sequence the scores describe (the caller
//   maps it to cache slots).
// - Every (layer, KV head) keeps min(its budget, num_tokens) positions, returned ascending and
//   unique. The first sink_tokens positions and the last recent_tokens() positions are always
//   kept; the rest of the budget goes to the highest-scoring other positions.
// - Ties in a score are broken towards the lower position (the earlier token is kept), so
//   every selection is deterministic and independent of sort implementation.
// - GQA: query head h belongs to KV head h / (num_q_heads / num_kv_heads) (contiguous groups,
//   as Llama's repeat_kv and our attention kernels). A KV head's score is the SUM of its
//   group's query heads' scores: the stored K/V entry serves every query head of the group, so
//   the attention mass it receives is the sum; the mean (kvpress) ranks identically.
// - When nothing is evicted (num_tokens <= the budget, every layer) the scores are not read
//   and may be empty.
// - Scores must be finite (KV_CHECK); shapes must match (KV_CHECK); the policy must have passed
//   Validate() (KV_CHECK): user input is validated at the edge, never here.
// Thread-safety: pure functions over their arguments; safe to call concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvserve {

enum class KvEvictionMethod {
  kNone,        // keep everything
  kStreaming,   // StreamingLLM: attention sinks + most recent tokens
  kH2o,         // H2O: recent window + heavy hitters by accumulated attention mass
  kSnapKv,      // SnapKV: observation-window vote, max-pooled, top tokens per KV head
  kPyramidKv,   // PyramidKV: SnapKV scoring with per-layer budgets decreasing with depth
};

// "none", "streaming", "h2o", "snapkv", "pyramidkv".
const char* KvEvictionMethodName(KvEvictionMethod method);
// Parses one of the names above (exact, lower case). InvalidArgument naming the allowed values
// otherwise.
StatusOr<KvEvictionMethod> ParseKvEvictionMethod(std::string_view name);

// One sequence's eviction policy (the flags --kv-eviction, --kv-budget, --kv-sink-tokens,
// --kv-window, --kv-observation-window; the request's "kv_policy"). Plain value type.
// Defaults follow the papers and their released code:
// - budget_tokens 1024: StreamingLLM's 4 sinks + 1020 recent tokens, SnapKV's and PyramidKV's
//   1024-token LongBench setting.
// - sink_tokens 4: StreamingLLM's four attention sinks. H2O and SnapKV have no explicit sinks
//   (their scores nearly always select the first tokens anyway); here every method protects
//   them. sink_tokens = 0 gives those papers' exact selection.
// - window_tokens unset: the method's own recent window (recent_tokens()).
// - observation_window 32, pooling_kernel 5: SnapKV's release defaults (window_size,
//   kernel_size).
// - pyramid_beta 20: PyramidKV's release default (beta).
struct KvEvictionPolicy {
  KvEvictionMethod method = KvEvictionMethod::kNone;
  // Tokens kept per layer and KV head (PyramidKV: on average over layers). Includes the sinks
  // and the recent window.
  int64_t budget_tokens = 1024;
  // The first tokens of the sequence, always kept.
  int64_t sink_tokens = 4;
  // The most recent tokens, always kept; unset means the method's default (recent_tokens()).
  std::optional<int64_t> window_tokens;
  // SnapKV/PyramidKV: the last prompt positions whose attention rows vote.
  int64_t observation_window = 32;
  // SnapKV/PyramidKV: width of the 1-D max-pool over the votes (odd; 1 = no pooling).
  int64_t pooling_kernel = 5;
  // PyramidKV: the top layer's selected tokens are (average selected tokens) / beta.
  int64_t pyramid_beta = 20;

  // Ok if the fields the method uses are in range; InvalidArgument naming the field otherwise.
  // kNone accepts anything (the other fields are unused).
  Status Validate() const;

  // The number of most recent tokens always kept: window_tokens if set, else
  //   streaming: budget_tokens - sink_tokens (all but the sinks is the window),
  //   h2o: (budget_tokens - sink_tokens) / 2 (H2O splits its budget evenly between heavy
  //        hitters and recent tokens),
  //   snapkv, pyramidkv: observation_window (SnapKV keeps the whole observation window),
  //   none: 0.
  int64_t recent_tokens() const;

  // "snapkv budget=1024 sink=4 window=32 obs=32 pool=5" (fields the method uses).
  std::string ToString() const;
};

// The sizes every selection works on. Plain value type.
struct KvEvictionShape {
  int64_t num_layers = 0;
  int64_t num_q_heads = 0;   // query heads (SnapKV/PyramidKV inputs are per query head)
  int64_t num_kv_heads = 0;  // divides num_q_heads
  int64_t num_tokens = 0;    // sequence length the scores describe
};

// The positions every (layer, KV head) keeps. Plain value type.
// Invariant: positions.size() == num_layers * num_kv_heads; each list ascending, unique and
// within [0, num_tokens).
struct KvKeptTokens {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  std::vector<std::vector<int64_t>> positions;  // [num_layers * num_kv_heads][num_kept]

  const std::vector<int64_t>& at(int64_t layer, int64_t kv_head) const;
  // Sum of the kept counts over layers and heads.
  int64_t total_kept() const;
};

// StreamingLLM: positions [0, sink_tokens) and the last budget_tokens - sink_tokens positions,
// the same for every layer and head (no scores). Everything if num_tokens <= budget_tokens.
KvKeptTokens SelectStreaming(const KvEvictionPolicy& policy, const KvEvictionShape& shape);

// H2O: sinks, the last recent_tokens() positions, and the budget's remaining positions with the
// largest accumulated attention mass among the others, per layer and KV head.
// accumulated_mass: [num_layers, num_kv_heads, num_tokens], the attention weight each token
// received, summed over every query that attended to it (prompt rows and decode steps) and
// over the KV head's GQA group (AccumulateAttentionMass builds it). Called once per decode step
// on the current cache this is H2O's greedy eviction; over a prompt it is a one-shot selection.
KvKeptTokens SelectH2o(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                       std::span<const float> accumulated_mass);

// SnapKV: per layer and KV head, the vote of SnapKvVotes over the prefix (every position before
// the observation window), then sinks + the whole recent window + the top (budget_tokens -
// sink_tokens - recent_tokens()) prefix positions by vote.
// window_weights: [num_layers, num_q_heads, observation_window, num_tokens], the softmax
// attention rows of query positions num_tokens - observation_window .. num_tokens - 1 over all
// keys (causal: zero beyond the row's own position), as ReferenceAttentionWeights computes.
KvKeptTokens SelectSnapKv(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                          std::span<const float> window_weights);

// PyramidKV: SelectSnapKv's scores and rule, with layer l keeping PyramidKvLayerBudgets()[l]
// tokens instead of budget_tokens. window_weights as for SelectSnapKv.
KvKeptTokens SelectPyramidKv(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                             std::span<const float> window_weights);

// PyramidKV's per-layer budgets (tokens kept per KV head, sinks and window included), layer 0
// the lowest. With P = sink_tokens + recent_tokens() protected tokens, C = budget_tokens - P
// selected tokens on average and S = num_tokens - P selectable tokens, the paper's schedule:
//   c_min = C / beta (floor), c_max = 2C - c_min; if c_max > S: c_max = S, c_min = 2C - S;
//   c_l = c_max - l (c_max - c_min) / (num_layers - 1)   (real-valued, an arithmetic sequence
//   whose sum is exactly num_layers * C).
// Each c_l is rounded down or up by largest remainder (ties to the lower layer), so the budgets
// are non-increasing with depth and sum to exactly num_layers * budget_tokens; the released code
// floors the step instead and overshoots the total. Budget l = c_l + P. One layer: budget_tokens.
// If num_tokens <= budget_tokens every layer keeps num_tokens.
std::vector<int64_t> PyramidKvLayerBudgets(const KvEvictionPolicy& policy, int64_t num_layers,
                                           int64_t num_tokens);

// Score arrays for SelectKeptTokens; only the one the method needs must be non-empty.
struct KvEvictionScores {
  std::span<const float> accumulated_mass;  // h2o: [num_layers, num_kv_heads, num_tokens]
  std::span<const float> window_weights;    // snapkv, pyramidkv: see SelectSnapKv
};

// Dispatches on policy.method; kNone keeps every position.
KvKeptTokens SelectKeptTokens(const KvEvictionPolicy& policy, const KvEvictionShape& shape,
                              const KvEvictionScores& scores);

// ---- The engine's entry point: selection from kernel-accumulated attention mass ----

// What the paged attention kernels accumulate for a sequence (kernels::AccumulateAttentionMass):
// [num_layers, num_kv_heads, num_tokens], the softmax weights each position received, summed
// over the recorded query rows and over the KV head's GQA group. H2O records every row it
// computes; SnapKV and PyramidKV record only the observation window's rows.
// Dispatches on policy.method: streaming ignores the mass; h2o is SelectH2o on it; snapkv and
// pyramidkv restrict it to the prefix, max-pool it and select as SelectSnapKv and
// SelectPyramidKv do (the dense functions sum the same weights rows-first, so their votes may
// differ in the last float bits, never otherwise). kNone keeps every position.
KvKeptTokens SelectKeptTokensFromMass(const KvEvictionPolicy& policy,
                                      const KvEvictionShape& shape,
                                      std::span<const float> attention_mass);

// Where a compaction puts what each (layer, KV head) keeps: layer l's i-th kept position goes to
// slot layer_key_begin[l] + i of the compacted table, layer_key_begin[l] = num_slots - (kept
// count of layer l), so that every layer's kept tokens end at slot num_slots - 1 and the next
// tokens follow. Layers keeping fewer tokens than the largest (PyramidKV) leave their first
// slots unused; attention skips them (kernels::PagedSeq::key_begin). Plain value type.
struct KvCompactionLayout {
  int64_t num_slots = 0;                 // the largest layer's kept count
  std::vector<int64_t> layer_key_begin;  // [num_layers]
};
// Every KV head of a layer must keep the same number of positions (KV_CHECK), as every
// Select* function does.
KvCompactionLayout CompactionLayout(const KvKeptTokens& kept);

// ---- When a sequence is compacted (docs/kv-eviction.md, "When a sequence is compacted") ----

// Where a sequence stands. Plain value type.
struct KvEvictionProgress {
  int64_t num_computed_tokens = 0;  // tokens whose KV was computed (prompt and output)
  int64_t num_kv_slots = 0;         // slots its table holds (num_computed_tokens until compacted)
  // The compression point: the end of the prompt, or a scoring request's prompt_logits_start
  // (its context is compressed, then the rest is scored).
  int64_t compress_at = 0;
};

// The slots at which StreamingLLM and H2O compact during decoding: budget_tokens + block_size
// (one block of slack, so that a compaction's copy is amortized over block_size tokens).
int64_t ContinuousCompactionSlots(const KvEvictionPolicy& policy, int64_t block_size);
// True when a sequence that just reached `progress` must be compacted before it computes more:
//   snapkv, pyramidkv: at the compression point, if it holds more than budget_tokens slots;
//   h2o: the same, and past the compression point whenever its slots reach
//        ContinuousCompactionSlots;
//   streaming: whenever its slots reach ContinuousCompactionSlots (prefill included);
//   none: never.
bool CompactionDue(const KvEvictionPolicy& policy, const KvEvictionProgress& progress,
                   int64_t block_size);
// The most tokens the sequence may compute from `progress` before a compaction may be due (>= 1
// when CompactionDue is false; INT64_MAX when none can be): a step's chunk never crosses a
// compaction point, so the tokens after it see exactly the slots that token-by-token decoding
// would, and a recomputation after preemption compacts at the same points.
int64_t TokensUntilCompaction(const KvEvictionPolicy& policy, const KvEvictionProgress& progress,
                              int64_t block_size);
// The most prompt tokens a prefix-cache hit may serve (below the first compaction point; for
// snapkv/pyramidkv also below the observation window, whose rows must be computed to vote;
// 0 for h2o, which scores with every prompt row's attention: a cached row has none). INT64_MAX
// for none.
int64_t MaxCachedTokensWithEviction(const KvEvictionPolicy& policy, int64_t compress_at,
                                    int64_t block_size);

// ---- Score helpers (also the oracles later paged/kernel statistics are tested against) ----

// Sums the GQA group of each KV head: in [num_outer, num_q_heads, inner] ->
// [num_outer, num_kv_heads, inner] (num_outer = in.size() / (num_q_heads * inner)).
std::vector<float> SumGqaGroups(std::span<const float> in, int64_t num_q_heads,
                                int64_t num_kv_heads, int64_t inner);

// Adds one layer's attention (prompt rows or one decode step) to H2O's accumulated mass:
// mass[g, t] += sum over query heads h of group g and query rows i of weights[h, i, t].
// weights: [num_q_heads, num_queries, num_keys]; mass: [num_kv_heads, num_keys].
void AccumulateAttentionMass(std::span<const float> weights, int64_t num_q_heads,
                             int64_t num_queries, int64_t num_kv_heads, std::span<float> mass);

// 1-D max-pool, stride 1, "same" padding (kernel / 2 each side, padded values never win, as
// torch's max_pool1d pads with -inf): out[t] = max of in[max(0, t - k/2) .. min(n-1, t + k/2)].
// kernel odd and >= 1.
std::vector<float> MaxPool1dSame(std::span<const float> in, int64_t kernel);

// SnapKV's vote for one layer: for each KV head, the window rows' weights summed over the rows
// and the GQA group, restricted to the prefix [0, num_prefix_tokens), then MaxPool1dSame over
// the prefix only (the pool never sees observation-window keys).
// window_weights: [num_q_heads, num_window_rows, num_tokens]; returns
// [num_kv_heads, num_prefix_tokens].
std::vector<float> SnapKvVotes(std::span<const float> window_weights, int64_t num_q_heads,
                               int64_t num_kv_heads, int64_t num_window_rows, int64_t num_tokens,
                               int64_t num_prefix_tokens, int64_t pooling_kernel);

// The geometry of ReferenceAttentionWeights. Plain value type.
struct ReferenceAttentionShape {
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;  // divides num_q_heads
  int64_t head_dim = 0;
  int64_t num_keys = 0;      // keys are positions 0..num_keys-1
  float scale = 0.0f;        // 0: 1 / sqrt(head_dim)
};

// Dense causal softmax(q . k * scale) in double precision, the oracle for the attention
// statistics: weights[h, i, t] for query i at query_positions[i] and key t, 0 for
// t > query_positions[i]. Q and K use the kernels' token-major layout.
// q: [num_queries, num_q_heads, head_dim]; k: [num_keys, num_kv_heads, head_dim];
// query_positions: [num_queries], each in [0, num_keys); returns
// [num_q_heads, num_queries, num_keys].
std::vector<float> ReferenceAttentionWeights(std::span<const float> q, std::span<const float> k,
                                             std::span<const int64_t> query_positions,
                                             const ReferenceAttentionShape& shape);

}  // namespace kvserve
