#include "cli/eval.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The blocks of the one sequence a cache holds during a window, returned when it goes out of
// scope.
class WindowBlocks {
 public:
  explicit WindowBlocks(PagedKvCache* kv) : kv_(kv), table_(kv->spec.block_size) {}
  ~WindowBlocks() { kv_->blocks->release_all(table_.clear()); }
  WindowBlocks(const WindowBlocks&) = delete;
  WindowBlocks& operator=(const WindowBlocks&) = delete;

  BlockTable& table() { return table_; }
  Status Reserve(int64_t num_tokens) {
    const int64_t need = table_.blocks_needed(num_tokens);
    std::vector<BlockId> ids;
    if (need > 0 && !kv_->blocks->allocate(need, &ids)) {
      return ResourceExhaustedError(
          "the KV cache cannot hold one " + std::to_string(num_tokens) + "-token window: " +
          std::to_string(need) + " blocks needed, " +
          std::to_string(kv_->blocks->num_available()) +
          " available (raise --kv-cache-memory or lower --ctx)");
    }
    table_.append_blocks(ids);
    return OkStatus();
  }

 private:
  PagedKvCache* kv_;
  BlockTable table_;
};

// Runs one window (ctx tokens from position 0) through `kv` in passes of `batch` tokens and
// writes the logits of positions first .. ctx-2 to `scored` ([ctx - 1 - first, vocab]).
Status RunWindow(LlamaModel& model, const TokenId* window, int64_t ctx, int64_t batch,
                 int64_t first, PagedKvCache* kv, ThreadPool* pool, float* scored,
                 std::vector<float>* scratch_row) {
  const int64_t V = model.config().vocab_size;
  WindowBlocks blocks(kv);
  KV_RETURN_IF_ERROR(blocks.Reserve(ctx));
  BlockTable& table = blocks.table();
  const int64_t last_scored = ctx - 2;
  for (int64_t begin = 0; begin < ctx; begin += batch) {
    const int64_t end = std::min(ctx, begin + batch);
    ForwardBatch fb;
    fb.AddSequence(window + begin, end - begin, begin, table);
    // Wanted rows: positions [lo, hi] of this pass that are scored; contiguous and in order,
    // so the forward pass writes them straight into `scored`.
    const int64_t lo = std::max(begin, first);
    const int64_t hi = std::min(end - 1, last_scored);
    float* out = scratch_row->data();
    fb.logits_indices.clear();
    if (lo <= hi) {
      for (int64_t p = lo; p <= hi; ++p) fb.logits_indices.push_back(p - begin);
      out = scored + (lo - first) * V;
    } else {
      fb.logits_indices.push_back(end - 1 - begin);  // unused; keeps the pass ordinary
    }
    KV_RETURN_IF_ERROR(model.Forward(fb, kv->storage.get(), pool, out));
    table.set_num_tokens(end);
  }
  return OkStatus();
}

// ln(sum(exp(x))) of a logits row, in double.
double LogSumExp(const float* x, int64_t n, double* max_out) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(x[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(x[j]) - m);
  if (max_out != nullptr) *max_out = m;
  return m + std::log(sum);
}

int64_t ArgMax(const float* x, int64_t n) {
  return std::max_element(x, x + n) - x;  // first maximum: lowest id on ties
}

