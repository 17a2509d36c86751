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
  int threads = 0;
  std::string output_path;
};

int RunMkmodel(const MkmodelOptions& o) {
  SyntheticModelOptions options;
  options.preset = o.preset;
  options.seed = o.seed;
  if (o.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  options.num_threads = o.threads;
  const StatusOr<QuantFileType> file_type = ParseQuantFileTypeFlag(o.dtype);
  if (!file_type.ok()) return ReportError(file_type.status());
  options.file_type = *file_type;
  if (!o.vocab_from.empty()) {
    auto vocab = LoadVocabFile(o.vocab_from, 0);
    if (!vocab.ok()) return ReportError(vocab.status());
    options.vocab = std::move(vocab).value();
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<LoadedModel> model = InternalError("not run");
  {
    ProgressLine progress("generating " + o.preset + " " +
                          QuantFileTypeName(*file_type));
    model = MakeSyntheticModel(options, progress.Callback());
  }
  if (!model.ok()) return ReportError(model.status());
  const double make_seconds = SecondsSince(start);
  const auto write_start = std::chrono::steady_clock::now();
  SaveGgufOptions save;
  save.file_type = *file_type;  // every tensor is made in its type: sets general.file_type
  save.num_threads = o.threads;
  if (Status s = SaveGgufModel(*model, o.output_path, save); !s.ok()) return ReportError(s);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(o.output_path, ec);
  std::fprintf(stderr,
               "wrote %s: %s %s, %s parameters, %s; weights %s (made in %.2f s, written in "
               "%.2f s)\n",
               o.output_path.c_str(), o.preset.c_str(), QuantFileTypeName(*file_type),
               HumanCount(model->config.NumParameters()).c_str(),
               HumanBytes(ec ? 0 : static_cast<int64_t>(bytes)).c_str(),
               TallyWeightBytes(model->tensors).ToString().c_str(), make_seconds,
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
  cmd->add_option("--dtype", opts->dtype, "Weight type: " + FileTypeHelp())
      ->capture_default_str();
  cmd->add_option("--vocab-from", opts->vocab_from,
                  "Use this vocabulary (e.g. ggml-vocab-*.gguf, tokenizer.json) instead of a "
                  "synthetic one");
  cmd->add_option("--seed", opts->seed, "Random seed of the weights")->capture_default_str();
  cmd->add_option("-t,--threads", opts->threads,
                  "Threads generating and quantising rows (default: all available, up to 16)");
  cmd->add_option("-o,--output", opts->output_path, "Output .gguf path")->required();
  cmd->callback([opts, exit_code]() { *exit_code = RunMkmodel(*opts); });
}

}  // namespace kvserve::cli
