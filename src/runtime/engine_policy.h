// Engine settings that `serve`, `generate --prompts-file` and `sim` derive the same way: the
// scheduler flags as the user gives them (vLLM's names and defaults; cli/scheduler_flags.h
// registers them), their resolution into a SchedulerConfig (the step token budget's
// default), and the token ids that end generation.
//
// Plain data and functions; no state.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/llama.h"
#include "runtime/engine_core.h"
#include "runtime/kv_cache_config.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// The scheduler flags, unresolved: 0 means "the default" where a comment says so.
struct SchedulerFlags {
  int64_t max_num_seqs = 256;          // --max-num-seqs: sequences per step
  int64_t max_num_batched_tokens = 0;  // --max-num-batched-tokens; 0: StepTokenBudget's default
  bool enable_chunked_prefill = true;  // --enable-chunked-prefill / --no-enable-chunked-prefill
  // --enable-prefix-caching / --no-enable-prefix-caching: for EngineOptions or the
  // KvCacheManager (not part of SchedulerConfig).
  bool enable_prefix_caching = true;
  int64_t long_prefill_token_threshold = 0;           // --long-prefill-token-threshold; 0: no cap
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;  // --scheduling-policy fcfs|priority
};

// InvalidArgument naming the flag: --max-num-seqs < 1, --max-num-batched-tokens < 0 or (when
// given) below --max-num-seqs, --long-prefill-token-threshold < 0. Needs no model.
Status ValidateSchedulerFlags(const SchedulerFlags& flags);

// The step token budget: `flag` (--max-num-batched-tokens) when > 0, else vLLM's default,
// max(2048, max_num_seqs), raised to max_model_len without chunked prefill (a prompt is then
// computed in one step).
int64_t StepTokenBudget(int64_t flag, int64_t max_num_seqs, bool enable_chunked_prefill,
                        int64_t max_model_len);

// ValidateSchedulerFlags, then the SchedulerConfig of the flags for sequences of at most
// `max_model_len` tokens (budget from StepTokenBudget), checked with
// SchedulerConfig::Validate. model_namespace and eos_token_ids are the caller's to fill.
StatusOr<SchedulerConfig> ResolveSchedulerConfig(const SchedulerFlags& flags,
                                                 int64_t max_model_len);

// Token ids that end generation: the tokenizer's end-of-generation ids, plus BOS for llama2.c
// checkpoints (their stories end with BOS).
std::vector<TokenId> EndOfGenerationIds(const Tokenizer& tokenizer, int64_t vocab_size,
                                        bool llama2c);

// What a command asks of the engine: its resolved --kv-* flags, its scheduler flags, and how
// to size and batch when the user says nothing.
struct EngineConfigOptions {
  KvCacheConfig kv;         // from ResolveKvCacheFlags
  SchedulerFlags scheduler;
  // Without a KV budget flag the cache holds min(this, --max-num-seqs) max_model_len
  // sequences (serve: --kv-default-sequences; generate --prompts-file: the prompts).
  int64_t default_num_sequences = 1;
  // The step budget's default is max_model_len instead of StepTokenBudget's (single-prompt
  // generate: the whole prompt in one forward pass).
  bool prompt_in_one_pass = false;
};

// The cache's config and the engine's settings, derived the same way for every command:
// max_model_len from --max-model-len or the model's context; the scheduler config
// (ResolveSchedulerConfig); the cache's sizing and workspace rows from it; the prefix-cache
// namespace (the model's name); end-of-generation ids from `tokenizer` (none without one),
// BOS included for llama2.c checkpoints. InvalidArgument naming the flag for bad values.
struct EngineConfig {
  KvCacheConfig kv;
  EngineCoreOptions core;
};
StatusOr<EngineConfig> ResolveEngineConfig(const EngineConfigOptions& options,
                                           const LlamaModel& model, const Tokenizer* tokenizer);

}  // namespace kvserve