double MeanOf(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// Standard error of the mean (sample standard deviation / sqrt(n)); 0 for n < 2.
double StderrOf(const std::vector<double>& v, double mean) {
  const size_t n = v.size();
  if (n < 2) return 0.0;
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(n - 1) / static_cast<double>(n));
}

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
                                         KvCacheConfig config, int64_t ctx, int64_t batch,
                                         const std::string& role, ThreadPool* pool) {
  config.max_model_len = ctx;
  config.max_num_batched_tokens = batch;
  const bool exact = config.memory_bytes <= 0;
  if (exact) {
    KV_ASSIGN_OR_RETURN(DType dtype, ParseKvCacheDtype(config.dtype, DType::kF32));
    const KvCacheSpec spec = model.kv_spec(dtype, config.block_size);
    KV_RETURN_IF_ERROR(spec.Validate());
    config.memory_bytes =
        spec.fixed_scale_bytes() + spec.blocks_for_tokens(ctx) * spec.bytes_per_block();
  }
  auto dtype = ParseKvCacheDtype(config.dtype, DType::kF32);
  if (dtype.ok() && (*dtype == DType::kFp8E4M3 || *dtype == DType::kFp8E5M2)) {
    std::fprintf(stderr, "KV cache (%s): fp8 scales: looking in the model file, else "
                 "calibrating...\n", role.c_str());
  }
  KV_ASSIGN_OR_RETURN(PagedKvCache cache, CreatePagedKvCache(model, tokenizer, config, pool));
  if (exact) cache.budget_source = "one --ctx window (" + std::to_string(ctx) + " tokens)";
  for (const std::string& line : cache.Describe()) {
    std::fprintf(stderr, "%s (%s)\n", line.c_str(), role.c_str());
  }
  return cache;
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

TokenScore ScoreToken(const float* test_logits, const float* base_logits, int64_t vocab_size,
                      TokenId next_token) {
  TokenScore s;
  const double lse_t = LogSumExp(test_logits, vocab_size, nullptr);
  const double logp_t_next = static_cast<double>(test_logits[next_token]) - lse_t;
  s.nll = -logp_t_next;
  if (base_logits == nullptr) return s;
  const double lse_b = LogSumExp(base_logits, vocab_size, nullptr);
  const double logp_b_next = static_cast<double>(base_logits[next_token]) - lse_b;
  s.base_nll = -logp_b_next;
  double kld = 0.0;
  for (int64_t j = 0; j < vocab_size; ++j) {
    const double lb = static_cast<double>(base_logits[j]) - lse_b;
    const double lt = static_cast<double>(test_logits[j]) - lse_t;
    kld += std::exp(lb) * (lb - lt);
  }
  s.kld = kld;
  s.delta_p = std::exp(logp_t_next) - std::exp(logp_b_next);
  s.same_top1 = ArgMax(test_logits, vocab_size) == ArgMax(base_logits, vocab_size);
  return s;
}

double SortedPercentile(const std::vector<double>& sorted, double q) {
  KV_CHECK(!sorted.empty());
  if (q <= 0.0) return sorted.front();
  if (q >= 1.0) return sorted.back();
  const double p = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(p);
  const double frac = p - static_cast<double>(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1.0 - frac) * sorted[i] + frac * sorted[j];
}

PerplexityResult SummarizeScores(const std::vector<TokenScore>& scores, bool has_base) {
  PerplexityResult r;
  r.num_scored_tokens = static_cast<int64_t>(scores.size());
  if (scores.empty()) return r;
  const double n = static_cast<double>(scores.size());
  std::vector<double> nll;
  nll.reserve(scores.size());
  for (const TokenScore& s : scores) nll.push_back(s.nll);
  r.mean_nll = MeanOf(nll);
  r.perplexity = std::exp(r.mean_nll);
  r.perplexity_stderr = r.perplexity * StderrOf(nll, r.mean_nll);
  if (!has_base) return r;

  KldSummary k;
  std::vector<double> base_nll, ratio, kld, dp;
  double same = 0.0, dp_sq = 0.0;
  for (const TokenScore& s : scores) {
    base_nll.push_back(s.base_nll);
    ratio.push_back(s.nll - s.base_nll);
    kld.push_back(s.kld);
    dp.push_back(s.delta_p);
    dp_sq += s.delta_p * s.delta_p;
    same += s.same_top1 ? 1.0 : 0.0;
  }
  k.base_perplexity = std::exp(MeanOf(base_nll));
  k.ln_ppl_ratio = MeanOf(ratio);
  k.ln_ppl_ratio_stderr = StderrOf(ratio, k.ln_ppl_ratio);
  k.mean_kld = MeanOf(kld);
  k.kld_stderr = StderrOf(kld, k.mean_kld);
  std::sort(kld.begin(), kld.end());
  k.median_kld = SortedPercentile(kld, 0.5);
  k.p90_kld = SortedPercentile(kld, 0.90);
  k.p99_kld = SortedPercentile(kld, 0.99);
  k.p999_kld = SortedPercentile(kld, 0.999);
  k.max_kld = kld.back();
  k.top1_agreement = same / n;
  k.top1_agreement_stderr = std::sqrt(k.top1_agreement * (1.0 - k.top1_agreement) / n);
  k.mean_delta_p = MeanOf(dp);
  k.rms_delta_p = std::sqrt(dp_sq / n);
  r.kld = k;
  return r;
}

StatusOr<PerplexityResult> RunPerplexity(LlamaModel& model, const std::vector<TokenId>& tokens,
                                         const PerplexityOptions& options, PagedKvCache* test_kv,
                                         PagedKvCache* base_kv, ThreadPool* pool,
                                         const PerplexityProgressFn& on_window) {
  const int64_t ctx = options.ctx_tokens;
  if (ctx < 3) {
    return InvalidArgumentError("--ctx must be at least 3 (a window scores its second half), got " +
                                std::to_string(ctx));
  }
  if (options.batch_tokens < 0) return InvalidArgumentError("--batch-size must be >= 1");
  if (options.max_windows < 0) return InvalidArgumentError("--max-windows must be >= 0");
  if (test_kv == nullptr) return InvalidArgumentError("RunPerplexity: no KV cache");
  for (const PagedKvCache* kv : {test_kv, base_kv}) {
    if (kv != nullptr && kv->max_model_len < ctx) {
      return InvalidArgumentError("--ctx " + std::to_string(ctx) +
                                  " exceeds the KV cache's maximum model length of " +
                                  std::to_string(kv->max_model_len) + " tokens");
    }
  }
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  if (num_tokens < ctx) {
    return InvalidArgumentError("the text has " + std::to_string(num_tokens) +
                                " tokens, fewer than one window of --ctx " +
                                std::to_string(ctx) +
                                " needs; pass a longer text or a smaller --ctx");
  }
  const ModelConfig& config = model.config();
  const int64_t V = config.vocab_size;
  for (TokenId t : tokens) {
    if (t < 0 || t >= V) {
      return InvalidArgumentError("token id " + std::to_string(t) +
                                  " of the text is outside the model's vocabulary (" +
                                  std::to_string(V) + " tokens); does --tokenizer match?");
    }
  }
  if (options.bos_id != kNoToken && (options.bos_id < 0 || options.bos_id >= V)) {
    return InvalidArgumentError("BOS id " + std::to_string(options.bos_id) +
                                " is outside the model's vocabulary");
  }
  const int64_t batch = options.batch_tokens > 0 ? std::min(options.batch_tokens, ctx) : ctx;
  int64_t num_windows = num_tokens / ctx;
  if (options.max_windows > 0) num_windows = std::min(num_windows, options.max_windows);
  const int64_t first = ctx / 2;
  const int64_t num_scored = ctx - 1 - first;  // positions first .. ctx-2

  const auto start = Clock::now();
  std::vector<float> test_logits(static_cast<size_t>(num_scored * V));
  std::vector<float> base_logits(base_kv != nullptr ? test_logits.size() : 0);
  std::vector<float> scratch_row(static_cast<size_t>(V));
  std::vector<TokenId> window(static_cast<size_t>(ctx));
  std::vector<TokenScore> scores;
  scores.reserve(static_cast<size_t>(num_windows * num_scored));
  PerplexityResult result;
  for (int64_t w = 0; w < num_windows; ++w) {
    std::copy(tokens.begin() + w * ctx, tokens.begin() + (w + 1) * ctx, window.begin());
    if (options.bos_id != kNoToken) window[0] = options.bos_id;
    if (base_kv != nullptr) {
      KV_RETURN_IF_ERROR(RunWindow(model, window.data(), ctx, batch, first, base_kv, pool,
                                   base_logits.data(), &scratch_row));
    }
    KV_RETURN_IF_ERROR(RunWindow(model, window.data(), ctx, batch, first, test_kv, pool,
                                 test_logits.data(), &scratch_row));
    // Rows are independent; each writes only its own score.
    const size_t base_index = scores.size();
    scores.resize(base_index + static_cast<size_t>(num_scored));
    auto score_rows = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* b = base_kv != nullptr ? base_logits.data() + i * V : nullptr;
        scores[base_index + static_cast<size_t>(i)] =
            ScoreToken(test_logits.data() + i * V, b, V, window[first + i + 1]);
      }
    };
    if (pool != nullptr) {
      pool->ParallelFor(num_scored, 1, score_rows);
    } else {
      score_rows(0, num_scored);
    }
    if (on_window) {
      result = SummarizeScores(scores, base_kv != nullptr);
      on_window(w + 1, num_windows, result);
    }
  }
  result = SummarizeScores(scores, base_kv != nullptr);
  result.ctx_tokens = ctx;
  result.batch_tokens = batch;
  result.num_text_tokens = num_tokens;
  result.num_windows = num_windows;
  result.seconds = SecondsSince(start);
  return result;
}

