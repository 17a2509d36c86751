// `kvserve prompt-lint FILE.jsonl`: finds prompt spans that vary before content the requests
// share, and the prefix-cache hit rate before and after moving them (promptlint/). Flags, I/O
// and output only.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "chat/model_chat_templates.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "promptlint/prompt_lint.h"
#include "promptlint/prompt_lint_report.h"
#include "promptlint/request_file.h"

namespace kvserve::cli {
namespace {

struct PromptLintFlags {
  std::string file;
  std::string model_path;
  std::string tokenizer_path;
  std::string chat_template_path;
  std::string format = "text";  // text | json
  promptlint::PromptLintOptions options;
};

int RunPromptLint(const PromptLintFlags& f) {
  if (Status s = f.options.Validate(); !s.ok()) return ReportError(s);
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return ReportError(NotFoundError("cannot open '" + f.file + "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  auto bodies = promptlint::ParseRequestFile(ss.str());
  if (!bodies.ok()) return ReportError(bodies.status().WithContext(f.file));

  // The vocabulary alone (a GGUF's metadata, no tensors), as `kvserve tokenize` reads it.
  ProgressLine progress("loading " + std::filesystem::path(f.model_path).filename().string());
  auto spec = LoadModelVocab(f.model_path, f.tokenizer_path, progress.Callback());
  progress.Finish();
  if (!spec.ok()) return ReportError(spec.status());
  auto tokenizer = Tokenizer::Create(std::move(spec).value());
  if (!tokenizer.ok()) return ReportError(tokenizer.status().WithContext("tokenizer"));
  const Tokenizer& tok = **tokenizer;
  auto token_text = [&](TokenId id) {
    return id >= 0 && id < tok.vocab_size() ? tok.spec().tokens[static_cast<size_t>(id)] : std::string();
  };
  // The chat template the server would use: --chat-template, else the model's, else ChatML.
  auto templates = ModelChatTemplates::Load(f.model_path, f.chat_template_path,
                                            token_text(tok.bos_id()), token_text(tok.eos_id()));
  if (!templates.ok()) return ReportError(templates.status());

  auto prompts = promptlint::EncodeRequests(*bodies, {&tok, &*templates});
  if (!prompts.ok()) return ReportError(prompts.status().WithContext(f.file));
  auto decode = [&](const std::vector<TokenId>& ids) { return tok.Decode(ids, /*special=*/true); };
  auto report = promptlint::AnalyzePrompts(*prompts, f.options, decode);
  if (!report.ok()) return ReportError(report.status());
  std::string out;
  if (f.format == "json") {
    // Spans cut inside a UTF-8 character are shown with U+FFFD rather than failing.
    out = promptlint::PromptLintToJson(*report).dump(2, ' ', false,
                                                       nlohmann::ordered_json::error_handler_t::replace) +
          "\n";
  } else {
    if (templates->is_chatml_fallback() && f.chat_template_path.empty()) {
      bool any_chat = false;
      for (const promptlint::RequestBody& b : *bodies) any_chat = any_chat || b.chat;
      if (any_chat) std::fprintf(stderr, "note: the model has no chat template; chat requests use ChatML\n");
    }
    out = promptlint::FormatPromptLintText(*report);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void AddPromptLintCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<PromptLintFlags>();
  CLI::App* cmd = app.add_subcommand(
      "prompt-lint",
      "Find spans near the start of prompts that vary between requests whose later content is "
      "shared (a timestamp, a user id, a shuffled tool list before a long system prompt), and "
      "the prefix-cache hit rate before and after moving each one after the shared content "
      "(both replayed through the real radix prefix cache).");
  cmd->add_option("file", f->file,
                  "JSONL file of OpenAI request bodies, one per line: chat (\"messages\", "
                  "optional \"tools\") or completions (\"prompt\")")
      ->required();
  cmd->add_option("-m,--model", f->model_path,
                  "Model whose tokenizer and chat template to use (GGUF, vocabulary-only GGUF, "
                  "Hugging Face folder)");
  cmd->add_option("--tokenizer", f->tokenizer_path,
                  "Tokenizer file (tokenizer.json, llama2.c .bin, GGUF) overriding the model's");
  cmd->add_option("--chat-template", f->chat_template_path,
                  "Jinja template file for chat requests instead of the model's");
  cmd->add_option("--block-size", f->options.block_size_tokens,
                  "Prefix-cache block size in tokens (serve's --block-size)")
      ->capture_default_str();
  cmd->add_option("--capacity-blocks", f->options.capacity_blocks,
                  "Prefix-cache capacity of the replays in blocks (0: unbounded)")
      ->capture_default_str();
  cmd->add_option("--min-shared-tokens", f->options.min_shared_tokens,
                  "Shortest shared region after a span for the span to count")
      ->capture_default_str();
  cmd->add_option("--min-requests", f->options.min_requests,
                  "Fewest requests sharing content that make a group")
      ->capture_default_str();
  cmd->add_option("--max-spans", f->options.max_spans, "Spans to report (most hits lost first)")
      ->capture_default_str();
  cmd->add_option("--examples", f->options.max_examples, "Differing values shown per span")
      ->capture_default_str();
  cmd->add_option("--format,--output-format", f->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([f, exit_code]() {
    if (f->model_path.empty() && f->tokenizer_path.empty()) {
      *exit_code = ReportError(InvalidArgumentError("pass --model PATH (or --tokenizer PATH)"));
      return;
    }
    *exit_code = RunPromptLint(*f);
  });
}

}  // namespace kvserve::cli
