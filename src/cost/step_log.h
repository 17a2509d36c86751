// The step log: the engine's real steps with their measured seconds, one JSON object per line
// (`kvserve serve --step-log FILE.jsonl` writes it; `kvserve profile --refit` fits the cost
// model's engine terms to it, so that a profile describes the engine as it serves, HTTP
// threads and clients sharing the machine included).
//
//   {"kvserve_step_log": 1, "model": "...", "kv_cache_dtype": "f32", "block_size": 16,
//    "threads": 2, "simd_level": "avx512"}                                  (first line)
//   {"seconds": 0.0123, "seqs": [[held, new, samples], ...]}                (one per step)
//
// held: the KV slots the request held when the step was scheduled (what attention reads),
// new: tokens computed in the step, samples: 1 when it sampled a token (cost::StepSeq).
//
// Value types and functions, and StepLogWriter (one file, one writing thread).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cost/step_time.h"

namespace kvserve::cost {

struct StepLogHeader {
  std::string model;           // the served model's name or file
  std::string kv_cache_dtype;  // DTypeName of the KV cache
  int64_t block_size = 0;      // KV block size in tokens
  int threads = 0;             // compute threads
  std::string simd_level;      // kernels::SimdLevelName
};

struct LoggedStep {
  double seconds = 0.0;
  std::vector<StepSeq> seqs;
};

struct StepLog {
  StepLogHeader header;
  std::vector<LoggedStep> steps;
};

// One line each (no trailing newline).
std::string StepLogHeaderLine(const StepLogHeader& header);
std::string StepLogLine(const LoggedStep& step);

// Appends steps to a new step log, each line flushed as it is written (a server stopped by a
// signal loses at most the line being written). Not thread-safe: one writer thread (the
// engine's).
class StepLogWriter {
 public:
  // Creates (truncates) `path` and writes the header; InvalidArgument when it cannot.
  static StatusOr<std::unique_ptr<StepLogWriter>> Open(const std::string& path,
                                                       const StepLogHeader& header);
  void Write(const LoggedStep& step);
  int64_t num_steps() const { return num_steps_; }

 private:
  explicit StepLogWriter(std::ofstream out) : out_(std::move(out)) {}
  std::ofstream out_;
  int64_t num_steps_ = 0;
};

// Reads a step log; InvalidArgument naming the line for a file that is not one (no header, a
// line that is not a step, negative or non-finite seconds, a step with no sequences). A last
// line cut short (a server killed mid-write) is ignored.
StatusOr<StepLog> ReadStepLog(const std::string& path);

}  // namespace kvserve::cost
