// Runs a serving benchmark: sends a workload to an OpenAI-compatible server at its arrival
// times, at most --max-concurrency requests in flight, and collects a BenchmarkResult.
//
// Threads: RunBenchmark() starts worker threads (one HTTP client each; as many as the
// concurrency bound, or the number of requests, at most kMaxClientThreads) and returns when
// all have finished. Request i is taken by the next free worker, which waits for its arrival
// time and sends it, so requests go out in dataset order and a request that finds every
// worker busy waits for one (vLLM's semaphore semantics: latencies start at the send).
// The progress callback runs on the calling thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"

namespace kvserve::loadgen {

// Most requests in flight when no --max-concurrency is given (one thread each).
inline constexpr int64_t kMaxClientThreads = 1024;

struct BenchmarkOptions {
  ClientOptions client;
  RequestBodyOptions body;  // body.model empty: the first model of GET /v1/models
  std::string dataset_name;  // for the report
  ArrivalOptions arrivals;
  int64_t max_concurrency = 0;  // 0: unbounded (kMaxClientThreads)
  bool scrape_metrics = true;   // GET /metrics before and after for the prefix-cache hit rate
};

// (requests done, total, seconds since the start); called a few times a second and once at
// the end.
using ProgressCallback = std::function<void(int64_t done, int64_t total, double elapsed_s)>;

// Validates options, resolves the model, scrapes /metrics, runs, scrapes again. Errors: bad
// options (InvalidArgument), no model id obtainable (Unavailable). Failed requests are not
// errors; they are counted in the result.
StatusOr<BenchmarkResult> RunBenchmark(const BenchmarkOptions& options,
                                       const std::vector<BenchRequest>& requests,
                                       const ProgressCallback& progress);

// A progress bar on a stream (stderr): redrawn in place at most every 100 ms on a terminal,
// else one line per 10 % of the requests. Not thread-safe (one caller).
class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out);
  ProgressBar(std::FILE* out, bool is_tty);
  void Update(int64_t done, int64_t total, double elapsed_s);
  void Finish();  // ends the line (idempotent)

 private:
  std::FILE* out_;
  bool tty_;
  bool active_ = false;
  int last_decile_ = -1;
  double last_draw_s_ = -1.0;
};

}  // namespace kvserve::loadgen
