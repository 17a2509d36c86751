// Helpers shared by the `kvserve` subcommands: error printing, progress lines, model loading
// with progress and its summary line. Single-threaded use (the CLI's main thread).
// Also reachable from here (declared in their libraries): HumanBytes, HumanCount
// (base/str_format.h); LoadVocabFile (model/vocab_source.h); IsGgufFile (model/gguf.h);
// EmbeddingBytes, WeightBytesPerToken, ParametersPerToken, OutputParameters
// (model/model_stats.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/str_format.h"
#include "model/gguf.h"
#include "model/model_loader.h"
#include "model/model_stats.h"
#include "model/quant_mix.h"
#include "model/weight_bytes.h"
#include "model/vocab_source.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

// Prints "error: <message>" on stderr and returns the process exit status to use (1).
int ReportError(const Status& status);

// Writes `text` to the file at `path` for the flag `flag` ("--plot", "--result-file"):
// DataLoss "cannot write FLAG PATH" when it cannot be written.
Status WriteOutputFile(const std::string& flag, const std::string& path, const std::string& text);

// The current UTC time as "2026-12-03T21:40:00Z" (result files' "date").
std::string NowIso8601();

// Helpers that moved to their libraries, under their old cli:: names too.
using ::kvserve::HumanBytes;
using ::kvserve::HumanCount;
using ::kvserve::LoadVocabFile;
using ::kvserve::OutputParameters;
using ::kvserve::ParametersPerToken;
using ::kvserve::WeightBytesPerToken;

// Reports (done, total) progress on stderr: one line rewritten in place when stderr is a
// terminal, else a line at 0, 25, 50, 75 and 100 %. Finish() ends the line (idempotent).
class ProgressLine {
 public:
  // `unit`: "" shows done / total as bytes (HumanBytes); otherwise as counts of that unit
  // ("3 / 10 matmul sizes").
  explicit ProgressLine(std::string label, std::string unit = "");
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void Update(int64_t done, int64_t total);
  void Finish();
  // A callback that calls Update (for LoadOptions::progress and the like); valid while this
  // ProgressLine lives.
  std::function<void(int64_t, int64_t)> Callback();

 private:
  std::string Amounts(int64_t done, int64_t total) const;

  std::string label_;
  std::string unit_;
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

// One summary line on stderr: architecture, parameters, weight bytes by type, load time.
void PrintModelSummary(const LoadedModel& model, double load_seconds);

// The --dtype names of mkmodel and convert, for their help: "f32, f16, ..., q6_k (...)".
std::string FileTypeHelp();
// One line on the weights LlamaModel repacked for this CPU's batched matmul, if any.
void PrintPackedWeights(int64_t packed_bytes, int64_t replaced_bytes);

}  // namespace kvserve::cli
