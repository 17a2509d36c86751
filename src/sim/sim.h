// `kvserve sim`: replays a request trace (Mooncake JSONL: timestamp, input_length,
// output_length, hash_ids; trace/trace.h parses it) through the real Scheduler and KvCacheManager (block pool + radix
// prefix cache) without running a model, for a sweep of cache capacities, and reports
// prefix-cache hit rates (tokens and blocks), evictions and miss reasons beside the rate an
// unbounded cache would reach, with the queueing, TTFT and preemptions the scheduler produced.
//
// Prompt tokens: token p of a prompt is hash_ids[p / H] * H + p % H (H = tokens per hash id,
// 512 for Mooncake), so equal hash-id prefixes give equal token prefixes and the radix tree
// sees real token lists; the cache's block size need not equal H.
//
// Serving model: the real Scheduler (src/runtime/scheduler.h) drives the KvCacheManager, step
// by step, with a trivial stand-in for the model runner. Requests are added when the simulated
// clock reaches their timestamps; each step is out = schedule(), one sampled token for every
// sequence that samples, update(out, tokens). So admission, chunked prefill under the
// --max-num-batched-tokens budget, --max-num-seqs, block allocation, prefix-deferral and
// preemption by recompute are exactly the engine's. A step lasts 1 / decode_tokens_per_s (the
// engine's base step time) plus its prefill tokens / prefill_tokens_per_s (the engine's
// prefill throughput); prefill tokens are all scheduled tokens except one-token decodes past
// the prompt (recomputing a preempted request's output counts as prefill). With nothing to
// run the clock jumps to the next arrival. A request generates max(1, output_length) tokens
// (ignore_eos; an output_length of 0 becomes 1) whose ids are -2 - (request index): never a
// prompt token, so outputs are committed to the cache like a real engine's but never match
// another request's prompt.
//
// Hit statistics count each request's first admission only: the lookups of preempted requests
// re-admitted for recompute (which cover their output too) are subtracted and reported apart
// (SimRow::readmit_*).
//
// Plain functions; no state beyond a call; SimulateCapacity is safe to call from several
// threads at once (RunSim does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cost/step_time.h"
#include "kv/kv_cache_manager.h"
#include "kv/token_eviction.h"
#include "runtime/engine_policy.h"
#include "trace/trace.h"

namespace kvserve::sim {

// The prompt's token ids (see the file comment); the second form reuses `tokens`' memory.
std::vector<TokenId> TracePromptTokens(const TraceRequest& request, int64_t hash_block_tokens);
void TracePromptTokens(const TraceRequest& request, int64_t hash_block_tokens,
                       std::vector<TokenId>* tokens);

// What to replay and how (the flags of `kvserve sim`, registered in cli/sim_cmd.cc).
struct SimOptions {
  int64_t block_tokens = 512;       // KV block size of the simulated cache
  int64_t hash_block_tokens = 512;  // tokens per trace hash id (Mooncake: 512)
  // Capacities to replay, in blocks; empty: the equivalent of 1k, 2k, 5k, 10k, 20k, 50k and
  // 100k blocks of 512 tokens.
  std::vector<int64_t> capacities_blocks;
  // One engine step lasts 1 / decode_tokens_per_s + its prefill tokens / prefill_tokens_per_s
  // seconds (a decode-only step: 25 ms by default).
  double decode_tokens_per_s = 40.0;
  double prefill_tokens_per_s = 100000.0;
  // With a deployment (a model on a hardware profile: cost/step_time.h), a step lasts what the
  // cost model says of the sequences the scheduler put in it (cost::ComputeStepCost), and the
  // two rates above are unused.
  std::optional<cost::Deployment> deployment;
  // The scheduler flags, as serve and generate take them (runtime/engine_policy.h), resolved
  // per capacity by ResolveSchedulerConfig; the sim's default budget is 8192 tokens per step.
  SchedulerFlags scheduler{.max_num_batched_tokens = 8192};
  // 0: the largest prompt + max(1, output) of the trace. Capped to each capacity in tokens.
  int64_t max_model_len = 0;
  // Token eviction for every request (serve's --kv-eviction / --kv-budget flags): the
  // scheduler's compaction points, and at each one the table compacted to the kept slots (as
  // EngineCore does; which tokens are kept does not change the timing), and attention timed
  // over the slots each sequence holds. streaming, h2o and snapkv (every layer keeps the same
  // count); not pyramidkv.
  KvEvictionPolicy kv_policy;
  int64_t max_requests = 0;  // replay only the first N requests (0: all)
  int64_t tenants = 1;       // cache salts given round robin (request i: salt i % tenants)
  int threads = 0;                // capacities replayed in parallel (0: one per core)
  bool check_invariants = false;  // Scheduler::check_invariants() after every step
};

// InvalidArgument naming the flag for an option that cannot work. SimulateCapacity and RunSim
// check it too.
Status ValidateSimOptions(const SimOptions& options);

// The outcome of one replay.
struct SimRow {
  int64_t capacity_blocks = -1;  // -1: unbounded (counted analytically, no manager)
  // Hits, misses by reason and evictions. Lookups are counted at each request's first
  // admission only (re-admissions after preemption are in readmit_*); the block counts
  // (in use, cached, free) are the manager's at the end.
  KvCacheManagerStats stats;
  int64_t num_requests = 0;  // finished
  int64_t num_rejected = 0;  // prompt >= max_model_len: add_request refused it
  int64_t num_clipped = 0;   // prompt + output > max_model_len: output cut to fit
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;  // the step budget the flags resolved to
  // Preemptions (SchedulerStats::num_preemptions_total) and the lookups of the re-admissions
  // they caused (prompt + output so far, and how much of it the cache still held).
  int64_t num_preemptions = 0;
  int64_t readmit_queries_tokens = 0;
  int64_t readmit_hits_tokens = 0;
  int64_t num_steps = 0;               // schedule() calls that scheduled something
  int64_t num_compactions = 0;         // token eviction's (options.kv_policy)
  int64_t num_prefill_tokens = 0;      // tokens computed in prefill (recompute included)
  int64_t num_decode_tokens = 0;
  // Simulated seconds: queueing delay (arrival to the start of the step that first scheduled
  // the request) and time to first token (arrival to the end of the step that sampled it),
  // over finished requests; p99 as base/percentile.h defines it (linear interpolation).
  double mean_queue_s = 0.0;
  double p99_queue_s = 0.0;
  double max_queue_s = 0.0;
  double mean_ttft_s = 0.0;
  double p99_ttft_s = 0.0;
  double end_s = 0.0;  // simulated time when the last request finished
  int64_t peak_blocks_in_use = 0;
  // With a deployment: the cost model's time summed over the steps, by op.
  cost::StepCost step_time_total;
  double elapsed_s = 0.0;  // wall time of this replay

