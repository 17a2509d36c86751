// `kvserve generate`: load a model and run one prompt through an EngineCore (the prompt in one
// batched forward pass by default, then one token per step), or with --prompts-file many
// prompts through the Engine at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/kv_eviction_flags.h"
#include "cli/kv_flags.h"
#include "runtime/engine_policy.h"
#include "sampling/sampler.h"

namespace kvserve::cli {

// Command-line options of `kvserve generate`.
struct GenerateOptions {
  std::string model_path;  // empty: the built-in default model
  std::string tokenizer_path;
  std::string mla_attention = "absorbed";  // MLA models: absorbed (latent cache) or expanded
  std::string prompt;
  std::string prompt_ids;            // hidden: space/comma-separated ids used as-is
  int64_t random_prompt_tokens = 0;  // hidden: a deterministic pseudo-random prompt (benchmarks)
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  int threads = 0;  // 0: ThreadPool::HardwareThreads()
  std::string output_format = "text";
  bool no_bos = false;
  bool ignore_eos = false;  // hidden: generate exactly -n tokens (benchmarks)
  int warmup_runs = 0;      // --warmup: untimed runs of the prompt (2 tokens) before the timed one
  KvCacheFlags kv;
  KvEvictionFlags eviction;  // --kv-eviction ...
  // --prompts-file: one prompt per line (empty lines skipped), all run through the engine
  // together; reports throughput, time to first token and time per output token.
  std::string prompts_file;
  // Engine flags (vLLM names and defaults; cli/scheduler_flags.h); used with --prompts-file.
  SchedulerFlags scheduler;
  // Structured output (at most one; llama.cpp's flag names): a GBNF file, a JSON schema (its
  // text, or @FILE), a regular expression.
  std::string grammar_file;
  std::string json_schema;
  std::string regex;
};

// Runs the whole command; returns the process exit status. Errors print "error: ...".
int RunGenerateCommand(const GenerateOptions& options);

}  // namespace kvserve::cli
