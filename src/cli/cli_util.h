// Helpers shared by the `kvserve` subcommands: error printing, progress lines, human-readable
// sizes, model + tokenizer loading with progress. Single-threaded use (the CLI's main thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/str_format.h"
#include "model/gguf.h"
#include "model/model_loader.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

// Prints "error: <message>" on stderr and returns the process exit status to use (1).
int ReportError(const Status& status);

// "1.2 KB", "34.5 MB", "1.23 GB" (powers of 1024).
std::string HumanBytes(int64_t bytes);
// HumanCount ("260K", "135M", "1.24B"): base/str_format.h.

// Reports (done, total) progress on stderr: one line rewritten in place when stderr is a
// terminal, else a line at 0, 25, 50, 75 and 100 %. Finish() ends the line (idempotent).
class ProgressLine {
 public:
  explicit ProgressLine(std::string label);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void Update(int64_t done, int64_t total);
  void Finish();

 private:
  std::string label_;
  bool tty_;
  bool active_ = false;
  int last_quarter_ = -1;
  int last_percent_ = -1;
  std::chrono::steady_clock::time_point last_draw_;
};

// Seconds since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// Loads a model (any format LoadModel accepts) with a progress line on stderr.
StatusOr<LoadedModel> LoadModelWithProgress(const std::string& path,
                                            const std::string& tokenizer_path);

// One summary line on stderr: architecture, parameters, weight type, bytes, load time.
void PrintModelSummary(const LoadedModel& model, double load_seconds);
// One line on the weights LlamaModel repacked for this CPU's batched matmul, if any.
void PrintPackedWeights(int64_t packed_bytes);

// Loads only a vocabulary: from a GGUF file (vocab-only files included, tensors not needed),
// a Hugging Face tokenizer.json, or a llama2.c tokenizer file (needs `vocab_size` > 0).
StatusOr<VocabSpec> LoadVocabFile(const std::string& path, int64_t vocab_size);

// IsGgufFile (the GGUF magic): model/gguf.h.

// Weight bytes and parameters a single token's forward pass touches: all weights but the
// embedding table (one row is read), which counts again when it doubles as the output matrix.
int64_t WeightBytesPerToken(const LoadedModel& model);
int64_t ParametersPerToken(const LoadedModel& model);
// Parameters of the output projection (vocab x hidden), part of ParametersPerToken. A prefill
// applies it to the last prompt token only.
int64_t OutputParameters(const LoadedModel& model);

}  // namespace kvserve::cli