  double token_hit_rate() const;  // prefix_hits_tokens / prefix_queries_tokens (0 if none)
  double block_hit_rate() const;  // over full prompt blocks
};

// Replays `trace` through a Scheduler and a KvCacheManager of `capacity_blocks` blocks.
// InvalidArgument when the options or the SchedulerConfig they make are invalid.
StatusOr<SimRow> SimulateCapacity(const std::vector<TraceRequest>& trace, const SimOptions& options,
                                  int64_t capacity_blocks);

// What a cache that never evicts would serve if requests were looked up in arrival order: a
// prompt block hits when an earlier request's prompt had the same prefix up to that block's
// end, in the same namespace. Fills the stats' query, hit and miss counters. The scheduler
// admits in arrival order (FCFS) except that a request waiting for a prefix block another
// request is computing may be overtaken; an overtaker shares no uncached block with it, so
// the count is the same. Two things differ: a block whose first computer was preempted before
// computing it may be computed (and counted never-seen) by a later request; and a block that
// another tenant is still computing is never-seen to the manager but other-namespace here (the
// scheduler defers only within a namespace; the sum of the two is the same).
SimRow SimulateUnbounded(const std::vector<TraceRequest>& trace, const SimOptions& options);

struct SimReport {
  SimOptions options;
  std::string trace_name;
  int64_t num_requests = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_hash_blocks = 0;
  int64_t num_distinct_hash_ids = 0;
  std::vector<SimRow> rows;  // one per capacity
  SimRow unbounded;
  double elapsed_s = 0.0;  // wall time of all replays
  int threads = 1;
};

// The first options.max_requests requests of `trace` (all when 0): what every replay runs.
std::vector<TraceRequest> TraceHead(const std::vector<TraceRequest>& trace,
                                    const SimOptions& options);

// Validates options (user errors -> InvalidArgument), then replays every capacity.
StatusOr<SimReport> RunSim(const std::vector<TraceRequest>& trace, const SimOptions& options);

// What `kvserve plan --stack --trace T` takes from a trace: the mean prompt and output of the
// requests that fit `max_model_len` (prompt + max(1, output); the others are counted), and
// the token hit rate a cache that never evicts would reach over all of them
// (SimulateUnbounded with `options`' block and hash-block sizes).
struct TraceSummary {
  int64_t num_requests = 0;
  int64_t num_too_long = 0;
  double mean_prompt_tokens = 0.0;
  double mean_output_tokens = 0.0;
  double token_hit_rate = 0.0;
};
TraceSummary SummarizeTrace(const std::vector<TraceRequest>& trace, const SimOptions& options,
                            int64_t max_model_len);

// `sim --plot`: the token hit rate against the cache's capacity (and a cache that never
// evicts, dashed), and mean and p99 TTFT against capacity; an SVG document.
std::string SimPlotSvg(const SimReport& report);

std::string FormatSimText(const SimReport& report);
std::string FormatSimJson(const SimReport& report);

}  // namespace kvserve::sim
