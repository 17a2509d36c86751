// `kvserve tokenize`: prints the token ids of a text on one line.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace kvserve::cli {
namespace {

struct TokenizeOptions {
  std::string model_path;
  std::string tokenizer_path;
  std::string text;
  std::string text_file;
  bool no_bos = false;
  bool parse_special = false;
};

// The vocabulary (model/vocab_source.h), with a progress line when the model is loaded.
StatusOr<VocabSpec> LoadVocabForTokenize(const TokenizeOptions& o) {
  ProgressLine progress("loading " + std::filesystem::path(o.model_path).filename().string());
  auto vocab = LoadModelVocab(o.model_path, o.tokenizer_path, progress.Callback());
  progress.Finish();
  return vocab;
}

int RunTokenize(const TokenizeOptions& o) {
  if (o.model_path.empty() && o.tokenizer_path.empty()) {
    return ReportError(InvalidArgumentError("pass --model PATH (or --tokenizer PATH)"));
  }
  std::string text = o.text;
  if (!o.text_file.empty()) {
    std::ifstream in(o.text_file, std::ios::binary);
    if (!in) return ReportError(NotFoundError("cannot open --text-file '" + o.text_file + "'"));
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto spec = LoadVocabForTokenize(o);
  if (!spec.ok()) return ReportError(spec.status());
  auto tokenizer = Tokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) return ReportError(tokenizer.status().WithContext("tokenizer"));
  EncodeOptions encode;
  encode.add_bos = !o.no_bos;
  encode.parse_special = o.parse_special;
  const std::vector<TokenId> ids = (*tokenizer)->Encode(text, encode);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text on one line, separated by spaces.");
  cmd->add_option("-m,--model", opts->model_path,
                  "Model or vocabulary-only GGUF (ggml-vocab-*.gguf) whose tokenizer to use");
  cmd->add_option("--tokenizer", opts->tokenizer_path,
                  "Tokenizer file (tokenizer.json, llama2.c .bin, GGUF) overriding the model's");
  auto* text = cmd->add_option("--text", opts->text, "Text to tokenize");
  auto* file = cmd->add_option("--text-file", opts->text_file, "File whose bytes to tokenize");
  text->excludes(file);
  file->excludes(text);
  cmd->add_flag("--no-bos", opts->no_bos, "Do not add BOS (added when the vocabulary asks)");
  cmd->add_flag("--parse-special", opts->parse_special,
                "Recognise special-token texts such as <|eot_id|> or </s>");
  cmd->callback([opts, exit_code, text, file]() {
    if (text->count() == 0 && file->count() == 0) {
      *exit_code = ReportError(InvalidArgumentError("pass --text TEXT or --text-file FILE"));
      return;
    }
    *exit_code = RunTokenize(*opts);
  });
}

}  // namespace kvserve::cli
