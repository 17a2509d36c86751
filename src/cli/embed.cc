// `kvserve embed`: embeddings of texts with a BERT-family encoder (model/bert.h). Thin: flags,
// input files and output formatting; runtime/embedder.h does the rest.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "runtime/embedder.h"

namespace kvserve::cli {
namespace {

struct EmbedOptions {
  std::string model_path;
  std::string tokenizer_path;
  std::vector<std::string> texts;
  std::string texts_file;  // one text per line
  std::string pooling;     // empty: the model's
  bool normalize = false;
  int threads = 0;
  std::string output_format = "text";
};

int RunEmbed(const EmbedOptions& o) {
  if (o.output_format != "text" && o.output_format != "json") {
    return ReportError(InvalidArgumentError("--output-format must be text or json"));
  }
  std::vector<std::string> texts = o.texts;
  if (!o.texts_file.empty()) {
    std::ifstream in(o.texts_file);
    if (!in) return ReportError(NotFoundError("cannot open --texts-file '" + o.texts_file + "'"));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) texts.push_back(line);
    }
  }
  if (texts.empty()) return ReportError(InvalidArgumentError("give --text or --texts-file"));
  if (o.model_path.empty()) return ReportError(InvalidArgumentError("--model is required"));
  Embedder::Options eo;
  eo.normalize = o.normalize;
  eo.threads = o.threads > 0 ? o.threads : ThreadPool::HardwareThreads();
  if (!o.pooling.empty()) {
    if (o.pooling == "mean") {
      eo.model.pooling = PoolingType::kMean;
    } else if (o.pooling == "cls") {
      eo.model.pooling = PoolingType::kCls;
    } else if (o.pooling == "last") {
      eo.model.pooling = PoolingType::kLast;
    } else {
      return ReportError(InvalidArgumentError("--pooling must be mean, cls or last"));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto loaded = LoadModelWithProgress(o.model_path, o.tokenizer_path);
  if (!loaded.ok()) return ReportError(loaded.status());
  PrintModelSummary(*loaded, SecondsSince(start));
  const std::string model_name = loaded->config.name;
  auto embedder = Embedder::Create(std::move(loaded).value(), eo);
  if (!embedder.ok()) return ReportError(embedder.status());

  std::vector<std::vector<TokenId>> ids;
  size_t num_tokens = 0;
  for (const std::string& t : texts) {
    auto tokens = (*embedder)->Tokenize(t, EmbedTruncation::kError);
    if (!tokens.ok()) {
      return ReportError(tokens.status().WithContext("text " + std::to_string(ids.size())));
    }
    num_tokens += tokens->size();
    ids.push_back(*std::move(tokens));
  }
  const int64_t dim = (*embedder)->dim();
  const auto t0 = std::chrono::steady_clock::now();
  auto embeddings = (*embedder)->Embed(ids);
  if (!embeddings.ok()) return ReportError(embeddings.status());
  const double seconds = SecondsSince(t0);
  std::fprintf(stderr, "embed: %zu texts, %zu tokens in %.3f s (%.0f tokens/s, %d threads); %s pooling%s, %lld dims\n",
               texts.size(), num_tokens, seconds, static_cast<double>(num_tokens) / std::max(seconds, 1e-9),
               (*embedder)->num_threads(), PoolingTypeName((*embedder)->pooling()),
               o.normalize ? ", L2-normalised" : "", static_cast<long long>(dim));
  if (o.output_format == "json") {
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      data.push_back({{"index", i},
                      {"text", texts[i]},
                      {"tokens", ids[i]},
                      {"embedding", (*embeddings)[i]}});
    }
    nlohmann::json j{{"model", model_name},
                     {"dim", dim},
                     {"pooling", PoolingTypeName((*embedder)->pooling())},
                     {"normalized", o.normalize},
                     {"data", data}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    std::printf("%zu\t%zu tokens\t[", i, ids[i].size());
    for (int64_t d = 0; d < dim; ++d) {
      std::printf("%s%.6g", d ? ", " : "", (*embeddings)[i][static_cast<size_t>(d)]);
    }
    std::printf("]\n");
  }
  return 0;
}

}  // namespace

void AddEmbedCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<EmbedOptions>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Embeddings of texts with a BERT-family model (GGUF architecture bert or a Hugging Face BertModel folder: "
               "all-MiniLM, bge, e5, gte), as llama.cpp computes them");
  cmd->add_option("-m,--model", o->model_path,
                  "A bert model: GGUF file or Hugging Face BertModel folder")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer_path, "Tokenizer file overriding the model's");
  cmd->add_option("--text", o->texts, "A text to embed (repeatable)");
  cmd->add_option("--texts-file", o->texts_file, "A file with one text per line");
  cmd->add_option("--pooling", o->pooling, "mean, cls or last (default: the model's)");
  cmd->add_flag("--normalize", o->normalize, "L2-normalise the embeddings");
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: all available)");
  cmd->add_option("--output-format", o->output_format,
                  "text: one line per text; json: an object with every embedding")
      ->capture_default_str();
  cmd->callback([o, exit_code]() { *exit_code = RunEmbed(*o); });
}

}  // namespace kvserve::cli
