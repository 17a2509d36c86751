// Perplexity of a model over a text, and with --kl-divergence how far
// a quantized KV cache moves the model's token distributions from an f32-KV run of the same
// model (llama.cpp's `perplexity --kl-divergence` semantics).
//
// The text is tokenized once (BOS at its start when the vocabulary adds one) and cut into
// non-overlapping windows of ctx tokens; a tail shorter than a window is dropped. The first
// token of every window is replaced by BOS (when the vocabulary adds BOS), as llama.cpp does,
// so that each window starts like a fresh document. Each window runs from position 0 through
// the paged KV path in forward passes of batch_tokens tokens (later passes read earlier tokens
// back from the, possibly quantized, cache; within a pass the K/V are also written to the cache
// before attention reads them). Only the second half of a window is scored: the logits at
// positions ctx/2 .. ctx-2 against the tokens that follow them, so every scored token sees at
// least ctx/2 tokens of context. Perplexity = exp(mean negative log-likelihood).
//
// With a base cache, each window runs twice in the same process, first on the base (f32) cache,
// then on the cache under test, and for every scored position the two distributions over the
// whole vocabulary are compared: KL(base || test) (log-softmax in double), whether their argmax
// agrees, and the probability each gives the actual next token.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/token_eviction.h"
#include "model/llama.h"
#include "runtime/engine_core.h"
#include "runtime/kv_cache_config.h"
#include "tokenizer/vocab_spec.h"

namespace kvserve::eval {

struct PerplexityOptions {
  int64_t ctx_tokens = 512;   // tokens per window (>= 3, so that a window scores a token)
  int64_t batch_tokens = 0;   // tokens per forward pass; 0: ctx_tokens
  int64_t max_windows = 0;    // evaluate at most this many windows; 0: all that fit
  TokenId bos_id = kNoToken;  // replaces the first token of each window; kNoToken: keep it
  // Token eviction of the run under test (the base run keeps every token): each window's
  // request compresses at its first scored position (the first half is its context), then
  // the second half is computed and scored with what is kept (docs/kv-eviction.md).
  KvEvictionPolicy kv_policy;
};

// Scores of one position: the test run's (and, with a base run, the comparison's).
struct TokenScore {
  double nll = 0.0;           // -ln p_test(next token)
  double base_nll = 0.0;      // -ln p_base(next token)
  double kld = 0.0;           // KL(base || test) over the vocabulary, nats
  double delta_p = 0.0;       // p_test(next token) - p_base(next token)
  bool same_top1 = false;     // argmax(test) == argmax(base) (lowest id on ties)
};

// Scores one position from its logits rows ([vocab_size] each). `base_logits` may be null (no
// comparison: only nll is set). Computed in double.
TokenScore ScoreToken(const float* test_logits, const float* base_logits, int64_t vocab_size,
                      TokenId next_token);

// KL-divergence figures of a run against its base (present only with a base run).
struct KldSummary {
  double base_perplexity = 0.0;
  double ln_ppl_ratio = 0.0;         // mean(nll - base_nll) = ln(PPL_test / PPL_base)
  double ln_ppl_ratio_stderr = 0.0;
  double mean_kld = 0.0;
  double kld_stderr = 0.0;           // standard error of mean_kld
  // Percentiles as base/percentile.h defines them (linear interpolation, as llama.cpp).
  double median_kld = 0.0;
  double p90_kld = 0.0;
  double p99_kld = 0.0;
  double p999_kld = 0.0;
  double max_kld = 0.0;
  double top1_agreement = 0.0;       // fraction of positions with the same argmax
  double top1_agreement_stderr = 0.0;
  double mean_delta_p = 0.0;         // mean of p_test - p_base of the next token
  double rms_delta_p = 0.0;
};

struct PerplexityResult {
  int64_t ctx_tokens = 0;
  int64_t batch_tokens = 0;
  int64_t num_text_tokens = 0;  // tokens of the whole text
  int64_t num_windows = 0;
  int64_t num_scored_tokens = 0;
  double mean_nll = 0.0;
  double perplexity = 0.0;
  double perplexity_stderr = 0.0;  // PPL x standard error of mean_nll (delta method)
  std::optional<KldSummary> kld;   // with a base run
  // KV tokens each scored position attended (its slots, its own included, mean over layers)
  // in the run under test, mean over scored positions: (3 ctx - 2) / 4 or so without eviction, about the
  // budget with streaming and h2o, budget + the tokens since the compression with snapkv.
  double mean_kv_tokens_kept = 0.0;
  double seconds = 0.0;            // forward passes and scoring, both runs
};

// Summary of the scores of every scored position (not empty). With `has_base`, fills kld.
PerplexityResult SummarizeScores(const std::vector<TokenScore>& scores, bool has_base);

// After each window: windows done, windows in all, and the result so far.
using PerplexityProgressFn =
    std::function<void(int64_t window, int64_t num_windows, const PerplexityResult& so_far)>;

// Evaluates `tokens` (the whole tokenized text) on `test_kv`, and when `base_kv` is not null
// also on it, comparing the two. Each window is one scoring request (RequestInput with
// max_tokens 0 and prompt_logits_start ctx/2) through an EngineCore of its cache
// (WindowEngineOptions), so the paged path, the scheduler's chunking into passes of
// batch_tokens and the KV cache manager's blocks are the engine's own; every block returns
// after each window (also on error). Each cache must hold one window (ctx_tokens tokens) with
// max_model_len >= ctx_tokens (StreamingLLM, whose positions stay within the cache, only needs
// its window to fit). Errors (Status) for ctx_tokens < 3, batch_tokens < 0, a text
// shorter than one window or with ids outside the vocabulary, and whatever the forward pass
// reports.
StatusOr<PerplexityResult> RunPerplexity(LlamaModel& model, const std::vector<TokenId>& tokens,
                                         const PerplexityOptions& options, PagedKvCache* test_kv,
                                         PagedKvCache* base_kv, ThreadPool* pool,
                                         const PerplexityProgressFn& on_window = {});

// The engine settings of one window's cache: one sequence of at most ctx_tokens, computed in
// passes of batch_tokens (chunked prefill), no prefix caching (windows share no prefix, and
// the base and test runs must compute every position).
EngineCoreOptions WindowEngineOptions(int64_t ctx_tokens, int64_t batch_tokens);

// The KV budget of a cache for one window of ctx tokens in passes of `batch`: `config` with
// max_model_len = ctx and, unless --kv-cache-memory was given (memory_bytes > 0), exactly the
// blocks of one window. *exact says which.
StatusOr<KvCacheConfig> WindowKvCacheConfig(const LlamaModel& model, KvCacheConfig config,
                                            int64_t ctx, int64_t batch, bool* exact);

// What the command prints: a result and what it was measured on.
struct PerplexityReport {
  PerplexityResult result;
  std::string model;
  std::string text_file;
  std::string kv_cache_dtype;       // of the run under test
  std::string base_kv_cache_dtype;  // "f32" with --kl-divergence, else empty
  int64_t kv_bytes_per_token = 0;   // of the test cache, all layers, scales included
  int64_t base_kv_bytes_per_token = 0;  // of the base cache (0 without one)
  int threads = 0;
  int64_t kv_clipped_values = 0;    // fp8 values of the test cache that saturated
  KvEvictionPolicy kv_policy;       // of the run under test
};

// A readable summary (text) or one JSON object (KLD fields null without a base run).
std::string FormatPerplexityText(const PerplexityReport& report);
std::string FormatPerplexityJson(const PerplexityReport& report);

}  // namespace kvserve::eval
