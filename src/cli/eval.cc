#include "cli/eval.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/model_setup.h"
#include "eval/perplexity.h"
#include "eval/windows.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
using eval::PerplexityOptions;
using eval::PerplexityReport;
using eval::PerplexityResult;

StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError("--text-file '" + path + "' is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read --text-file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("error reading --text-file '" + path + "'");
  std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return InvalidArgumentError("--text-file '" + path + "' is empty (no text to evaluate)");
  }
  return text;
}

// A cache for one window of ctx tokens, with its banner on stderr. Unless the user set
// --kv-cache-memory, the budget is exactly the blocks of one window.
StatusOr<PagedKvCache> CreateWindowCache(LlamaModel& model, const Tokenizer* tokenizer,
                                         const KvCacheConfig& flags, int64_t ctx, int64_t batch,
                                         const std::string& role, ThreadPool* pool) {
  bool exact = false;
  KV_ASSIGN_OR_RETURN(KvCacheConfig config,
                      eval::WindowKvCacheConfig(model, flags, ctx, batch, &exact));
  return CreateKvCacheWithBanner(
      model, tokenizer, config, pool, role,
      exact ? "one --ctx window (" + std::to_string(ctx) + " tokens)" : "");
}

// Progress on stderr: one line rewritten in place on a terminal, else about 20 lines in all.
class WindowProgress {
 public:
  explicit WindowProgress(bool with_kld) : tty_(::isatty(2) != 0), with_kld_(with_kld) {}
  ~WindowProgress() { Finish(); }
  void Update(int64_t done, int64_t total, const PerplexityResult& so_far) {
    const int64_t every = std::max<int64_t>(1, (total + 19) / 20);
    if (!tty_ && done != total && done % every != 0 && done != 1) return;
    char buf[256];
    int n = std::snprintf(buf, sizeof(buf), "perplexity: window %lld/%lld: PPL %.4f",
                          static_cast<long long>(done), static_cast<long long>(total),
                          so_far.perplexity);
    if (with_kld_ && so_far.kld.has_value() && n > 0 && n < static_cast<int>(sizeof(buf))) {
      std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n),
                    ", mean KLD %.6f, top-1 %.2f%%", so_far.kld->mean_kld,
                    100.0 * so_far.kld->top1_agreement);
    }
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", buf);
      active_ = true;
    } else {
      std::fprintf(stderr, "%s\n", buf);
    }
    std::fflush(stderr);
  }
  void Finish() {
    if (tty_ && active_) std::fprintf(stderr, "\n");
    active_ = false;
  }

 private:
  bool tty_;
  bool with_kld_;
  bool active_ = false;
};

}  // namespace

