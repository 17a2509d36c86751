// `kvserve sim`: replays a request trace (Mooncake JSONL: timestamp, input_length,
// output_length, hash_ids) through the real KvCacheManager (block pool + radix prefix cache)
// without running a model, for a sweep of cache capacities, and reports prefix-cache hit
// rates (tokens and blocks), evictions and miss reasons beside the rate an unbounded cache
// would reach.
//
// Prompt tokens: token p of a prompt is hash_ids[p / H] * H + p % H (H = tokens per hash id,
// 512 for Mooncake), so equal hash-id prefixes give equal token prefixes and the radix tree
// sees real token lists; the cache's block size need not equal H.
//
// Admission model (a stand-in for the scheduler's bookkeeping, one event per arrival and per
// finish): requests arrive at their timestamps into one FCFS queue; the head is admitted when
// a sequence slot is free and KvCacheManager::can_start() says its whole prompt + output fits
// (blocks are reserved for the output at admission; no preemption); its prompt is committed
// to the cache at admission; it runs for uncached_prompt / prefill rate + output / decode rate
// seconds, holding its blocks, then frees them (cached blocks stay resident). Output tokens
// are never cached: the trace does not say what they are.
//
// Plain functions; no state beyond a call.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kv/kv_cache_manager.h"

namespace kvserve::cli {

// One request of a trace.
struct TraceRequest {
  int64_t timestamp_ms = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<int64_t> hash_ids;  // one per hash block of the prompt (the last may be partial)
};

// Parses Mooncake JSONL text (one JSON object per line; blank lines skipped). Checks that
// input_length fits its hash ids: (n - 1) * H < input_length <= n * H, and that token ids stay
// within int32. Errors name the line.
StatusOr<std::vector<TraceRequest>> ParseMooncakeTrace(std::string_view text,
                                                       int64_t hash_block_tokens);
StatusOr<std::vector<TraceRequest>> LoadMooncakeTrace(const std::string& path,
                                                      int64_t hash_block_tokens);

// The prompt's token ids (see the file comment); the second form reuses `tokens`' memory.
std::vector<TokenId> TracePromptTokens(const TraceRequest& request, int64_t hash_block_tokens);
void TracePromptTokens(const TraceRequest& request, int64_t hash_block_tokens,
                       std::vector<TokenId>* tokens);

// The command line of `kvserve sim`.
struct SimOptions {
  std::string trace_path;
  int64_t block_tokens = 512;       // KV block size of the simulated cache
  int64_t hash_block_tokens = 512;  // tokens per trace hash id (Mooncake: 512)
  // Capacities to replay, in blocks; empty: the equivalent of 1k, 2k, 5k, 10k, 20k, 50k and
  // 100k blocks of 512 tokens.
  std::vector<int64_t> capacities_blocks;
  double decode_tokens_per_s = 40.0;      // per request
  double prefill_tokens_per_s = 10000.0;  // per request, uncached prompt tokens
  int64_t max_num_seqs = 256;
  int64_t max_requests = 0;  // replay only the first N requests (0: all)
  int64_t tenants = 1;       // cache salts given round robin (request i: salt i % tenants)
  bool enable_prefix_caching = true;
  int threads = 0;                // capacities replayed in parallel (0: one per core)
  bool check_invariants = false;  // KvCacheManager::check_invariants() after every event
  std::string format = "text";    // text | json
};

// The outcome of one replay.
struct SimRow {
  int64_t capacity_blocks = -1;  // -1: unbounded (counted analytically, no manager)
  KvCacheManagerStats stats;     // hits, misses by reason, evictions
  int64_t num_requests = 0;      // admitted and finished
  int64_t num_rejected = 0;      // prompt + output larger than the whole cache
  int64_t num_delayed = 0;       // waited for memory or a sequence slot
  double mean_wait_s = 0.0;      // arrival to admission, over admitted requests
  double max_wait_s = 0.0;
  double end_s = 0.0;  // simulated time when the last request finished
  int64_t peak_blocks_in_use = 0;

  double token_hit_rate() const;  // prefix_hits_tokens / prefix_queries_tokens (0 if none)
  double block_hit_rate() const;  // over full prompt blocks
};

// Replays `trace` through a KvCacheManager of `capacity_blocks` blocks.
StatusOr<SimRow> SimulateCapacity(const std::vector<TraceRequest>& trace, const SimOptions& options,
                                  int64_t capacity_blocks);

// What a cache that never evicts would serve under the same admission order (FCFS keeps the
// arrival order, so it does not depend on timing): a prompt block hits when an earlier
// request's prompt had the same prefix up to that block's end, in the same namespace.
// Fills the stats' query, hit and miss counters.
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

// Validates options (user errors -> InvalidArgument), then replays every capacity.
StatusOr<SimReport> RunSim(const std::vector<TraceRequest>& trace, const SimOptions& options);

std::string FormatSimText(const SimReport& report);
std::string FormatSimJson(const SimReport& report);

// Loads the trace, runs, prints the report on stdout; returns the exit status.
int RunSimCommand(const SimOptions& options);

// Registers `kvserve sim` on `app`.
void AddSimCommand(CLI::App& app, int* exit_code);

}  // namespace kvserve::cli
