#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/percentile.h"

namespace kvserve::eval {
namespace {

using Clock = std::chrono::steady_clock;

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

// Runs one window as a scoring request on `core` and writes the logits of positions
// first .. ctx-2 to `scored` ([ctx - 1 - first, vocab]). The request's blocks return when it
// ends; on error it is aborted, so they return too.
// *kv_tokens_attended: the sum over scored positions of the slots each attended (mean over
// layers).
Status RunWindow(EngineCore& core, const std::vector<TokenId>& window, int64_t first,
                 const KvEvictionPolicy& policy, float* scored, double* kv_tokens_attended) {
  const int64_t V = core.model().config().vocab_size;
  const int64_t ctx = static_cast<int64_t>(window.size());
  constexpr SeqId kId = 1;
  RequestInput in;
  in.prompt_ids = window;
  in.max_tokens = 0;
  in.prompt_logits_start = first;
  in.kv_policy = policy;
  KV_RETURN_IF_ERROR(core.add_request(kId, std::move(in)));
  int64_t next_row = 0;
  bool finished = false;
  while (!finished && core.has_unfinished()) {
    // Before the step: the chunk's first position and the slots it finds (a row at position p
    // attends slots_before + (p - first_position) + 1 slots).
    const Request* r = core.scheduler().request(kId);
    const int64_t first_position = r != nullptr ? r->num_computed_tokens() : 0;
    // Slots attended, averaged over layers (PyramidKV's layers skip their first slots).
    double slots_before = r != nullptr ? static_cast<double>(r->num_kv_slots()) : 0.0;
    if (r != nullptr && !r->kv_layer_key_begin().empty()) {
      double skipped = 0.0;
      for (int64_t b : r->kv_layer_key_begin()) skipped += static_cast<double>(b);
      slots_before -= skipped / static_cast<double>(r->kv_layer_key_begin().size());
    }
    EngineCoreStep step = core.step();
    for (const RequestOutput& out : step.outputs) {
      KV_CHECK_EQ(out.id, kId);
      if (out.finish_reason == FinishReason::kError) {
        return InternalError("window forward pass failed: " + out.error);
      }
      const PromptLogits& pl = out.prompt_logits;
      if (pl.num_rows > 0) {
        KV_CHECK_EQ(pl.first_position, first + next_row) << "prompt logits out of order";
        std::copy(pl.rows.begin(), pl.rows.end(), scored + next_row * V);
        next_row += pl.num_rows;
        for (int64_t p = pl.first_position; p < pl.first_position + pl.num_rows; ++p) {
          *kv_tokens_attended += slots_before + static_cast<double>(p - first_position + 1);
        }
      }
      finished = out.finished();
    }
  }
  KV_CHECK(finished && next_row == ctx - 1 - first)
      << "window ended with " << next_row << " of " << ctx - 1 - first << " rows";
  KV_CHECK_EQ(core.kv_manager().stats().blocks_in_use, 0) << "a window's blocks leaked";
  return OkStatus();
}

}  // namespace

EngineCoreOptions WindowEngineOptions(int64_t ctx_tokens, int64_t batch_tokens) {
  EngineCoreOptions o;
  o.scheduler.max_model_len = ctx_tokens;
  o.scheduler.max_num_seqs = 1;
  o.scheduler.max_num_batched_tokens = batch_tokens;
  o.scheduler.enable_chunked_prefill = true;
  o.enable_prefix_caching = false;
  return o;
}

StatusOr<KvCacheConfig> WindowKvCacheConfig(const LlamaModel& model, KvCacheConfig config,
                                            int64_t ctx, int64_t batch, bool* exact) {
  config.max_model_len = ctx;
  config.max_num_batched_tokens = batch;
  *exact = config.memory_bytes <= 0;
  if (*exact) {
    KV_ASSIGN_OR_RETURN(DType dtype, ParseKvCacheDtype(config.dtype, DType::kF32));
    const KvCacheSpec spec = model.kv_spec(dtype, config.block_size);
    KV_RETURN_IF_ERROR(spec.Validate());
    config.memory_bytes =
        spec.fixed_scale_bytes() + spec.blocks_for_tokens(ctx) * spec.bytes_per_block();
  }
  return config;
}

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
  k.median_kld = PercentileOfSorted(kld, 50.0);
  k.p90_kld = PercentileOfSorted(kld, 90.0);
  k.p99_kld = PercentileOfSorted(kld, 99.0);
  k.p999_kld = PercentileOfSorted(kld, 99.9);
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
  if (Status s = options.kv_policy.Validate(); !s.ok()) return s;
  const bool streaming = options.kv_policy.method == KvEvictionMethod::kStreaming;
  for (const PagedKvCache* kv : {test_kv, base_kv}) {
    // StreamingLLM's windows run past max_model_len (positions within the cache).
    if (kv != nullptr && kv->max_model_len < ctx && !(streaming && kv == test_kv)) {
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
  // One engine core per cache, each the only owner of its blocks.
  const EngineCoreOptions core_options = WindowEngineOptions(ctx, batch);
  KV_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> test_core,
                      EngineCore::Create(core_options, &model, test_kv, pool));
  std::unique_ptr<EngineCore> base_core;
  if (base_kv != nullptr) {
    KV_ASSIGN_OR_RETURN(base_core, EngineCore::Create(core_options, &model, base_kv, pool));
  }
  std::vector<float> test_logits(static_cast<size_t>(num_scored * V));
  std::vector<float> base_logits(base_kv != nullptr ? test_logits.size() : 0);
  std::vector<TokenId> window(static_cast<size_t>(ctx));
  std::vector<TokenScore> scores;
  scores.reserve(static_cast<size_t>(num_windows * num_scored));
  PerplexityResult result;
  double kv_tokens_attended = 0.0;
  for (int64_t w = 0; w < num_windows; ++w) {
    std::copy(tokens.begin() + w * ctx, tokens.begin() + (w + 1) * ctx, window.begin());
    if (options.bos_id != kNoToken) window[0] = options.bos_id;
    if (base_core != nullptr) {
      double unused = 0.0;
      KV_RETURN_IF_ERROR(
          RunWindow(*base_core, window, first, KvEvictionPolicy{}, base_logits.data(), &unused));
    }
    KV_RETURN_IF_ERROR(RunWindow(*test_core, window, first, options.kv_policy,
                                 test_logits.data(), &kv_tokens_attended));
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
  result.mean_kv_tokens_kept = kv_tokens_attended / static_cast<double>(scores.size());
  result.ctx_tokens = ctx;
  result.batch_tokens = batch;
  result.num_text_tokens = num_tokens;
  result.num_windows = num_windows;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
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
  std::snprintf(buf, sizeof(buf), "KV eviction:      %s; %.1f KV tokens attended per scored "
                "token (mean)\n", report.kv_policy.ToString().c_str(), r.mean_kv_tokens_kept);
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
  j["kv_eviction"] = KvEvictionMethodName(report.kv_policy.method);
  j["kv_budget"] = report.kv_policy.method == KvEvictionMethod::kNone
                       ? nlohmann::json()
                       : nlohmann::json(report.kv_policy.budget_tokens);
  j["mean_kv_tokens_kept"] = r.mean_kv_tokens_kept;
  j["kv_clipped_values"] = report.kv_clipped_values;
  j["threads"] = report.threads;
  j["seconds"] = r.seconds;
  j["tokens_per_s"] =
      r.seconds > 0 ? static_cast<double>(r.num_windows * r.ctx_tokens * (r.kld ? 2 : 1)) /
                          r.seconds
                    : 0.0;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvserve::eval
