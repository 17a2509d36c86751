// The settings of `kvserve bench serve` as the command line gives them (one field per flag,
// unvalidated), what they resolve to (BenchmarkOptions and the final DatasetOptions), and the
// settings part of the --result-file document. Plain functions and data; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "loadgen/bench.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"

namespace kvserve::loadgen {

// The flags of `bench serve` (the names in the comments), with their defaults.
struct BenchSettings {
  std::string base_url;                       // --base-url; empty: http://HOST:PORT
  std::string host = "127.0.0.1";             // --host
  int port = 8000;                            // --port
  std::string endpoint = "/v1/completions";   // --endpoint ("/" prepended when missing)
  std::string model;                          // --model
  std::string api_key;                        // --api-key (the caller falls back to the env)
  std::string request_rate = "inf";           // --request-rate
  bool request_rate_given = false;            // unset: trace timestamps, else inf
  int64_t max_concurrency = 0;                // --max-concurrency; 0: unbounded
  double trace_time_scale = 1.0;              // --trace-time-scale
  double temperature = 0.0;                   // --temperature
  bool ignore_eos = true;                     // --[no-]ignore-eos
  std::string extra_body;                     // --extra-body (a JSON object)
  bool scrape_metrics = true;                 // --[no-]metrics
  double request_timeout_s = 600.0;           // --request-timeout
  std::string prompt_format = "auto";         // --prompt-format: auto | token-ids | text
  std::vector<int64_t> vocab_range;           // --vocab-range BEGIN END (empty: the default)
  int64_t seed = 0;                           // --seed (prompts and arrivals)
  DatasetOptions dataset;                     // the dataset flags
};

// What a run uses: the benchmark's options and the dataset's, with seed, prompt format and
// vocabulary range filled in from the settings.
struct ResolvedBench {
  BenchmarkOptions options;
  DatasetOptions dataset;
};

// "inf" (also "Inf", "infinity"), or a number > 0; else InvalidArgument naming --request-rate.
StatusOr<double> ParseRequestRate(const std::string& text);

// Checks the settings (InvalidArgument naming the flag: --prompt-format token-ids with a chat
// endpoint, --vocab-range, --request-timeout, --request-rate) and resolves them. The text
// prompt format is the default on chat endpoints (their messages are text).
StatusOr<ResolvedBench> ResolveBenchSettings(const BenchSettings& settings);

// The dataset's description in the result file: name, path, count, seed, prompt format,
// vocabulary range and the options of that dataset only.
nlohmann::json DatasetToJson(const DatasetOptions& dataset);

// The --result-file document: ResultToJson, then "date" (`date_iso8601`), "dataset",
// "temperature", "ignore_eos_allowed" and, when given, "extra_body".
nlohmann::json BenchResultFileJson(const BenchmarkResult& result, const BenchmarkSummary& summary,
                                   const BenchSettings& settings, const ResolvedBench& resolved,
                                   const std::string& date_iso8601);

}  // namespace kvserve::loadgen
