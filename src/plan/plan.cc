// The KV capacity and cost planner: the plan and its report (see plan.h and docs/cli.md).
#include "plan/plan.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/str_format.h"

namespace kvserve::plan {
namespace {

// The KV dtypes of the table, in order.
constexpr DType kTableDtypes[] = {DType::kF32,     DType::kF16,     DType::kBF16,
                                  DType::kFp8E4M3, DType::kFp8E5M2, DType::kI8};

std::string Num(int64_t v) { return std::to_string(v); }

// "1 layer", "80 layers".
std::string Count(int64_t n, const char* noun) { return Num(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string Bytes(int64_t bytes) { return FormatBytesDecimalAndBinary(static_cast<double>(bytes)); }

int64_t SafeDiv(int64_t a, int64_t b) { return b <= 0 ? 0 : a / b; }

// {"q4_k": bytes, "q6_k": bytes, ...} largest first, or null when the files do not say.
nlohmann::ordered_json WeightBytesByTypeJson(const PlanModel& m) {
  if (m.weight_bytes_by_type.empty()) return nullptr;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [dtype, bytes] : m.weight_bytes_by_type) out[DTypeName(dtype)] = bytes;
  return out;
}

// a * b, or an error naming `what` when it does not fit in int64.
StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t p;
  if (__builtin_mul_overflow(a, b, &p)) {
    return InvalidArgumentError(std::string(what) + " overflows: the figures are too large");
  }
  return p;
}

struct Budget {
  bool has = false;
  int64_t kv_bytes = 0;
};

StatusOr<PlanDtypeRow> MakeRow(const PlanModel& m, DType dtype, int64_t block_size,
                               int64_t context_tokens, int64_t max_model_len,
                               int64_t avg_context_tokens, int64_t evicted_tokens,
                               const Budget& budget) {
  const KvCacheSpec spec = PlanKvCacheSpec(m, dtype, block_size);
  PlanDtypeRow row;
  row.dtype = dtype;
  row.bytes_per_token = spec.bytes_per_token();
  row.fixed_scale_bytes = spec.fixed_scale_bytes();
  KV_ASSIGN_OR_RETURN(row.kv_bytes_per_request,
                      CheckedMul(context_tokens, row.bytes_per_token, "KV bytes per request"));
  KV_ASSIGN_OR_RETURN(const int64_t contiguous,
                      CheckedMul(max_model_len, row.bytes_per_token, "max-length reservation"));
  KV_ASSIGN_OR_RETURN(const int64_t block_bytes,
                      CheckedMul(block_size, row.bytes_per_token, "bytes per block"));
  if (budget.has) {
    const int64_t usable = std::max<int64_t>(0, budget.kv_bytes - row.fixed_scale_bytes);
    row.num_blocks = usable / block_bytes;
    row.requests_paged = SafeDiv(row.num_blocks, spec.blocks_for_tokens(context_tokens));
    row.requests_contiguous = SafeDiv(usable, contiguous);
    if (avg_context_tokens > 0) {
      row.requests_avg_context =
          SafeDiv(row.num_blocks, spec.blocks_for_tokens(avg_context_tokens));
    }
    if (evicted_tokens > 0) {
      row.requests_evicted = SafeDiv(row.num_blocks, spec.blocks_for_tokens(evicted_tokens));
    }
  }
  return row;
}

// "2 (K, V) x 80 layers x 8 KV heads x 128 dims x 2 B".
std::string BytesPerTokenFormula(const KvCacheSpec& s) {
  std::string f;
  if (s.layout == KvLayout::kSeparateKv) {
    f = "2 (K, V) x " + Count(s.num_layers, "layer") + " x " + Num(s.num_kv_heads) +
        " KV heads x " + Num(s.head_dim) + " dims x " + Num(s.value_bytes()) + " B";
  } else {
    f = Count(s.num_layers, "layer") + " x (" + Num(s.latent_dim) + " latent + " + Num(s.rope_dim) +
        " rope) x " + Num(s.value_bytes()) + " B";
  }
  if (s.scales_per_token_per_layer() > 0) {
    f += " + " + Count(s.num_layers, "layer") + " x " + Num(s.scales_per_token_per_layer()) +
         " scales x " + Num(kKvScaleBytes) + " B";
  }
  return f;
}


// Weight dtypes --weights-dtype accepts: the KV dtypes (and their aliases) plus the GGML
// block types (q8_0, q4_0 ... q6_k: every parameter at that type's bits).
StatusOr<DType> ParseWeightsDtype(const std::string& name) {
  if (std::optional<DType> block = ParseDType(name); block && IsGgmlBlockType(*block)) {
    return *block;
  }
  StatusOr<DType> d = ParseKvCacheDtype(name, DType::kBF16);
  if (!d.ok() || name == "auto") {
    return InvalidArgumentError("unknown --weights-dtype '" + name +
                                "' (f32, f16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8, q8_0, q4_0, "
                                "q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k)");
  }
  return *d;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The plan.

StatusOr<PlanResult> ComputePlan(const PlanModel& model, const PlanOptions& o) {
  KV_RETURN_IF_ERROR(ValidatePlanModel(model).WithContext("model " + model.name));
  PlanResult r;
  r.model = model;
  r.kv_dtype_auto = o.kv_cache_dtype == "auto";
  KV_ASSIGN_OR_RETURN(const DType dtype, ParseKvCacheDtype(o.kv_cache_dtype, model.dtype));
  r.spec = PlanKvCacheSpec(model, dtype, o.block_size);
  KV_RETURN_IF_ERROR(r.spec.Validate());

  if (o.max_model_len < 0) {
    return InvalidArgumentError("--max-model-len must be positive, got " + Num(o.max_model_len));
  }
  r.max_model_len = o.max_model_len > 0 ? o.max_model_len : model.max_context_tokens;
  if (r.max_model_len <= 0) {
    return InvalidArgumentError(
        "the model does not state its maximum context; pass --max-model-len N");
  }
  if (r.max_model_len > kPlanMaxContextTokens) {
    return InvalidArgumentError("--max-model-len " + Num(r.max_model_len) + " is above " +
                                Num(kPlanMaxContextTokens));
  }
  if (o.context_tokens < 0) {
    return InvalidArgumentError("--context must be positive, got " + Num(o.context_tokens));
  }
  r.context_tokens = o.context_tokens > 0 ? o.context_tokens : r.max_model_len;
  if (r.context_tokens > r.max_model_len) {
    return InvalidArgumentError(
        "--context " + Num(r.context_tokens) + " exceeds the maximum model length " +
        Num(r.max_model_len) +
        (o.max_model_len > 0 ? std::string(" (--max-model-len)")
                             : " of " + model.name + " (pass --max-model-len to plan beyond it)"));
  }
  if (o.avg_context_tokens < 0 || o.avg_context_tokens > r.max_model_len) {
    return InvalidArgumentError("--avg-context must be in [1, " + Num(r.max_model_len) + "], got " +
                                Num(o.avg_context_tokens));
  }
  r.avg_context_tokens = o.avg_context_tokens;
  if (o.kv_budget_tokens < 0) {
    return InvalidArgumentError("--kv-budget must be >= 0 (0: no token eviction), got " +
                                Num(o.kv_budget_tokens));
  }
  r.kv_budget_tokens = o.kv_budget_tokens;
  if (o.kv_budget_tokens > 0) {
    r.evicted_tokens_per_request =
        std::min(r.context_tokens, o.kv_budget_tokens + o.block_size);
  }

  // Budget.
  Budget budget;
  if (!o.memory.empty() && !o.kv_cache_memory.empty()) {
    return InvalidArgumentError(
        "pass --memory (weights + KV) or --kv-cache-memory (KV alone), not both");
  }
  if (!o.weights_dtype.empty() && o.memory.empty()) {
    return InvalidArgumentError(
        "--weights-dtype needs --memory (it sizes the weights subtracted from it)");
  }
  if (!o.memory.empty()) {
    KV_ASSIGN_OR_RETURN(r.memory_bytes, ParseByteSize(o.memory));
    r.weight_bytes = model.weight_bytes;
    r.weights_note = model.weights_note;
    if (!o.weights_dtype.empty()) {
      KV_ASSIGN_OR_RETURN(const DType wd, ParseWeightsDtype(o.weights_dtype));
      if (model.num_parameters <= 0) {
        return InvalidArgumentError("the parameter count of " + model.name +
                                    " is unknown, so --weights-dtype cannot size its weights; "
                                    "use --kv-cache-memory for the KV budget alone");
      }
      r.weight_bytes = WeightBytesAt(model.num_parameters, wd);
      r.weights_note = std::string(DTypeName(wd)) + " (--weights-dtype)";
    }
    if (r.weight_bytes <= 0) {
      return InvalidArgumentError("the weight size of " + model.name +
                                  " is unknown; use --kv-cache-memory for the KV budget alone");
    }
    if (r.memory_bytes <= r.weight_bytes) {
      return InvalidArgumentError(
          "--memory " + o.memory + " = " + Bytes(r.memory_bytes) +
          " is not more than the weights of " + model.name + ": " + Bytes(r.weight_bytes) + " (" +
          r.weights_note +
          "), so nothing is left for the KV cache; give more memory, a smaller --weights-dtype "
          "(fp8, int8), or --kv-cache-memory for the KV budget alone");
    }
    r.kv_budget_bytes = r.memory_bytes - r.weight_bytes;
    budget.has = true;
  } else if (!o.kv_cache_memory.empty()) {
    KV_ASSIGN_OR_RETURN(r.kv_budget_bytes, ParseByteSize(o.kv_cache_memory));
    if (r.kv_budget_bytes <= 0) return InvalidArgumentError("--kv-cache-memory must be positive");
    budget.has = true;
  }
  r.has_budget = budget.has;
  budget.kv_bytes = r.kv_budget_bytes;

  for (DType d : kTableDtypes) {
    KV_ASSIGN_OR_RETURN(PlanDtypeRow row, MakeRow(model, d, o.block_size, r.context_tokens,
                                                  r.max_model_len, r.avg_context_tokens,
                                                  r.evicted_tokens_per_request, budget));
    r.dtypes.push_back(row);
  }
  KV_ASSIGN_OR_RETURN(const PlanDtypeRow chosen,
                      MakeRow(model, dtype, o.block_size, r.context_tokens, r.max_model_len,
                              r.avg_context_tokens, r.evicted_tokens_per_request, budget));
  r.bytes_per_token = chosen.bytes_per_token;
  r.bytes_per_block = r.spec.bytes_per_block();
  r.fixed_scale_bytes = chosen.fixed_scale_bytes;
  r.kv_bytes_per_request = chosen.kv_bytes_per_request;
  r.blocks_per_request = r.spec.blocks_for_tokens(r.context_tokens);
  KV_ASSIGN_OR_RETURN(r.paged_bytes_per_request,
                      CheckedMul(r.blocks_per_request, r.bytes_per_block, "paged request bytes"));
  r.contiguous_bytes_per_request = r.max_model_len * r.bytes_per_token;  // checked in MakeRow
  r.num_blocks = chosen.num_blocks;
  r.requests_paged = chosen.requests_paged;
  r.requests_contiguous = chosen.requests_contiguous;
  r.requests_avg_context = chosen.requests_avg_context;
  r.requests_evicted = chosen.requests_evicted;
  if (r.evicted_tokens_per_request > 0) {
    r.evicted_blocks_per_request = r.spec.blocks_for_tokens(r.evicted_tokens_per_request);
  }
  return r;
}

std::string FormatPlanText(const PlanResult& p) {
  const PlanModel& m = p.model;
  const KvCacheSpec& s = p.spec;
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };

  std::string geometry = m.architecture + ", " + Count(m.num_layers, "layer") + ", " +
                         Count(m.num_heads, "head") + ", ";
  if (m.kv_layout == KvLayout::kSeparateKv) {
    geometry += Num(m.num_kv_heads) + " KV heads, head dim " + Num(m.head_dim);
  } else {
    geometry += "MLA (kv_lora_rank " + Num(m.kv_lora_rank) + ", qk_rope_head_dim " +
                Num(m.qk_rope_head_dim) + ")";
  }
  line("model:    " + m.name + " (" + m.source + "): " + geometry + ", max context " +
       Num(m.max_context_tokens) + " tokens");
  if (m.weight_bytes > 0) {
    std::string params = m.num_parameters > 0 ? (m.parameters_estimated ? "about " : "") +
                                                    HumanCount(m.num_parameters) + " parameters, "
                                              : "";
    line("weights:  " + params + m.weights_note + ": " + Bytes(m.weight_bytes) +
         (m.weights_estimated ? " (estimated from shapes)" : ""));
  }
  line("KV cache: " + std::string(DTypeName(s.dtype)) +
       (p.kv_dtype_auto ? " (auto: " + m.auto_dtype_reason + ")" : "") + ", " + Num(s.block_size) +
       "-token blocks, max model length " + Num(p.max_model_len) + " tokens");
  line("");
  line("KV bytes per token: " + Num(p.bytes_per_token) + " B" +
       (p.bytes_per_token >= 1000 ? " = " + Bytes(p.bytes_per_token) : ""));
  line("                    = " + BytesPerTokenFormula(s));
  if (p.fixed_scale_bytes > 0) {
    line("  plus " + Num(p.fixed_scale_bytes) + " B of fp8 scales once per cache (" +
         (s.layout == KvLayout::kSeparateKv ? "one per layer, KV head, K and V" : "one per layer") +
         ")");
  }
  line("KV bytes per block: " + Num(p.bytes_per_block) + " B = " + Bytes(p.bytes_per_block) + " (" +
       Num(s.block_size) + " tokens)");
  line("KV per request (" + Num(p.context_tokens) + " tokens): " + Bytes(p.kv_bytes_per_request));
  line("  paged:      " + Num(p.blocks_per_request) +
       " blocks = " + Bytes(p.paged_bytes_per_request) + ", " +
       Num(p.blocks_per_request * s.block_size - p.context_tokens) +
       " unused slots in the last block");
  line("  contiguous: " + Bytes(p.contiguous_bytes_per_request) + ", a reservation of " +
       Num(p.max_model_len) + " tokens (the max model length)");

  if (p.has_budget) {
    line("");
    if (p.memory_bytes > 0) {
      line("KV budget: " + Bytes(p.kv_budget_bytes) + " = --memory " + Bytes(p.memory_bytes) +
           " - weights " + Bytes(p.weight_bytes) + " (" + p.weights_note + ")");
    } else {
      line("KV budget: " + Bytes(p.kv_budget_bytes) + " (--kv-cache-memory)");
    }
    if (p.fixed_scale_bytes > 0) {
      line("  less " + Num(p.fixed_scale_bytes) + " B of fp8 scales");
    }
    line("KV blocks: " + Num(p.num_blocks) + " of " + Num(s.block_size) +
         " tokens = " + Num(p.num_blocks * s.block_size) + " tokens");
    line("concurrent requests of " + Num(p.context_tokens) + " tokens:");
    std::vector<std::pair<std::string, std::string>> counts = {
        {"with paging (" + Num(p.blocks_per_request) + " blocks each):", Num(p.requests_paged)},
        {"with contiguous max-length reservation (" + Num(p.max_model_len) + " tokens each):",
         Num(p.requests_contiguous)},
    };
    if (p.avg_context_tokens > 0) {
      counts.push_back({"with paging at an average of " + Num(p.avg_context_tokens) + " tokens (" +
                            Num(s.blocks_for_tokens(p.avg_context_tokens)) + " blocks each):",
                        "about " + Num(p.requests_avg_context)});
    }
    if (p.kv_budget_tokens > 0) {
      std::string count = Num(p.requests_evicted);
      if (p.requests_paged > 0) {
        count += StrFormat(" (%.1fx)", static_cast<double>(p.requests_evicted) /
                                           static_cast<double>(p.requests_paged));
      }
      counts.push_back({"with token eviction to --kv-budget " + Num(p.kv_budget_tokens) + " (" +
                            Num(p.evicted_blocks_per_request) + " blocks each):",
                        count});
    }
    size_t width = 0;
    for (const auto& [label, count] : counts) width = std::max(width, label.size());
    for (const auto& [label, count] : counts) {
      line("  " + label + std::string(width - label.size() + 1, ' ') + count);
    }
    if (p.requests_paged == 0) {
      line("  not even one request of " + Num(p.context_tokens) + " tokens fits");
    }
    if (p.kv_budget_tokens > 0) {
      line("  (a compressed request holds at most " + Num(p.evicted_tokens_per_request) +
           " tokens: the budget and one block of slack with streaming/h2o;");
      line("  snapkv/pyramidkv add their output tokens, and all but streaming hold the whole");
      line("  prompt until it is compressed)");
    }
  }

  // Table across dtypes.
  line("");
  const std::string per_request = "KV per request (" + Num(p.context_tokens) + " tok)";
  std::string header = StrFormat("  %-9s %12s  %-26s", "dtype", "bytes/token", per_request.c_str());
  if (p.has_budget) {
    header += StrFormat(" %10s %11s", "paged", "contiguous");
    if (p.avg_context_tokens > 0) header += StrFormat(" %12s", "paged@avg");
    if (p.kv_budget_tokens > 0) header += StrFormat(" %10s", "evicted");
  }
  while (!header.empty() && header.back() == ' ') header.pop_back();
  line(header);
  for (const PlanDtypeRow& row : p.dtypes) {
    std::string text = StrFormat("%c %-9s %12lld  %-26s", row.dtype == s.dtype ? '*' : ' ',
                              DTypeName(row.dtype), static_cast<long long>(row.bytes_per_token),
                              Bytes(row.kv_bytes_per_request).c_str());
    if (p.has_budget) {
      text += StrFormat(" %10lld %11lld", static_cast<long long>(row.requests_paged),
                     static_cast<long long>(row.requests_contiguous));
      if (p.avg_context_tokens > 0) {
        text += StrFormat(" %12lld", static_cast<long long>(row.requests_avg_context));
      }
      if (p.kv_budget_tokens > 0) {
        text += StrFormat(" %10lld", static_cast<long long>(row.requests_evicted));
      }
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    line(text);
  }
  line("* = --kv-cache-dtype. int8 bytes/token include its per-token scales (4 B each); fp8's");
  line("  per-layer scales are a fixed cost, subtracted once from the budget.");
  return out;
}

std::string FormatPlanJson(const PlanResult& p) {
  using ojson = nlohmann::ordered_json;
  const PlanModel& m = p.model;
  auto or_null = [&p](int64_t v) { return p.has_budget ? ojson(v) : ojson(nullptr); };
  ojson model = {
      {"name", m.name},
      {"source", m.source},
      {"architecture", m.architecture},
      {"num_layers", m.num_layers},
      {"num_heads", m.num_heads},
      {"kv_layout", KvLayoutName(m.kv_layout)},
      {"num_kv_heads",
       m.kv_layout == KvLayout::kSeparateKv ? ojson(m.num_kv_heads) : ojson(nullptr)},
      {"head_dim", m.kv_layout == KvLayout::kSeparateKv ? ojson(m.head_dim) : ojson(nullptr)},
      {"kv_lora_rank",
       m.kv_layout == KvLayout::kMlaLatent ? ojson(m.kv_lora_rank) : ojson(nullptr)},
      {"qk_rope_head_dim",
       m.kv_layout == KvLayout::kMlaLatent ? ojson(m.qk_rope_head_dim) : ojson(nullptr)},
      {"max_context_tokens", m.max_context_tokens},
      {"dtype", DTypeName(m.dtype)},
      {"num_parameters", m.num_parameters > 0 ? ojson(m.num_parameters) : ojson(nullptr)},
      {"weight_bytes", m.weight_bytes > 0 ? ojson(m.weight_bytes) : ojson(nullptr)},
      {"weights", m.weights_note},
      {"weight_bytes_by_type", WeightBytesByTypeJson(m)},
      {"parameters_estimated", m.parameters_estimated},
      {"weights_estimated", m.weights_estimated},
  };
  ojson rows = ojson::array();
  for (const PlanDtypeRow& row : p.dtypes) {
    rows.push_back({
        {"dtype", DTypeName(row.dtype)},
        {"bytes_per_token", row.bytes_per_token},
        {"fixed_scale_bytes", row.fixed_scale_bytes},
        {"kv_bytes_per_request", row.kv_bytes_per_request},
        {"num_blocks", or_null(row.num_blocks)},
        {"requests_paged", or_null(row.requests_paged)},
        {"requests_contiguous", or_null(row.requests_contiguous)},
        {"requests_avg_context", p.has_budget && p.avg_context_tokens > 0
                                     ? ojson(row.requests_avg_context)
                                     : ojson(nullptr)},
        {"requests_evicted", p.has_budget && p.kv_budget_tokens > 0
                                 ? ojson(row.requests_evicted)
                                 : ojson(nullptr)},
    });
  }
  ojson out = {
      {"model", model},
      {"kv_cache_dtype", DTypeName(p.spec.dtype)},
      {"block_size", p.spec.block_size},
      {"context_tokens", p.context_tokens},
      {"max_model_len", p.max_model_len},
      {"avg_context_tokens",
       p.avg_context_tokens > 0 ? ojson(p.avg_context_tokens) : ojson(nullptr)},
      {"bytes_per_token", p.bytes_per_token},
      {"bytes_per_block", p.bytes_per_block},
      {"fixed_scale_bytes", p.fixed_scale_bytes},
      {"kv_bytes_per_request", p.kv_bytes_per_request},
      {"kv_per_request", Bytes(p.kv_bytes_per_request)},
      {"blocks_per_request", p.blocks_per_request},
      {"paged_bytes_per_request", p.paged_bytes_per_request},
      {"contiguous_bytes_per_request", p.contiguous_bytes_per_request},
      {"memory_bytes", p.has_budget && p.memory_bytes > 0 ? ojson(p.memory_bytes) : ojson(nullptr)},
      {"weight_bytes", p.has_budget && p.memory_bytes > 0 ? ojson(p.weight_bytes) : ojson(nullptr)},
      {"kv_budget_bytes", or_null(p.kv_budget_bytes)},
      {"num_blocks", or_null(p.num_blocks)},
      {"requests_paged", or_null(p.requests_paged)},
      {"requests_contiguous", or_null(p.requests_contiguous)},
      {"requests_avg_context",
       p.has_budget && p.avg_context_tokens > 0 ? ojson(p.requests_avg_context) : ojson(nullptr)},
      {"kv_budget_tokens", p.kv_budget_tokens > 0 ? ojson(p.kv_budget_tokens) : ojson(nullptr)},
      {"evicted_tokens_per_request",
       p.kv_budget_tokens > 0 ? ojson(p.evicted_tokens_per_request) : ojson(nullptr)},
      {"requests_evicted",
       p.has_budget && p.kv_budget_tokens > 0 ? ojson(p.requests_evicted) : ojson(nullptr)},
      {"dtypes", rows},
  };
  return out.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace kvserve::plan
