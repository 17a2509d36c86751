// Many requests through an Engine at once, each gathered whole (vLLM's offline LLM.generate):
// what `generate --prompts-file` runs, with time to first token and time per output token per
// request and the run's throughput. Blocking; call from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"

namespace kvserve {

// One request's whole output.
struct BatchOutput {
  std::vector<TokenId> token_ids;  // the stop token included when finish_reason is kStop
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                    // with kError
  int64_t num_cached_prompt_tokens = 0;  // served from the prefix cache
  double ttft_ms = 0.0;  // submit -> first token (0 without tokens)
  double tpot_ms = 0.0;  // first -> last token over the tokens after the first (0 for < 2)
};

struct BatchSummary {
  int64_t num_requests = 0;
  int64_t total_prompt_tokens = 0;
  int64_t total_output_tokens = 0;
  double elapsed_s = 0.0;  // first submit -> last request finished
  double output_tokens_per_s = 0.0;
  double mean_ttft_ms = 0.0;  // over requests with a token
  double mean_tpot_ms = 0.0;  // over requests with two or more
  double prefix_cache_hit_rate = 0.0;  // prompt tokens served from the cache / looked up
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_failed = 0;  // ended with kError or kAbort
  int64_t max_num_running = 0;  // the most requests running at once (EngineStats)
};

struct BatchResult {
  std::vector<BatchOutput> outputs;  // in input order
  BatchSummary summary;
};

// Submits every input (the clock starts at the first submit) and waits for all of them. An
// input the engine refuses is an InvalidArgument naming its index; the ones submitted before
// it are aborted (their streams drop).
StatusOr<BatchResult> GenerateBatch(Engine& engine, std::vector<RequestInput> inputs);

// KV blocks that `inputs` can touch at most (each prompt + max_tokens), capped at the cache's
// blocks: what to commit before timing a batch so that first-touch page faults are not timed.
int64_t BatchKvBlocks(const PagedKvCache& kv, const std::vector<RequestInput>& inputs);

}  // namespace kvserve
