// `kvserve eval perplexity`: the command line over the eval library (src/eval/perplexity.h:
// windows, scoring, KL divergence against an f32-KV run, the report).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/kv_eviction_flags.h"
#include "cli/kv_flags.h"

namespace kvserve::cli {

// The command line of `kvserve eval perplexity`.
struct EvalPerplexityOptions {
  std::string model_path;
  std::string tokenizer_path;  // overrides the model's vocabulary
  std::string text_file;
  int64_t ctx_tokens = 0;      // 0: 512, or the model's context if shorter
                               // (capped by --max-model-len)
  int64_t batch_tokens = 0;    // 0: ctx_tokens
  int64_t max_windows = 0;     // 0: all
  bool kl_divergence = false;
  int threads = 0;             // 0: ThreadPool::HardwareThreads()
  std::string format = "text";  // text | json
  KvCacheFlags kv;             // without --kv-cache-memory each cache holds exactly one window
  KvEvictionFlags eviction;    // of the run under test (the --kl-divergence base keeps all)
};

// Runs the whole command; returns the process exit status. Errors print "error: ...".
int RunEvalPerplexityCommand(const EvalPerplexityOptions& options);

}  // namespace kvserve::cli
