// `kvserve sim` as a prediction of `kvserve bench serve`: the workload bench serve would send
// (its datasets and arrivals, or a trace file, or a bench serve result file's own lengths and
// send times), replayed through the real Scheduler and KvCacheManager on one replica whose
// steps are timed by the cost model, and reported as bench serve reports a measurement: a
// loadgen::BenchmarkResult (per-request scheduled and send times, TTFT, inter-token gaps,
// end-to-end latency, cached tokens), so loadgen's Summarize and ResultToJson write the same
// fields with the same definitions (no second writer).
//
// The client side is bench serve's: request i is scheduled at arrival_s[i] and sent in dataset
// order when fewer than max_concurrency requests are in flight (unbounded: 1024, bench serve's
// thread bound), else when a request finishes. The server sees a request at the first step
// that starts after it was sent; its tokens arrive at the end of the steps that sample them.
//
// Plain functions; no state beyond a call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "loadgen/bench_settings.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "sim/sim.h"

namespace kvserve::sim {

// The requests to replay: prompts as token ids, output lengths, scheduled send times.
struct ServingWorkload {
  std::string dataset_name;  // random, shared-prefix, mooncake, azure, result-file
  std::vector<std::vector<TokenId>> prompts;
  std::vector<int64_t> output_tokens;
  std::vector<double> arrival_s;  // non-decreasing, from the start of the run
};

// bench serve's workload: BuildDataset's requests (token-id prompts) at ComputeArrivalTimes'
// times. InvalidArgument for text prompts (sharegpt: their token count depends on a
// tokenizer) or an empty dataset.
StatusOr<ServingWorkload> WorkloadFromBenchRequests(
    const std::string& dataset_name, const std::vector<loadgen::BenchRequest>& requests,
    const loadgen::ArrivalOptions& arrivals);

// A bench serve result file (its "input_lens", "output_lens" and "send_ms" arrays, successful
// requests only): random prompt tokens of those lengths (no sharing: the file does not say
// what the prompts were), sent at the recorded send times (times `time_scale`). Errors name
// the field.
StatusOr<ServingWorkload> WorkloadFromBenchResult(const nlohmann::json& result, uint64_t seed,
                                                  double time_scale, const std::string& origin);

// What a trace file holds, from its first bytes: "result-file" (a JSON object), "mooncake"
// (JSON lines), "azure" (a CSV header). InvalidArgument when it is none of these.
StatusOr<std::string> DetectTraceFormat(const std::string& path);

// The workload of a prediction as bench serve would send it under `settings`: its dataset
// `dataset_name` ("" : the format of `trace_path` (DetectTraceFormat), else random), or the
// trace or result file at `trace_path`. `resolved`: the settings as bench serve resolves them.
StatusOr<ServingWorkload> BuildServingWorkload(loadgen::BenchSettings settings,
                                               std::string dataset_name,
                                               const std::string& trace_path,
                                               loadgen::ResolvedBench* resolved);

// bench serve's 8 simultaneous sends reach `kvserve serve`'s engine over about 3 ms on 2 Zen 4
// cores (docs/cost.md, "Validation").
inline constexpr double kDefaultRequestIntakeS = 0.0004;

struct ServingOptions {
  int64_t capacity_blocks = 0;  // the KV cache's blocks
  int64_t max_concurrency = 0;  // 0: bench serve's bound (1024)
  // Requests the client sends at one instant reach the engine one after another, this far
  // apart (`--request-intake-ms`): the client's sends and the HTTP layer's parsing and
  // tokenizing are serial per request. It decides what the engine sees first: an idle engine
  // starts a step on the first request to arrive, and those arriving during that step wait
  // for the next, as `kvserve serve` does. 0: simultaneous sends arrive together.
  double request_intake_s = kDefaultRequestIntakeS;
  // Most (time, blocks in use) points kept in ServingResult::blocks_in_use (the largest value
  // of each span is kept).
  int64_t max_timeline_points = 512;
};

// The replay.
struct ServingResult {
  loadgen::BenchmarkResult bench;  // as bench serve records a run
  SimRow row;                      // the scheduler's and cache's counters, cost totals
  std::vector<std::pair<double, int64_t>> blocks_in_use;  // (seconds, blocks)
  int64_t capacity_blocks = 0;
};

// Replays `workload` (options as for SimulateCapacity; options.max_model_len 0: the
// workload's longest request, capped to the capacity). InvalidArgument for options that
// cannot work.
StatusOr<ServingResult> SimulateServing(const ServingWorkload& workload, const SimOptions& options,
                                        const ServingOptions& serving);

// The sim's additions to bench serve's result document: "kv_blocks_in_use" [[s, blocks], ...],
// "num_preemptions", "capacity_blocks", "step_time_breakdown_s" (with a deployment),
// "cost_per_million_input_tokens" / "..._output_tokens" (with a price: device-hours of the
// run's duration over the tokens), "hardware".
nlohmann::json ServingExtrasJson(const ServingResult& result, const SimOptions& options);

// `sim --plot` of a prediction: the TTFT and TPOT distributions over requests (CDFs) and the
// KV blocks in use over time; an SVG document.
std::string ServingPlotSvg(const ServingResult& result, const SimOptions& options);

// bench serve's table (loadgen::FormatSummaryTable of the prediction), then the sim's lines:
// steps, preemptions, blocks in use, where the step time went, the cost.
std::string FormatServingText(const ServingResult& result, const SimOptions& options);

}  // namespace kvserve::sim
