// The KV cache capacity and cost planner (`kvserve plan`). From a model's geometry (a
// PlanModel: a built-in preset, a Hugging Face config.json or model folder, or a GGUF file) it
// computes the KV bytes per token and per request for a context length and KV dtype, and, for
// a memory budget, how many requests fit concurrently with paged KV blocks vs with a
// contiguous max-length reservation per request; and renders the report as text or JSON. All
// byte counts come from KvCacheSpec (kv/kv_spec.h), the same arithmetic the block pool and the
// KV storage use. Plain functions over plain value types, no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/kv_spec.h"
#include "plan/plan_model.h"
#include "tensor/dtype.h"

namespace kvserve::plan {

// What to plan for (the flags of `kvserve plan` of the same names).
struct PlanOptions {
  int64_t context_tokens = 0;      // 0: max_model_len
  int64_t max_model_len = 0;       // 0: the model's max context
  int64_t avg_context_tokens = 0;  // 0: not asked
  std::string kv_cache_dtype = "auto";
  std::string memory;           // total memory for weights + KV ("80GiB"); "" = none
  std::string kv_cache_memory;  // KV budget alone, instead of --memory
  std::string weights_dtype;    // "" = the model's stored weights
  int64_t block_size = 16;
  // Token eviction (--kv-budget): the KV tokens each request keeps once compressed; 0: none.
  int64_t kv_budget_tokens = 0;
};

// The figures for one KV dtype. Request counts are -1 without a memory budget.
struct PlanDtypeRow {
  DType dtype = DType::kBF16;
  int64_t bytes_per_token = 0;
  int64_t fixed_scale_bytes = 0;
  int64_t kv_bytes_per_request = 0;  // context_tokens * bytes_per_token
  int64_t num_blocks = -1;
  int64_t requests_paged = -1;
  int64_t requests_contiguous = -1;
  int64_t requests_avg_context = -1;  // with --avg-context
  int64_t requests_evicted = -1;      // with --kv-budget
};

struct PlanResult {
  PlanModel model;
  KvCacheSpec spec;  // the chosen dtype
  bool kv_dtype_auto = false;
  int64_t context_tokens = 0;
  int64_t max_model_len = 0;
  int64_t avg_context_tokens = 0;
  int64_t bytes_per_token = 0;
  int64_t bytes_per_block = 0;
  int64_t fixed_scale_bytes = 0;             // fp8: once per cache, not per token
  int64_t kv_bytes_per_request = 0;          // context_tokens * bytes_per_token
  int64_t blocks_per_request = 0;            // ceil(context_tokens / block_size)
  int64_t paged_bytes_per_request = 0;       // blocks_per_request * bytes_per_block
  int64_t contiguous_bytes_per_request = 0;  // max_model_len * bytes_per_token
  // With --memory or --kv-cache-memory (else has_budget is false and these are 0 / -1).
  bool has_budget = false;
  int64_t memory_bytes = 0;  // --memory (0 with --kv-cache-memory)
  int64_t weight_bytes = 0;  // subtracted from memory_bytes
  std::string weights_note;  // "bf16", "fp8 (--weights-dtype)", ...
  int64_t kv_budget_bytes = 0;
  int64_t num_blocks = -1;
  int64_t requests_paged = -1;
  int64_t requests_contiguous = -1;
  int64_t requests_avg_context = -1;
  // With --kv-budget: the slots a compressed request holds at most, min(context, budget +
  // block_size) (StreamingLLM and H2O compact when one block of slack fills; SnapKV and
  // PyramidKV keep the budget plus their output tokens), its blocks, and how many fit.
  int64_t kv_budget_tokens = 0;
  int64_t evicted_tokens_per_request = 0;
  int64_t evicted_blocks_per_request = 0;
  int64_t requests_evicted = -1;
  std::vector<PlanDtypeRow> dtypes;  // f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8
};

// The plan for `model` under `options`. Errors name the flag at fault.
StatusOr<PlanResult> ComputePlan(const PlanModel& model, const PlanOptions& options);

// The report: a few aligned lines and a table across dtypes (text), or one JSON object.
std::string FormatPlanText(const PlanResult& plan);
std::string FormatPlanJson(const PlanResult& plan);

}  // namespace kvserve::plan
