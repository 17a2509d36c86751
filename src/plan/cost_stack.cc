// The stacked cost table (see cost_stack.h).
#include "plan/cost_stack.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/str_format.h"
#include "cost/step_time.h"
#include "plan/plan.h"
#include "plot/svg_chart.h"

namespace kvserve::plan {
namespace {

using nlohmann::json;

// MLA's keys and values stored per head, head_dim wide (values padded to the key's width), as
// an engine without MLA support caches them; attention then runs per head at that width.
PlanModel ExpandedMla(const PlanModel& m) {
  PlanModel e = m;
  e.kv_layout = KvLayout::kSeparateKv;
  e.num_kv_heads = m.num_heads;
  e.kv_lora_rank = 0;
  e.qk_rope_head_dim = 0;
  e.shape.attention_qk_dim = m.head_dim;
  e.shape.attention_v_dim = m.head_dim;
  return e;
}

struct Context {
  const cost::HardwareProfile* hardware = nullptr;
  StackOptions o;  // defaults resolved
  int tensor_parallel = 1;
  int64_t memory_bytes = 0;
};

// What one row changes.
struct Variant {
  std::string name;
  std::string assumption;
  const PlanModel* model = nullptr;
  DType dtype = DType::kBF16;
  bool contiguous = false;
  double prefix_share = 0.0;
  int64_t eviction_budget_tokens = 0;
};

PlanOptions BudgetOptions(const Context& c, DType dtype, int64_t context_tokens) {
  PlanOptions po;
  po.context_tokens = context_tokens;
  po.max_model_len = c.o.context_tokens;
  po.kv_cache_dtype = DTypeName(dtype);
  po.memory = std::to_string(c.memory_bytes);
  po.block_size = c.o.block_size;
  return po;
}

// The steady-state step: `batch` decodes at the mean context, plus the prompt tokens the batch
// needs per output token, as chunks of whole prompts (each at its mean offset) so that their
// causal attention is a prompt's, not one long sequence's.
std::vector<cost::StepSeq> SteadyStep(int64_t batch, int64_t mean_context, int64_t cached_prefix,
                                      int64_t prefill_per_request, double prefill_per_step) {
  std::vector<cost::StepSeq> seqs(static_cast<size_t>(batch),
                                  cost::StepSeq{mean_context, 1, true});
  int64_t remaining = std::llround(prefill_per_step);
  while (remaining > 0) {
    const int64_t size = std::min(prefill_per_request, remaining);
    seqs.push_back({cached_prefix + (prefill_per_request - size) / 2, size, false});
    remaining -= size;
  }
  return seqs;
}

StatusOr<StackRow> TimeRow(const Variant& v, const Context& c) {
  const StackOptions& o = c.o;
  const int64_t prompt = o.prompt_tokens;
  const int64_t output = o.output_tokens;
  const int64_t cached = static_cast<int64_t>(std::floor(v.prefix_share * static_cast<double>(prompt)));
  const int64_t computed = std::max<int64_t>(1, prompt - cached);  // the last token always runs
  // Tokens a request holds on average: its prompt and half its output; shared prefix blocks
  // are held once for all (amortised to nothing); eviction caps it at budget + one block.
  int64_t held = (prompt - cached) + output / 2;
  if (v.eviction_budget_tokens > 0) held = std::min(held, v.eviction_budget_tokens + o.block_size);
  held = std::max<int64_t>(held, 1);
  StackRow row;
  row.name = v.name;
  row.assumption = v.assumption;
  row.kv_dtype = v.dtype;
  row.prefill_tokens_per_request = static_cast<double>(computed);
  KV_ASSIGN_OR_RETURN(
      const PlanResult plan,
      ComputePlan(*v.model, BudgetOptions(c, v.dtype, v.contiguous ? o.context_tokens : held)));
  const int64_t fits = v.contiguous ? plan.requests_contiguous : plan.requests_paged;
  row.kv_tokens_per_request = v.contiguous ? o.context_tokens : plan.blocks_per_request * o.block_size;
  row.kv_bytes_per_request =
      v.contiguous ? plan.contiguous_bytes_per_request : plan.paged_bytes_per_request;
  row.concurrent_requests = std::min(fits, o.max_num_seqs);
  row.bound = fits > o.max_num_seqs ? "--max-num-seqs" : "KV memory";
  if (row.concurrent_requests <= 0) return row;
  KV_ASSIGN_OR_RETURN(const cost::Deployment d,
                      MakeDeployment(*v.model, plan.spec, *c.hardware, c.tensor_parallel,
                                     v.eviction_budget_tokens));
  const int64_t batch = row.concurrent_requests;
  const int64_t mean_context = prompt + output / 2;
  const double prefill_per_step =
      static_cast<double>(batch) * static_cast<double>(computed) / static_cast<double>(output);
  const cost::StepCost steady = cost::ComputeStepCost(
      d, SteadyStep(batch, mean_context, cached, computed, prefill_per_step));
  row.tpot_ms = steady.seconds * 1e3;
  row.output_tokens_per_s = static_cast<double>(batch) / steady.seconds;
  const int64_t chunk = std::clamp<int64_t>(o.max_num_batched_tokens - batch, 1, computed);
  const int64_t chunk_steps = (computed + chunk - 1) / chunk;
  const cost::StepCost chunk_step = cost::ComputeStepCost(
      d, SteadyStep(batch, mean_context, cached, chunk, static_cast<double>(chunk)));
  row.ttft_ms = static_cast<double>(chunk_steps) * chunk_step.seconds * 1e3;
  const double devices_per_hour = c.hardware->price_per_hour * c.tensor_parallel;
  row.cost_per_million_output_tokens = devices_per_hour / 3600.0 / row.output_tokens_per_s * 1e6;
  return row;
}

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

StatusOr<StackResult> ComputeCostStack(const PlanModel& model, const cost::HardwareProfile& hw,
                                       const StackOptions& options) {
  KV_RETURN_IF_ERROR(ValidatePlanModel(model).WithContext("model " + model.name));
  KV_RETURN_IF_ERROR(cost::ValidateHardwareProfile(hw));
  Context c;
  c.hardware = &hw;
  c.o = options;
  StackOptions& o = c.o;
  if (o.context_tokens == 0) o.context_tokens = model.max_context_tokens;
  if (o.context_tokens < 2 || o.context_tokens > model.max_context_tokens) {
    return InvalidArgumentError("--context must be in [2, " + Num(model.max_context_tokens) +
                                "] for " + model.name + ", got " + Num(o.context_tokens));
  }
  if (o.output_tokens == 0) o.output_tokens = std::clamp<int64_t>(o.context_tokens / 8, 1, 512);
  if (o.prompt_tokens == 0) o.prompt_tokens = o.context_tokens / 2;
  if (o.prompt_tokens < 1 || o.output_tokens < 1 ||
      o.prompt_tokens + o.output_tokens > o.context_tokens) {
    return InvalidArgumentError(StrFormat(
        "--avg-prompt %lld + --avg-output %lld must be at least 1 each and fit --context %lld",
        static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.output_tokens),
        static_cast<long long>(o.context_tokens)));
  }
  if (!(o.prefix_share >= 0.0 && o.prefix_share <= 1.0)) {
    return InvalidArgumentError("--prefix-share must be in [0, 1]");
  }
  if (o.kv_budget_tokens == 0) o.kv_budget_tokens = std::max<int64_t>(256, o.context_tokens / 8);
  if (o.kv_budget_tokens < 0) return InvalidArgumentError("--kv-budget must be >= 0");
  if (o.max_num_seqs < 1) return InvalidArgumentError("--max-num-seqs must be >= 1");
  if (o.max_num_batched_tokens < 1) {
    return InvalidArgumentError("--max-num-batched-tokens must be >= 1");
  }
  if (!(o.memory_utilization > 0.0 && o.memory_utilization <= 1.0)) {
    return InvalidArgumentError("--memory-utilization must be in (0, 1]");
  }
  StatusOr<DType> baseline = ParseKvCacheDtype(o.baseline_dtype, hw.compute_dtype);
  if (!baseline.ok()) return baseline.status().WithContext("--kv-cache-dtype");
  const bool mla = model.kv_layout == KvLayout::kMlaLatent;
  const PlanModel expanded = mla ? ExpandedMla(model) : model;

