// `kvserve generate`: load a model, prefill the prompt in one batched forward pass, then decode
// token by token with the Sampler. The generation loop is a function of its own so that tests
// can drive it in-process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "cli/kv_flags.h"
#include "kv/kv_stats.h"
#include "model/llama.h"
#include "runtime/engine_policy.h"
#include "runtime/kv_cache_config.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {

struct GenerationRequest {
  std::vector<TokenId> prompt_ids;  // BOS included where wanted; must not be empty
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_bos = false;  // llama2.c run.c: a sampled BOS ends the text
  bool ignore_eos = false;   // benchmarks: never stop before max_new_tokens (as vLLM's)
};

struct GenerationResult {
  std::vector<TokenId> output_ids;  // includes the stop token when finish_reason == "stop"
  std::string finish_reason;        // "stop" (end-of-generation token) or "length"
  double prefill_seconds = 0.0;     // the batched prompt forward pass + first sample
  double decode_seconds = 0.0;      // every later forward pass + sample
  int64_t num_decode_steps = 0;     // forward passes after the prefill
  KvMemoryStats kv_stats;           // the paged cache just before the sequence's blocks return
};

// Runs the prompt as one batch, then one token per forward pass, through the paged KV cache
// `kv` (blocks are allocated as the sequence grows and all returned at the end, also on
// error). Stops at an end-of-generation token of `tokenizer` (if any), at BOS when
// stop_at_bos, after max_new_tokens, or when kv->max_model_len is reached. `on_token`
// (optional) sees each sampled token as soon as it exists. Fails when the prompt is empty or
// longer than max_model_len, or when the cache runs out of blocks.
StatusOr<GenerationResult> RunGeneration(LlamaModel& model, const Tokenizer* tokenizer,
                                         const GenerationRequest& request, PagedKvCache* kv,
                                         ThreadPool* pool,
                                         const std::function<void(TokenId)>& on_token = {});

// Command-line options of `kvserve generate`.
struct GenerateOptions {
  std::string model_path;  // empty: the built-in default model
  std::string tokenizer_path;
  std::string prompt;
  std::string prompt_ids;            // hidden: space/comma-separated ids used as-is
  int64_t random_prompt_tokens = 0;  // hidden: a deterministic pseudo-random prompt (benchmarks)
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  int threads = 0;  // 0: ThreadPool::HardwareThreads()
  std::string output_format = "text";
  bool no_bos = false;
  bool ignore_eos = false;  // hidden: generate exactly -n tokens (benchmarks)
  KvCacheFlags kv;
  // --prompts-file: one prompt per line (empty lines skipped), all run through the engine
  // together; reports throughput, time to first token and time per output token.
  std::string prompts_file;
  // Engine flags (vLLM names and defaults; cli/scheduler_flags.h); used with --prompts-file.
  SchedulerFlags scheduler;
};

// Runs the whole command; returns the process exit status. Errors print "error: ...".
int RunGenerateCommand(const GenerateOptions& options);

}  // namespace kvserve::cli
