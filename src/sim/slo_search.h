// SLO search (`kvserve plan --search`, Vidur-Search's job on our own scheduler and cache): the
// cheapest serving configuration that meets a TTFT p90 and a TPOT p99 target on a workload.
//
// A configuration is serve's flags that change time or memory: --kv-cache-dtype, --block-size,
// --max-num-seqs, --max-num-batched-tokens, chunked prefill on or off, and token eviction
// (SnapKV at a --kv-budget: the prompt compressed once, or none), on `replicas` copies of the engine (each
// --tensor-parallel devices) behind a round-robin router. Each candidate is replayed by
// SimulateServing (the real Scheduler and KvCacheManager, steps timed by the cost model): the
// workload's requests i = r (mod replicas) go to replica r, and the per-request results are
// pooled and summarised as bench serve would (loadgen::Summarize). A candidate meets the
// targets when every request succeeds and TTFT p90 and TPOT p99 are at most the targets. Its
// cost is the devices' price over the replay's duration per million output tokens.
//
// The search adds replicas one at a time: every configuration at 1 replica, then at 2, ...,
// and stops at the first count where some configuration meets the targets (more replicas
// only cost more). The chosen one is the cheapest that meets them (among those within 1% of
// the cheapest: no token eviction first, as it changes outputs, then the lower TTFT p90); the
// report also gives the runners-up and the cheapest candidate that misses (at one replica
// fewer, when there is one).
//
// Plain functions; candidates of one replica count are replayed on `threads` threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/engine_setup.h"
#include "sim/serving.h"

namespace kvserve::sim {

// The values each flag takes (the grid is their product).
struct SearchSpace {
  std::vector<std::string> kv_cache_dtypes = {"auto", "fp8"};
  std::vector<int64_t> block_sizes = {16, 32};
  std::vector<int64_t> max_num_seqs = {64, 256};
  std::vector<int64_t> max_num_batched_tokens = {2048, 8192};
  std::vector<bool> chunked_prefill = {true, false};
  std::vector<int64_t> kv_budgets = {0, 4096};  // SnapKV budget; 0: no eviction
  int64_t max_replicas = 8;
};

struct SearchOptions {
  EngineSetup engine;  // model, hardware, --tensor-parallel, memory, price (dtype/block: the grid's)
  double slo_ttft_p90_ms = 0.0;
  double slo_tpot_p99_ms = 0.0;
  SearchSpace space;
  int threads = 0;  // 0: one per core
  int64_t max_concurrency = 0;  // bench serve's --max-concurrency (0: unbounded)
  // (replicas, candidates done, candidates at this count).
  std::function<void(int64_t, int64_t, int64_t)> progress;
};

struct SearchCandidate {
  std::string kv_cache_dtype;  // as resolved ("bf16", "fp8_e4m3")
  int64_t block_size = 16;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  bool chunked_prefill = true;
  int64_t kv_budget_tokens = 0;
  int64_t replicas = 1;
  int tensor_parallel = 1;
  int64_t capacity_blocks = 0;  // per replica
  // The replay.
  bool meets = false;
  std::string verdict;  // "meets", "TTFT p90 2.4 s > 2 s", "12 requests rejected", ...
  int64_t num_failed = 0;
  int64_t num_preemptions = 0;
  double ttft_p90_ms = 0.0;
  double tpot_p99_ms = 0.0;
  double output_tokens_per_s = 0.0;
  double duration_s = 0.0;
  double cost_per_million_output_tokens = 0.0;
  std::string serve_command;  // `kvserve serve ...` with these flags (per replica)
};

struct SearchResult {
  std::vector<SearchCandidate> candidates;  // every one replayed, cheapest first
  int chosen = -1;                          // index of the cheapest that meets; -1: none
  int cheapest_miss = -1;                   // index of the cheapest that misses; -1: none
  std::string engine_description;           // the first configuration's Engine::Describe
};

// InvalidArgument for targets <= 0, an empty grid, or a configuration whose engine cannot be
// resolved (weights that do not fit, ...).
StatusOr<SearchResult> SearchConfigurations(const ServingWorkload& workload,
                                            const SearchOptions& options);

std::string FormatSearchText(const SearchResult& result, const SearchOptions& options);
std::string FormatSearchJson(const SearchResult& result, const SearchOptions& options);

}  // namespace kvserve::sim