std::string FormatPerplexityText(const PerplexityReport& report) {
  const PerplexityResult& r = report.result;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "model:            %s\ntext:             %s (%lld tokens)\n"
                "windows:          %lld of %lld tokens (forward passes of %lld), %lld tokens "
                "scored (second half of each window)\n"
                "KV cache dtype:   %s (%lld bytes per token)\n",
                report.model.c_str(), report.text_file.c_str(),
                static_cast<long long>(r.num_text_tokens), static_cast<long long>(r.num_windows),
                static_cast<long long>(r.ctx_tokens), static_cast<long long>(r.batch_tokens),
                static_cast<long long>(r.num_scored_tokens), report.kv_cache_dtype.c_str(),
                static_cast<long long>(report.kv_bytes_per_token));
  out += buf;
  std::snprintf(buf, sizeof(buf), "perplexity:       %.4f +/- %.4f\n", r.perplexity,
                r.perplexity_stderr);
  out += buf;
  if (r.kld.has_value()) {
    const KldSummary& k = *r.kld;
    std::snprintf(
        buf, sizeof(buf),
        "--- against a %s-KV run of the same model ---\n"
        "base perplexity:  %.4f\n"
        "ln(PPL/PPL_base): %.6f +/- %.6f\n"
        "mean KLD:         %.6f +/- %.6f\n"
        "median KLD:       %.6f\n"
        "p90 / p99 / p99.9 KLD: %.6f / %.6f / %.6f\n"
        "max KLD:          %.6f\n"
        "top-1 agreement:  %.3f%% +/- %.3f%%\n"
        "delta p:          mean %.4f%%, RMS %.4f%%\n",
        report.base_kv_cache_dtype.c_str(), k.base_perplexity, k.ln_ppl_ratio,
        k.ln_ppl_ratio_stderr, k.mean_kld, k.kld_stderr, k.median_kld, k.p90_kld, k.p99_kld,
        k.p999_kld, k.max_kld, 100.0 * k.top1_agreement, 100.0 * k.top1_agreement_stderr,
        100.0 * k.mean_delta_p, 100.0 * k.rms_delta_p);
    out += buf;
  }
  if (report.kv_clipped_values > 0) {
    out += "fp8 KV values clipped: " + std::to_string(report.kv_clipped_values) + "\n";
  }
  std::snprintf(buf, sizeof(buf), "time:             %.2f s, %d threads\n", r.seconds,
                report.threads);
  out += buf;
  return out;
}