  StackResult r;
  r.model = model;
  r.hardware = hw;
  // Devices: as given, else the fewest (1, 2, 4, ...) whose memory holds the weights and one
  // contiguous baseline request.
  const auto memory_for = [&](int devices) {
    return static_cast<int64_t>(o.memory_utilization * static_cast<double>(hw.memory_bytes) *
                                devices);
  };
  if (o.tensor_parallel > 0) {
    c.tensor_parallel = o.tensor_parallel;
    r.tensor_parallel_note = "--tensor-parallel";
  } else {
    c.tensor_parallel = 0;
    for (int devices = 1; devices <= 64; devices *= 2) {
      c.memory_bytes = memory_for(devices);
      if (c.memory_bytes <= model.weight_bytes) continue;
      StatusOr<PlanResult> p = ComputePlan(expanded, BudgetOptions(c, *baseline, o.context_tokens));
      if (p.ok() && p->requests_contiguous >= 1) {
        c.tensor_parallel = devices;
        break;
      }
    }
    if (c.tensor_parallel == 0) {
      return InvalidArgumentError("the weights of " + model.name + " and one " +
                                  Num(o.context_tokens) + "-token request do not fit 64 x " +
                                  hw.name + "; give --tensor-parallel");
    }
    r.tensor_parallel_note = "the fewest devices (1, 2, 4, ...) that hold the weights and one "
                             "contiguous " + Num(o.context_tokens) + "-token request";
  }
  c.memory_bytes = memory_for(c.tensor_parallel);
  if (c.memory_bytes <= model.weight_bytes) {
    return InvalidArgumentError("the weights of " + model.name + " do not fit " +
                                Num(c.tensor_parallel) + " x " + hw.name);
  }
  r.tensor_parallel = c.tensor_parallel;
  r.memory_bytes = c.memory_bytes;
  r.kv_budget_bytes = c.memory_bytes - model.weight_bytes;

