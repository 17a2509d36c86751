// `kvserve mkmodel`: writes a synthetic (random-weight) model of a real model's shape as GGUF.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "model/synthetic.h"

namespace kvserve::cli {
namespace {

struct MkmodelOptions {
  std::string preset;
  std::string dtype = "f32";
  std::string vocab_from;
  uint64_t seed = 0;
  std::string output_path;
};

int RunMkmodel(const MkmodelOptions& o) {
  SyntheticModelOptions options;
  options.preset = o.preset;
  options.seed = o.seed;
  const StatusOr<DType> dtype = ParseSyntheticWeightDType(o.dtype);
  if (!dtype.ok()) return ReportError(dtype.status());
  options.dtype = *dtype;
  if (!o.vocab_from.empty()) {
    auto vocab = LoadVocabFile(o.vocab_from, 0);
    if (!vocab.ok()) return ReportError(vocab.status());
    options.vocab = std::move(vocab).value();
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<LoadedModel> model = InternalError("not run");
  {
    ProgressLine progress("generating " + o.preset + " " + o.dtype);
    model = MakeSyntheticModel(options, progress.Callback());
  }
  if (!model.ok()) return ReportError(model.status());
  const double make_seconds = SecondsSince(start);
  const auto write_start = std::chrono::steady_clock::now();
  if (Status s = SaveGgufModel(*model, o.output_path); !s.ok()) return ReportError(s);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(o.output_path, ec);
  std::fprintf(stderr, "wrote %s: %s %s, %s parameters, %s (made in %.2f s, written in %.2f s)\n",
               o.output_path.c_str(), o.preset.c_str(), o.dtype.c_str(),
               HumanCount(model->config.NumParameters()).c_str(),
               HumanBytes(ec ? 0 : static_cast<int64_t>(bytes)).c_str(), make_seconds,
               SecondsSince(write_start));
  return 0;
}

}  // namespace

void AddMkmodelCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<MkmodelOptions>();
  std::string presets;
  for (const std::string& name : SyntheticPresetNames()) {
    presets += (presets.empty() ? "" : ", ") + name;
  }
  CLI::App* cmd = app.add_subcommand(
      "mkmodel",
      "Write a model with RANDOM weights in the exact shape of a real one (GGUF), for "
      "benchmarks and tests without downloads.");
  cmd->add_option("--preset", opts->preset, "Model shape: " + presets)->required();
  cmd->add_option("--dtype", opts->dtype, "Weight type: f32, f16, bf16 or q8_0")
      ->capture_default_str();
  cmd->add_option("--vocab-from", opts->vocab_from,
                  "Use this vocabulary (e.g. ggml-vocab-*.gguf, tokenizer.json) instead of a "
                  "synthetic one");
  cmd->add_option("--seed", opts->seed, "Random seed of the weights")->capture_default_str();
  cmd->add_option("-o,--output", opts->output_path, "Output .gguf path")->required();
  cmd->callback([opts, exit_code]() { *exit_code = RunMkmodel(*opts); });
}

}  // namespace kvserve::cli