std::string FormatPerplexityJson(const PerplexityReport& report) {
  const PerplexityResult& r = report.result;
  nlohmann::json j;
  j["model"] = report.model;
  j["text_file"] = report.text_file;
  j["kv_cache_dtype"] = report.kv_cache_dtype;
  j["base_kv_cache_dtype"] =
      report.base_kv_cache_dtype.empty() ? nlohmann::json() : nlohmann::json(report.base_kv_cache_dtype);
  j["kv_bytes_per_token"] = report.kv_bytes_per_token;
  j["base_kv_bytes_per_token"] = report.base_kv_bytes_per_token > 0
                                     ? nlohmann::json(report.base_kv_bytes_per_token)
                                     : nlohmann::json();
  j["ctx"] = r.ctx_tokens;
  j["batch_size"] = r.batch_tokens;
  j["num_text_tokens"] = r.num_text_tokens;
  j["num_windows"] = r.num_windows;
  j["num_scored_tokens"] = r.num_scored_tokens;
  j["mean_nll"] = r.mean_nll;
  j["perplexity"] = r.perplexity;
  j["perplexity_stderr"] = r.perplexity_stderr;
  const char* kld_keys[] = {"base_perplexity", "ln_ppl_ratio", "ln_ppl_ratio_stderr",
                            "mean_kld", "kld_stderr", "median_kld", "p90_kld", "p99_kld",
                            "p999_kld", "max_kld", "top1_agreement", "top1_agreement_stderr",
                            "mean_delta_p", "rms_delta_p"};
  if (r.kld.has_value()) {
    const KldSummary& k = *r.kld;
    const double values[] = {k.base_perplexity, k.ln_ppl_ratio, k.ln_ppl_ratio_stderr,
                             k.mean_kld, k.kld_stderr, k.median_kld, k.p90_kld, k.p99_kld,
                             k.p999_kld, k.max_kld, k.top1_agreement, k.top1_agreement_stderr,
                             k.mean_delta_p, k.rms_delta_p};
    for (size_t i = 0; i < std::size(kld_keys); ++i) j[kld_keys[i]] = values[i];
  } else {
    for (const char* key : kld_keys) j[key] = nullptr;
  }
  j["kv_clipped_values"] = report.kv_clipped_values;
  j["threads"] = report.threads;
  j["seconds"] = r.seconds;
  j["tokens_per_s"] =
      r.seconds > 0 ? static_cast<double>(r.num_windows * r.ctx_tokens * (r.kld ? 2 : 1)) /
                          r.seconds
                    : 0.0;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int RunEvalPerplexityCommand(const EvalPerplexityOptions& options) {
  if (options.model_path.empty()) return ReportError(InvalidArgumentError("--model is required"));
  if (options.text_file.empty()) {
    return ReportError(InvalidArgumentError("--text-file is required"));
  }
  if (options.ctx_tokens < 3) {
    return ReportError(InvalidArgumentError(
        "--ctx must be at least 3 (a window scores its second half), got " +
        std::to_string(options.ctx_tokens)));
  }
  if (options.batch_tokens < 0) return ReportError(InvalidArgumentError("--batch-size must be >= 1"));
  if (options.max_windows < 0) {
    return ReportError(InvalidArgumentError("--max-windows must be >= 0"));
  }
  if (options.threads < 0) return ReportError(InvalidArgumentError("--threads must be >= 1"));
  if (options.format != "text" && options.format != "json") {
    return ReportError(InvalidArgumentError("--format must be text or json"));
  }
  auto kv_config = ResolveKvCacheFlags(options.kv);
  if (!kv_config.ok()) return ReportError(kv_config.status());
  auto test_dtype = ParseKvCacheDtype(kv_config->dtype, DType::kF32);
  if (!test_dtype.ok()) return ReportError(test_dtype.status());
  // The text first: a missing file fails before the model loads.
  auto text = ReadTextFile(options.text_file);
  if (!text.ok()) return ReportError(text.status());

  // 1. Model and tokenizer.
  const auto load_start = Clock::now();
  auto loaded = LoadModelWithProgress(options.model_path, options.tokenizer_path);
  if (!loaded.ok()) return ReportError(loaded.status());
  PrintModelSummary(*loaded, SecondsSince(load_start));
  if (!loaded->vocab.has_value()) {
    return ReportError(InvalidArgumentError(
        "the model carries no tokenizer; pass one with --tokenizer PATH"));
  }
  auto tok = Tokenizer::Create(*loaded->vocab);
  if (!tok.ok()) return ReportError(tok.status().WithContext("tokenizer"));
  std::unique_ptr<Tokenizer> tokenizer = std::move(tok).value();
  auto created = LlamaModel::Create(std::move(loaded).value());
  if (!created.ok()) return ReportError(created.status());
  std::unique_ptr<LlamaModel> model = std::move(created).value();

  // 2. Windows: --ctx capped by the model's context and --max-model-len.
  int64_t ctx = options.ctx_tokens;
  int64_t limit = model->config().max_seq_len;
  std::string limit_what = "the model's context";
  if (kv_config->max_model_len > 0 && kv_config->max_model_len < limit) {
    limit = kv_config->max_model_len;
    limit_what = "--max-model-len";
  }
  if (ctx > limit) {
    std::fprintf(stderr, "note: --ctx %lld exceeds %s (%lld tokens); using --ctx %lld\n",
                 static_cast<long long>(ctx), limit_what.c_str(), static_cast<long long>(limit),
                 static_cast<long long>(limit));
    ctx = limit;
  }
  if (ctx < 3) {
    return ReportError(InvalidArgumentError("the context (" + std::to_string(ctx) +
                                            " tokens) is too short to score a window"));
  }
  const int64_t batch =
      options.batch_tokens > 0 ? std::min(options.batch_tokens, ctx) : ctx;

  const auto tokenize_start = Clock::now();
  EncodeOptions encode;
  encode.add_bos = true;  // when the vocabulary asks for BOS
  const std::vector<TokenId> tokens = tokenizer->Encode(*text, encode);
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  const bool add_bos = tokenizer->spec().add_bos && tokenizer->bos_id() != kNoToken;
  std::fprintf(stderr, "text: %s: %lld tokens (tokenized in %.2f s); windows of %lld tokens, "
               "%s; scoring the second half of each\n",
               options.text_file.c_str(), static_cast<long long>(num_tokens),
               SecondsSince(tokenize_start), static_cast<long long>(ctx),
               add_bos ? "each starting with BOS" : "no BOS (the vocabulary adds none)");
  if (num_tokens < ctx) {
    return ReportError(InvalidArgumentError(
        "the text has " + std::to_string(num_tokens) + " tokens, fewer than one window of --ctx " +
        std::to_string(ctx) + " needs; pass a longer text or a smaller --ctx"));
  }

  // 3. KV caches: the base (f32) one first, then the one under test.
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
  auto test_kv = CreateWindowCache(*model, tokenizer.get(), *kv_config, ctx, batch,
                                   options.kl_divergence ? "test" : "eval", &pool);
  if (!test_kv.ok()) return ReportError(test_kv.status());

  // 4. Evaluate.
  PerplexityOptions popts;
  popts.ctx_tokens = ctx;
  popts.batch_tokens = batch;
  popts.max_windows = options.max_windows;
  popts.bos_id = add_bos ? tokenizer->bos_id() : kNoToken;
  WindowProgress progress(options.kl_divergence);
  auto result = RunPerplexity(
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
  if (options.format == "json") {
    std::printf("%s\n", FormatPerplexityJson(report).c_str());
  } else {
    std::fputs(FormatPerplexityText(report).c_str(), stdout);
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
                  "Tokens per window (capped by the model's context)")
      ->capture_default_str();
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
  cmd->callback([opts, exit_code]() { *exit_code = RunEvalPerplexityCommand(*opts); });
}

}  // namespace kvserve::cli
