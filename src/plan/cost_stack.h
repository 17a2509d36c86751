// The stacked cost table (`kvserve plan --stack`): what each KV cache optimization, added one
// on top of the other, does to the requests a deployment holds, the latency they see and the
// price of a million output tokens. Rows, cumulative:
//   contiguous <dtype>  every request reserves --context tokens of KV (a pre-paging engine)
//   + paged blocks      a request holds the blocks of its prompt and half its output
//   + prefix cache      the shared part of prompts (--prefix-share, or a trace's hit rate) is
//                       stored once and not recomputed
//   + fp8 KV            fp8_e4m3 instead of the baseline dtype
//   + token eviction    at most --kv-budget tokens (+ one block) kept per request
//   + latent KV (MLA models only; the rows above store MLA's keys and values expanded per head,
//                       as an engine without MLA support does)
// Each row is timed in the steady state by the cost model (cost/step_time.h): B requests
// (as many as the KV memory holds, at most --max-num-seqs) decode at their mean context, each
// step also computing its share of the prompts those requests need (B x uncached prompt /
// output tokens, as chunked prefill mixes them in); TPOT is that step, output tokens/s is B
// over it, TTFT is a prompt's uncached tokens in chunks of (--max-num-batched-tokens - B)
// beside the batch's decodes, and $ per million output tokens is the devices' price over
// the output rate. Capacities come from ComputePlan (the same bytes per token as `plan`).
//
// Plain functions over plain value types; no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cost/hardware.h"
#include "plan/plan_model.h"

namespace kvserve::plan {

struct StackOptions {
  int64_t context_tokens = 0;  // --context: the longest request (0: the model's maximum)
  // Mean prompt and output tokens per request (0: context / 2 and min(512, context / 8)).
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  // Fraction of prompt tokens found in the prefix cache, and where it comes from.
  double prefix_share = 0.0;
  std::string prefix_source = "--prefix-share";
  int64_t kv_budget_tokens = 0;  // the eviction row's budget (0: context / 8, at least 256)
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t block_size = 16;
  int tensor_parallel = 0;  // 0: the fewest devices (a power of 2) that hold the weights + 1 request
  double memory_utilization = 0.9;
  std::string baseline_dtype = "auto";  // --kv-cache-dtype of the baseline (auto: the hardware's)
};

struct StackRow {
  std::string name;        // "contiguous bf16", "+ paged blocks", ...
  std::string assumption;  // what the row assumes, in a few words
  DType kv_dtype = DType::kBF16;
  int64_t kv_tokens_per_request = 0;  // the KV tokens one request holds
  int64_t kv_bytes_per_request = 0;
  int64_t concurrent_requests = 0;  // 0: not one fits
  std::string bound;                // "KV memory" or "--max-num-seqs"
  double prefill_tokens_per_request = 0.0;  // computed (not found in the cache)
  double output_tokens_per_s = 0.0;
  double ttft_ms = 0.0;
  double tpot_ms = 0.0;
  double cost_per_million_output_tokens = 0.0;
  double factor = 0.0;  // the baseline's cost over this row's (throughput ratio with no price)
};

struct StackResult {
  PlanModel model;
  cost::HardwareProfile hardware;
  int tensor_parallel = 1;
  std::string tensor_parallel_note;  // how it was chosen
  int64_t memory_bytes = 0;          // utilization x devices' memory
  int64_t kv_budget_bytes = 0;       // memory_bytes - weights
  StackOptions options;              // with the defaults resolved
  std::vector<StackRow> rows;
};

// InvalidArgument naming the flag for options that cannot work (a context beyond the model's,
// a share outside [0, 1], a model whose weights do not fit, ...).
StatusOr<StackResult> ComputeCostStack(const PlanModel& model,
                                       const cost::HardwareProfile& hardware,
                                       const StackOptions& options);

// `plan --stack --plot`: $ per million output tokens and concurrent requests per row, as
// bars annotated with the factor; an SVG document.
std::string StackPlotSvg(const StackResult& stack);

std::string FormatStackText(const StackResult& stack);
// {"model", "hardware", "tensor_parallel", ..., "rows": [{"name", "concurrent_requests",
// "output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_per_million_output_tokens", "factor",
// ...}]}
std::string FormatStackJson(const StackResult& stack);

}  // namespace kvserve::plan
