#include "cli/cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/vocab_source.h"

namespace kvserve::cli {

int ReportError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.*f %s", v < 10 ? 2 : 1, v, units[u]);
  }
  return buf;
}

ProgressLine::ProgressLine(std::string label)
    : label_(std::move(label)), tty_(::isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { Finish(); }

void ProgressLine::Update(int64_t done, int64_t total) {
  if (total <= 0) return;
  if (done > total) done = total;
  if (done < 0) done = 0;
  const int percent = static_cast<int>(100 * done / total);
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (percent == last_percent_) return;
    if (active_ && percent != 100 && now - last_draw_ < std::chrono::milliseconds(50)) return;
    last_percent_ = percent;
    last_draw_ = now;
    std::fprintf(stderr, "\r\033[K%s: %3d%% (%s / %s)", label_.c_str(), percent,
                 HumanBytes(done).c_str(), HumanBytes(total).c_str());
    std::fflush(stderr);
    active_ = true;
  } else {
    const int quarter = percent / 25;
    if (quarter == last_quarter_) return;
    last_quarter_ = quarter;
    std::fprintf(stderr, "%s: %d%% (%s / %s)\n", label_.c_str(), quarter * 25,
                 HumanBytes(done).c_str(), HumanBytes(total).c_str());
  }
}

void ProgressLine::Finish() {
  if (tty_ && active_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  active_ = false;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

StatusOr<VocabSpec> LoadVocabFile(const std::string& path, int64_t vocab_size) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("tokenizer file '" + path + "' does not exist");
  }
  const std::string ext = std::filesystem::path(path).extension().string();
  if (!IsGgufFile(path) && ext != ".json" && vocab_size <= 0) {
    return InvalidArgumentError("'" + path +
                                "' looks like a llama2.c tokenizer file, which does not record "
                                "its vocabulary size; pass the model too (--model)");
  }
  return LoadVocabFromPath(path, vocab_size);
}

StatusOr<LoadedModel> LoadModelWithProgress(const std::string& path,
                                            const std::string& tokenizer_path) {
  ProgressLine progress("loading " + std::filesystem::path(path).filename().string());
  LoadOptions options;
  options.tokenizer_path = tokenizer_path;
  options.progress = [&progress](int64_t done, int64_t total) { progress.Update(done, total); };
  auto loaded = LoadModel(path, options);
  progress.Finish();
  if (!loaded.ok()) return loaded.status();
  return std::move(loaded).value();
}

void PrintModelSummary(const LoadedModel& model, double load_seconds) {
  std::fprintf(stderr, "model: %s (%s, %s), %s parameters, %s weights, %s, loaded in %.2f s\n",
               model.config.name.empty() ? model.path.c_str() : model.config.name.c_str(),
               model.config.architecture.c_str(), model.format.c_str(),
               HumanCount(model.config.NumParameters()).c_str(),
               model.WeightTypeSummary().c_str(), HumanBytes(model.WeightBytes()).c_str(),
               load_seconds);
}

void PrintPackedWeights(int64_t packed_bytes) {
  if (packed_bytes <= 0) return;
  std::fprintf(stderr,
               "weights: q8_0 matrices repacked into AVX-512 VNNI panels for batched matmul, "
               "+%s\n",
               HumanBytes(packed_bytes).c_str());
}

namespace {
int64_t EmbeddingBytes(const LoadedModel& model) {
  auto it = model.tensors.find("token_embd.weight");
  return it == model.tensors.end() ? 0 : it->second.num_bytes();
}
}  // namespace

int64_t WeightBytesPerToken(const LoadedModel& model) {
  const int64_t total = model.WeightBytes();
  if (model.config.tied_embeddings) return total;
  return total - EmbeddingBytes(model);
}

int64_t ParametersPerToken(const LoadedModel& model) {
  const int64_t total = model.config.NumParameters();
  if (model.config.tied_embeddings) return total;
  return total - model.config.vocab_size * model.config.hidden_dim;
}

int64_t OutputParameters(const LoadedModel& model) {
  return model.config.vocab_size * model.config.hidden_dim;
}

}  // namespace kvserve::cli
