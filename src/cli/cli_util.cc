#include "cli/cli_util.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <ctime>
#include <filesystem>

#include "kernels/kernels.h"

namespace kvserve::cli {

std::string NowIso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status WriteOutputFile(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return DataLossError("cannot write " + flag + " " + path);
  return OkStatus();
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

ProgressLine::ProgressLine(std::string label, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), tty_(::isatty(STDERR_FILENO) == 1) {}

std::string ProgressLine::Amounts(int64_t done, int64_t total) const {
  if (unit_.empty()) return HumanBytes(done) + " / " + HumanBytes(total);
  return std::to_string(done) + " / " + std::to_string(total) + " " + unit_;
}

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
    std::fprintf(stderr, "\r\033[K%s: %3d%% (%s)", label_.c_str(), percent,
                 Amounts(done, total).c_str());
    std::fflush(stderr);
    active_ = true;
  } else {
    const int quarter = percent / 25;
    if (quarter == last_quarter_) return;
    last_quarter_ = quarter;
    std::fprintf(stderr, "%s: %d%% (%s)\n", label_.c_str(), quarter * 25,
                 Amounts(done, total).c_str());
  }
}

std::function<void(int64_t, int64_t)> ProgressLine::Callback() {
  return [this](int64_t done, int64_t total) { Update(done, total); };
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

StatusOr<LoadedModel> LoadModelWithProgress(const std::string& path,
                                            const std::string& tokenizer_path) {
  ProgressLine progress("loading " + std::filesystem::path(path).filename().string());
  LoadOptions options;
  options.tokenizer_path = tokenizer_path;
  options.progress = progress.Callback();
  auto loaded = LoadModel(path, options);
  progress.Finish();
  if (!loaded.ok()) return loaded.status();
  return std::move(loaded).value();
}

void PrintModelSummary(const LoadedModel& model, double load_seconds) {
  // "weights 101.6 MiB (q4_k 62.0 MiB, q6_k 25.3 MiB, ..., f32 0.2 MiB)": the real bytes of a
  // mixed-type file, by type.
  std::fprintf(stderr, "model: %s (%s, %s), %s parameters, weights %s, loaded in %.2f s\n",
               model.config.name.empty() ? model.path.c_str() : model.config.name.c_str(),
               model.config.architecture.c_str(), model.format.c_str(),
               HumanCount(model.config.NumParameters()).c_str(),
               TallyWeightBytes(model.tensors).ToString().c_str(), load_seconds);
  // The kernels' instruction-set level (KVSERVE_SIMD=scalar|avx2|avx512 picks a lower one).
  std::fprintf(stderr, "kernels: %s (this CPU: %s)%s%s%s\n", kernels::SimdLevelName(),
               kernels::CpuSimdLevelName(), kernels::SimdLevelNote().empty() ? "" : "; ",
               kernels::SimdLevelNote().c_str(),
               kernels::F16WeightsAsBf16()
                   ? "; f16 weights run as bf16 (KVSERVE_F16_AS_BF16=1: 8-bit mantissas)"
                   : "");
}

std::string FileTypeHelp() {
  std::string names;
  for (const std::string& n : QuantFileTypeNames()) names += (names.empty() ? "" : ", ") + n;
  return names + ". Quantised types choose each tensor's type as llama.cpp's quantiser "
                 "does: the output (or tied embedding) in q6_k, some attn_v / ffn_down / "
                 "attn_output with more bits in the _s/_m/_l mixes and q2_k (q4_k_m: mostly "
                 "q4_k, q6_k in some layers), rows that are not whole 256-value blocks in q5_0, "
                 "q5_1, q8_0 or q4_0 instead; norms stay f32 (q3_k, q4_k, q5_k mean the _m "
                 "mixes)";
}

void PrintPackedWeights(int64_t packed_bytes, int64_t replaced_bytes) {
  if (packed_bytes <= 0) return;
  std::fprintf(stderr, "weights: matrices repacked into %s panels at load, +%s",
               kernels::SimdLevelName(), HumanBytes(packed_bytes).c_str());
  if (replaced_bytes > 0) {
    std::fprintf(stderr, " (%s of the file's weights no longer read)",
                 HumanBytes(replaced_bytes).c_str());
  }
  std::fprintf(stderr, "\n");
}

}  // namespace kvserve::cli
