// What `kvserve bench serve` reports: latency percentiles, throughputs, the prefix-cache hit
// rate from the server's Prometheus counters, and the text table / JSON forms of it all.
//
// Plain functions and data; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/client.h"

namespace kvserve::loadgen {

// Summary of one latency metric, in ms. All zero when count == 0. Percentiles as
// base/percentile.h defines them (linear interpolation, NumPy's default).
struct LatencyStats {
  int64_t count = 0;
  double mean_ms = 0.0;
  double std_ms = 0.0;
  double median_ms = 0.0;
  double p90_ms = 0.0;
  double p99_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
};
LatencyStats ComputeLatencyStats(const std::vector<double>& values_ms);

// Prometheus text exposition: metric name -> sum of the values of all its series (label sets).
// Comments, blank lines and malformed lines are skipped.
std::map<std::string, double> SumPrometheusSeries(std::string_view text);

// Cumulative prefix-cache counters (tokens) read from one scrape.
struct PrefixCacheCounters {
  std::string metric_prefix;  // "kvserve:" or "vllm:"
  double queries_tokens = 0.0;
  double hits_tokens = 0.0;
};
// kvserve:prefix_cache_{queries,hits}_total, vllm:prefix_cache_{queries,hits}[_total],
// vllm:gpu_prefix_cache_{queries,hits}[_total]; nullopt when none is exposed (llama.cpp).
std::optional<PrefixCacheCounters> ExtractPrefixCacheCounters(std::string_view metrics_text);

// The prefix-cache part of a report.
struct PrefixCacheReport {
  // From the server's /metrics, scraped before and after the run.
  bool server_available = false;
  std::string server_unavailable_reason;  // when !server_available
  std::string server_metric_prefix;
  double delta_queries_tokens = 0.0;
  double delta_hits_tokens = 0.0;
  // From usage.prompt_tokens_details.cached_tokens of successful requests.
  int64_t num_requests_with_cached_tokens = 0;
  int64_t usage_cached_tokens = 0;
  int64_t usage_prompt_tokens = 0;  // of those requests

  // delta hits / delta queries; nullopt when unavailable or no queries.
  std::optional<double> server_hit_rate() const;
  // cached / prompt tokens over the requests that reported cached_tokens; nullopt when none.
  std::optional<double> usage_cached_fraction() const;
};

// A finished benchmark: what was asked, what happened to each request.
struct BenchmarkResult {
  std::string base_url;
  std::string endpoint;
  std::string model;
  std::string dataset_name;
  std::optional<double> request_rate_per_s;  // unset: trace timestamps or all at once
  bool trace_timestamps = false;             // arrivals replayed a trace
  int64_t max_concurrency = 0;               // 0: unbounded
  double duration_s = 0.0;                   // start to the last request's end
  int64_t peak_concurrent_requests = 0;      // observed in flight at once
  std::vector<RequestResult> requests;       // in dataset order
  PrefixCacheReport prefix_cache;
};

// Aggregates (vLLM's definitions): over successful requests only; TPOT per request with more
// than one output token: (e2e - ttft) / (output tokens - 1); ITL: every gap of every request.
struct BenchmarkSummary {
  int64_t num_requests = 0;
  int64_t num_successful = 0;
  int64_t num_failed = 0;
  double duration_s = 0.0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput_per_s = 0.0;
  double output_throughput_tokens_per_s = 0.0;
  double total_throughput_tokens_per_s = 0.0;
  LatencyStats ttft;
  LatencyStats tpot;
  LatencyStats itl;
  LatencyStats e2e;
  // Distinct error messages and how often each occurred, most frequent first.
  std::vector<std::pair<std::string, int64_t>> errors;
  // kvserve's response cache (the x-kvserve-cache header), per tier ("miss", "exact",
  // "semantic"): successful requests and their TTFT. Empty when no response had the header.
  std::map<std::string, int64_t> cache_tier_requests;
  std::map<std::string, LatencyStats> cache_tier_ttft;
};
BenchmarkSummary Summarize(const BenchmarkResult& result);
// One request's TPOT as Summarize counts it: (e2e - ttft) / (output tokens - 1); nullopt for a
// failed request or one with at most one output token.
std::optional<double> RequestTpotMs(const RequestResult& r);

// The human-readable table (vllm bench serve's layout).
std::string FormatSummaryTable(const BenchmarkResult& result, const BenchmarkSummary& summary);

// Everything as JSON: run settings, summary fields, prefix cache, per-request arrays.
nlohmann::json ResultToJson(const BenchmarkResult& result, const BenchmarkSummary& summary);

}  // namespace kvserve::loadgen