  const std::string base_name = DTypeName(*baseline);
  const DType fp8 = DType::kFp8E4M3;
  std::vector<Variant> variants;
  variants.push_back({"contiguous " + base_name,
                      "each request reserves " + Num(o.context_tokens) + " tokens of " + base_name +
                          " KV" + (mla ? " (MLA expanded per head)" : ""),
                      &expanded, *baseline, true, 0.0, 0});
  variants.push_back({"+ paged blocks",
                      Num(o.block_size) + "-token blocks for the prompt and half the output",
                      &expanded, *baseline, false, 0.0, 0});
  variants.push_back({"+ prefix cache",
                      StrFormat("%.0f%% of prompt tokens cached (%s), stored once",
                                100.0 * o.prefix_share, o.prefix_source.c_str()),
                      &expanded, *baseline, false, o.prefix_share, 0});
  variants.push_back({"+ fp8 KV", "fp8_e4m3 values, per-head scales", &expanded, fp8, false,
                      o.prefix_share, 0});
  variants.push_back({"+ token eviction",
                      "at most " + Num(o.kv_budget_tokens) + " + " + Num(o.block_size) +
                          " tokens kept per request, prefill included (StreamingLLM; "
                          "--kv-budget)",
                      &expanded, fp8, false, o.prefix_share, o.kv_budget_tokens});
  if (mla) {
    variants.push_back({"+ latent KV (MLA)",
                        Num(model.kv_lora_rank) + " latent + " + Num(model.qk_rope_head_dim) +
                            " rope values per token and layer",
                        &model, fp8, false, o.prefix_share, o.kv_budget_tokens});
  }
  for (const Variant& v : variants) {
    KV_ASSIGN_OR_RETURN(StackRow row, TimeRow(v, c));
    r.rows.push_back(std::move(row));
  }
  const StackRow& base = r.rows.front();
  for (StackRow& row : r.rows) {
    if (base.output_tokens_per_s <= 0 || row.output_tokens_per_s <= 0) continue;
    row.factor = hw.price_per_hour > 0
                     ? base.cost_per_million_output_tokens / row.cost_per_million_output_tokens
                     : row.output_tokens_per_s / base.output_tokens_per_s;
  }
  r.options = o;
  return r;
}

std::string StackPlotSvg(const StackResult& s) {
  plot::Panel cost, requests;
  cost.is_bar = requests.is_bar = true;
  cost.bar.title = "$ per million output tokens";
  cost.bar.y_label = StrFormat("USD (%d x %s at $%.2f/h)", s.tensor_parallel,
                               s.hardware.name.c_str(), s.hardware.price_per_hour);
  requests.bar.title = "Concurrent requests";
  requests.bar.y_label = "requests";
  for (const StackRow& r : s.rows) {
    cost.bar.bars.push_back({r.name, r.cost_per_million_output_tokens, StrFormat("%.1fx", r.factor)});
    requests.bar.bars.push_back({r.name, static_cast<double>(r.concurrent_requests),
                                 std::to_string(r.concurrent_requests)});
  }
  return plot::RenderSvg(StrFormat("%s, %lld-token context: the KV cache cost stack",
                                   s.model.name.c_str(),
                                   static_cast<long long>(s.options.context_tokens)),
                         {cost, requests});
}

std::string FormatStackText(const StackResult& s) {
  const StackOptions& o = s.options;
  std::string out = StrFormat(
      "%s on %d x %s (%s); %s of memory at %.2f utilisation, %s for KV after %s of weights\n",
      s.model.name.c_str(), s.tensor_parallel, s.hardware.name.c_str(),
      s.tensor_parallel_note.c_str(), FormatBytesDecimalAndBinary(static_cast<double>(s.memory_bytes)).c_str(),
      o.memory_utilization, FormatBytesDecimalAndBinary(static_cast<double>(s.kv_budget_bytes)).c_str(),
      FormatBytesDecimalAndBinary(static_cast<double>(s.model.weight_bytes)).c_str());
  out += StrFormat(
      "requests: up to %lld tokens, %lld prompt + %lld output on average; --max-num-seqs %lld, "
      "--max-num-batched-tokens %lld; $%.2f per device-hour (%s)\n\n",
      static_cast<long long>(o.context_tokens), static_cast<long long>(o.prompt_tokens),
      static_cast<long long>(o.output_tokens), static_cast<long long>(o.max_num_seqs),
      static_cast<long long>(o.max_num_batched_tokens), s.hardware.price_per_hour,
      s.hardware.price_note.empty() ? "--price-per-hour" : s.hardware.price_note.c_str());
  out += StrFormat("%-20s %12s %9s %14s %12s %10s %9s %12s %7s\n", "configuration", "KV/request",
                   "requests", "bound", "output tok/s", "TTFT ms", "TPOT ms", "$/M output", "factor");
  for (const StackRow& r : s.rows) {
    out += StrFormat("%-20s %12s %9lld %14s %12.0f %10.1f %9.1f %12.3f %6.1fx\n", r.name.c_str(),
                     HumanBytes(r.kv_bytes_per_request).c_str(),
                     static_cast<long long>(r.concurrent_requests), r.bound.c_str(),
                     r.output_tokens_per_s, r.ttft_ms, r.tpot_ms,
                     r.cost_per_million_output_tokens, r.factor);
  }
  out += "\nassumptions:\n";
  for (const StackRow& r : s.rows) out += "  " + r.name + ": " + r.assumption + "\n";
  out += "  every row: steady state at the concurrency shown; TPOT is a decode step that also "
         "computes the batch's share of prompts; TTFT is one prompt's uncached tokens in chunks "
         "beside the batch (no queueing)\n";
  return out;
}

std::string FormatStackJson(const StackResult& s) {
  const StackOptions& o = s.options;
  json rows = json::array();
  for (const StackRow& r : s.rows) {
    rows.push_back({{"name", r.name},
                    {"assumption", r.assumption},
                    {"kv_cache_dtype", DTypeName(r.kv_dtype)},
                    {"kv_tokens_per_request", r.kv_tokens_per_request},
                    {"kv_bytes_per_request", r.kv_bytes_per_request},
                    {"concurrent_requests", r.concurrent_requests},
                    {"bound", r.bound},
                    {"prefill_tokens_per_request", r.prefill_tokens_per_request},
                    {"output_tokens_per_s", r.output_tokens_per_s},
                    {"ttft_ms", r.ttft_ms},
                    {"tpot_ms", r.tpot_ms},
                    {"cost_per_million_output_tokens", r.cost_per_million_output_tokens},
                    {"factor", r.factor}});
  }
  const json j = {{"model", s.model.name},
                  {"hardware", s.hardware.name},
                  {"price_per_hour", s.hardware.price_per_hour},
                  {"tensor_parallel", s.tensor_parallel},
                  {"tensor_parallel_note", s.tensor_parallel_note},
                  {"memory_bytes", s.memory_bytes},
                  {"kv_budget_bytes", s.kv_budget_bytes},
                  {"context_tokens", o.context_tokens},
                  {"prompt_tokens", o.prompt_tokens},
                  {"output_tokens", o.output_tokens},
                  {"prefix_share", o.prefix_share},
                  {"prefix_source", o.prefix_source},
                  {"kv_budget_tokens", o.kv_budget_tokens},
                  {"max_num_seqs", o.max_num_seqs},
                  {"max_num_batched_tokens", o.max_num_batched_tokens},
                  {"rows", rows}};
  return j.dump(2) + "\n";
}

}  // namespace kvserve::plan
