// `kvserve convert`: any loadable model (llama2.c checkpoint, Hugging Face folder, GGUF) to GGUF.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace kvserve::cli {
namespace {

struct ConvertOptions {
  std::string model_path;
  std::string output_path;
  std::string tokenizer_path;
  std::string dtype;  // empty: tensors as they are
  int threads = 0;
};

int RunConvert(const ConvertOptions& o) {
  SaveGgufOptions save;
  if (!o.dtype.empty()) {
    const StatusOr<QuantFileType> file_type = ParseQuantFileTypeFlag(o.dtype);
    if (!file_type.ok()) return ReportError(file_type.status());
    save.file_type = *file_type;
  }
  if (o.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  save.num_threads = o.threads;
  const auto start = std::chrono::steady_clock::now();
  auto model = LoadModelWithProgress(o.model_path, o.tokenizer_path);
  if (!model.ok()) return ReportError(model.status());
  PrintModelSummary(*model, SecondsSince(start));
  if (!model->vocab.has_value()) {
    std::fprintf(stderr, "warning: the model carries no tokenizer; the GGUF will have none "
                         "(pass --tokenizer PATH to embed one)\n");
  }
  const auto write_start = std::chrono::steady_clock::now();
  {
    ProgressLine progress("quantising to " + o.dtype);
    if (save.file_type) save.progress = progress.Callback();
    if (Status s = SaveGgufModel(*model, o.output_path, save); !s.ok()) return ReportError(s);
  }
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(o.output_path, ec);
  // What was written, by type: read back from the file's tensor infos.
  std::string weights = model->WeightTypeSummary() + " weights";
  if (StatusOr<std::unique_ptr<GgufFile>> written = GgufFile::Open(o.output_path);
      written.ok()) {
    weights = "weights " + TallyWeightBytes((*written)->tensors()).ToString();
  }
  if (save.file_type) weights = QuantFileTypeName(*save.file_type) + (", " + weights);
  std::fprintf(stderr, "wrote %s: %s parameters, %s, %s in %.2f s\n", o.output_path.c_str(),
               HumanCount(model->config.NumParameters()).c_str(), weights.c_str(),
               HumanBytes(ec ? 0 : static_cast<int64_t>(bytes)).c_str(),
               SecondsSince(write_start));
  return 0;
}

}  // namespace

void AddConvertCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a model (llama2.c checkpoint, Hugging Face folder, GGUF) to GGUF.");
  cmd->add_option("-m,--model", opts->model_path, "Input model")->required();
  cmd->add_option("-o,--output", opts->output_path, "Output .gguf path")->required();
  cmd->add_option("--tokenizer", opts->tokenizer_path,
                  "Tokenizer file to embed (tokenizer.json, llama2.c .bin, GGUF)");
  cmd->add_option("--dtype", opts->dtype,
                  "Requantise the weights (default: keep their types): " + FileTypeHelp());
  cmd->add_option("-t,--threads", opts->threads,
                  "Threads quantising rows (default: all available)");
  cmd->callback([opts, exit_code]() { *exit_code = RunConvert(*opts); });
}

}  // namespace kvserve::cli