int RunEvalPerplexityCommand(const EvalPerplexityOptions& options) {
  if (options.model_path.empty()) return ReportError(InvalidArgumentError("--model is required"));
  if (options.text_file.empty()) {
    return ReportError(InvalidArgumentError("--text-file is required"));
  }
  Status flags = eval::ValidateWindowFlags(options.ctx_tokens, options.batch_tokens,
                                           options.max_windows);
  if (!flags.ok()) return ReportError(flags);
  if (options.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  if (options.format != "text" && options.format != "json") {
    return ReportError(InvalidArgumentError("--format must be text or json"));
  }
  auto kv_config = ResolveKvCacheFlags(options.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  const StatusOr<KvEvictionPolicy> policy = ResolveKvEvictionFlags(options.eviction);
  if (!policy.ok()) return ReportError(policy.status());
  const bool streaming = policy->method == KvEvictionMethod::kStreaming;
  auto test_dtype = ParseKvCacheDtype(kv_config->dtype, DType::kF32);
  if (!test_dtype.ok()) return ReportError(test_dtype.status());
  // The text first: a missing file fails before the model loads.
  auto text = ReadTextFile(options.text_file);
  if (!text.ok()) return ReportError(text.status());

  // 1. Model and tokenizer (cli/model_setup.h).
  CommandModelOptions model_options;
  model_options.model_path = options.model_path;
  model_options.tokenizer_path = options.tokenizer_path;
  model_options.require_tokenizer = true;
  auto loaded = LoadCommandModel(model_options);
  if (!loaded.ok()) return ReportError(loaded.status());
  std::unique_ptr<LlamaModel> model = std::move(loaded->model);
  std::unique_ptr<Tokenizer> tokenizer = std::move(loaded->tokenizer);

  // 2. Windows: --ctx within the model's context (any length with streaming), capped by
  // --max-model-len.
  const int64_t model_context = model->config().max_seq_len;
  const int64_t requested_ctx =
      options.ctx_tokens > 0 ? options.ctx_tokens : std::min<int64_t>(512, model_context);
  auto geometry = eval::ResolveWindowGeometry(requested_ctx, options.batch_tokens,
                                              model_context, kv_config->max_model_len, streaming);
  if (!geometry.ok()) return ReportError(geometry.status());
  if (!geometry->capped_note.empty()) {
    std::fprintf(stderr, "note: %s\n", geometry->capped_note.c_str());
  }
  const int64_t ctx = geometry->ctx_tokens;
  const int64_t batch = geometry->batch_tokens;

  const auto tokenize_start = Clock::now();
  const eval::WindowText window_text = eval::TokenizeForWindows(*tokenizer, *text);
  const std::vector<TokenId>& tokens = window_text.tokens;
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  std::fprintf(stderr, "text: %s: %lld tokens (tokenized in %.2f s); windows of %lld tokens, "
               "%s; scoring the second half of each\n",
               options.text_file.c_str(), static_cast<long long>(num_tokens),
               SecondsSince(tokenize_start), static_cast<long long>(ctx),
               window_text.bos_id != kNoToken ? "each starting with BOS"
                                              : "no BOS (the vocabulary adds none)");
  if (Status fills = eval::CheckTextFillsAWindow(num_tokens, ctx); !fills.ok()) {
    return ReportError(fills);
  }

  // 3. KV caches: the base (f32) one first, then the one under test. A StreamingLLM window
  // past the model's context runs in a cache of the model's context (it holds its window).
  const int64_t test_cache_ctx = streaming ? std::min(ctx, model_context) : ctx;
  if (options.kl_divergence && ctx > model_context) {
    return ReportError(InvalidArgumentError(
        "--kl-divergence needs a full-cache base run, which cannot go past the model's context "
        "(" + std::to_string(model_context) + " tokens); use --ctx " +
        std::to_string(model_context) + " or less"));
  }
  const int threads = options.threads > 0 ? options.threads : ThreadPool::HardwareThreads();
  ThreadPool pool(threads);
  std::optional<PagedKvCache> base_kv;
  if (options.kl_divergence) {
    KvCacheConfig base_config = *kv_config;
    base_config.dtype = "f32";
    base_config.memory_bytes = 0;  // the reference always gets exactly one window
    auto base = CreateWindowCache(*model, tokenizer.get(), base_config, ctx, batch, "base", &pool);
    if (!base.ok()) return ReportError(base.status().WithContext("base KV cache"));
    base_kv = std::move(base).value();
  }
  auto test_kv = CreateWindowCache(*model, tokenizer.get(), *kv_config, test_cache_ctx,
                                   std::min(batch, test_cache_ctx),
                                   options.kl_divergence ? "test" : "eval", &pool);
  if (!test_kv.ok()) return ReportError(test_kv.status());

  // 4. Evaluate.
  PerplexityOptions popts;
  popts.ctx_tokens = ctx;
  popts.batch_tokens = batch;
  popts.max_windows = options.max_windows;
  popts.bos_id = window_text.bos_id;
  popts.kv_policy = *policy;
  if (policy->method != KvEvictionMethod::kNone) {
    std::fprintf(stderr, "KV eviction: %s (each window's first %lld tokens are its context, "
                 "compressed before the second half is scored)\n",
                 policy->ToString().c_str(), static_cast<long long>(ctx / 2));
  }
  WindowProgress progress(options.kl_divergence);
  auto result = eval::RunPerplexity(
      *model, tokens, popts, &*test_kv, base_kv ? &*base_kv : nullptr, &pool,
      [&](int64_t done, int64_t total, const PerplexityResult& so_far) {
        progress.Update(done, total, so_far);
      });
  progress.Finish();
  if (!result.ok()) return ReportError(result.status());

  PerplexityReport report;
  report.result = std::move(result).value();
  report.model = options.model_path;
  report.text_file = options.text_file;
  report.kv_cache_dtype = DTypeName(test_kv->spec.dtype);
  report.base_kv_cache_dtype = options.kl_divergence ? "f32" : "";
  report.kv_bytes_per_token = test_kv->spec.bytes_per_token();
  report.base_kv_bytes_per_token = base_kv ? base_kv->spec.bytes_per_token() : 0;
  report.threads = threads;
  report.kv_clipped_values = test_kv->storage->quant_stats().total_clipped();
  report.kv_policy = *policy;
  if (options.format == "json") {
    std::printf("%s\n", eval::FormatPerplexityJson(report).c_str());
  } else {
    std::fputs(eval::FormatPerplexityText(report).c_str(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

void AddEvalCommand(CLI::App& app, int* exit_code) {
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a model's quality (perplexity, KL "
                                              "divergence of a quantized KV cache)");
  eval->require_subcommand(1);
  auto opts = std::make_shared<EvalPerplexityOptions>();
  CLI::App* cmd = eval->add_subcommand(
      "perplexity",
      "Perplexity over a text in non-overlapping windows of --ctx tokens (the second half of each "
      "window is scored), through the paged KV cache.\nWith --kl-divergence, also runs every "
      "window on an f32 KV cache and reports the KL divergence and top-1 agreement of this "
      "run's token distributions against it (as llama.cpp's perplexity --kl-divergence).");
  cmd->add_option("-m,--model", opts->model_path,
                  "Model: GGUF file, llama2.c checkpoint (.bin) or Hugging Face folder")
      ->required();
  cmd->add_option("--tokenizer", opts->tokenizer_path,
                  "Tokenizer file overriding the model's (tokenizer.json, llama2.c .bin, GGUF)");
  cmd->add_option("-f,--text-file", opts->text_file, "Text to evaluate on")->required();
  cmd->add_option("-c,--ctx", opts->ctx_tokens,
                  "Tokens per window (default: 512, or the model's context if shorter; past "
                  "the model's context only with --kv-eviction streaming)");
  cmd->add_option("-b,--batch-size", opts->batch_tokens,
                  "Tokens per forward pass within a window (default: --ctx); smaller passes "
                  "read more of their context back from the KV cache");
  cmd->add_option("--max-windows", opts->max_windows,
                  "Evaluate at most N windows (llama.cpp's --chunks; default: all)");
  cmd->add_flag("--kl-divergence", opts->kl_divergence,
                "Also run on an f32 KV cache and compare: mean/median/p99/max KLD, top-1 "
                "agreement, ln(PPL/PPL_base)");
  cmd->add_option("-t,--threads", opts->threads, "Worker threads (default: all available)");
  cmd->add_option("--format", opts->format, "text: a readable summary; json: one JSON object")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddKvCacheFlags(cmd, &opts->kv);
  AddKvEvictionFlags(cmd, &opts->eviction);
  cmd->callback([opts, exit_code]() { *exit_code = RunEvalPerplexityCommand(*opts); });
}

}  // namespace kvserve::cli
