// The step-time model (see step_time.h for the formulas).
#include "cost/step_time.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvserve::cost {
namespace {

// sum_{i=1..n} min(c + i, m): the keys n new queries attend to, causally, capped at m.
double AttendedSum(int64_t c, int64_t n, int64_t m) {
  const double dc = static_cast<double>(c);
  // Queries below the cap: i <= m - c.
  const int64_t below = std::clamp<int64_t>(m - c, 0, n);
  const double b = static_cast<double>(below);
  return b * dc + b * (b + 1) / 2 + static_cast<double>(n - below) * static_cast<double>(m);
}

Status Positive(const char* what, int64_t value) {
  if (value > 0) return OkStatus();
  return InvalidArgumentError(std::string("cost model: ") + what + " must be > 0, got " +
                              std::to_string(value));
}

}  // namespace

int64_t ModelShape::active_parameters() const {
  return layer_parameters + num_moe_layers * num_experts_used * routed_expert_parameters +
         output_parameters;
}

void OpCost::Add(const OpCost& o) {
  flops += o.flops;
  bytes += o.bytes;
  compute_s += o.compute_s;
  memory_s += o.memory_s;
  seconds += o.seconds;
}

Status ValidateDeployment(const Deployment& d) {
  const ModelShape& m = d.model;
  KV_RETURN_IF_ERROR(Positive("num_layers", m.num_layers));
  KV_RETURN_IF_ERROR(Positive("hidden_dim", m.hidden_dim));
  KV_RETURN_IF_ERROR(Positive("num_heads", m.num_heads));
  KV_RETURN_IF_ERROR(Positive("attention_qk_dim", m.attention_qk_dim));
  KV_RETURN_IF_ERROR(Positive("attention_v_dim", m.attention_v_dim));
  KV_RETURN_IF_ERROR(Positive("layer_parameters", m.layer_parameters));
  if (m.output_parameters < 0 || m.routed_expert_parameters < 0 || m.num_moe_layers < 0 ||
      m.num_experts < 0 || m.num_experts_used < 0 || m.num_experts_used > m.num_experts ||
      m.sliding_window_tokens < 0) {
    return InvalidArgumentError("cost model: the mixture-of-experts or window fields of '" +
                                m.name + "' are out of range");
  }
  if (m.num_moe_layers > 0 && (m.num_experts == 0 || m.num_experts_used == 0)) {
    return InvalidArgumentError("cost model: MoE layers need experts and experts used per token");
  }
  if (!(d.weight_bytes_per_parameter > 0) || !std::isfinite(d.weight_bytes_per_parameter)) {
    return InvalidArgumentError("cost model: weight bytes per parameter must be > 0");
  }
  KV_RETURN_IF_ERROR(d.kv.Validate());
  if (d.kv_budget_tokens < 0) return InvalidArgumentError("--kv-budget must be >= 0");
  if (d.tensor_parallel < 1 || d.tensor_parallel > 1024) {
    return InvalidArgumentError("--tensor-parallel must be in [1, 1024]");
  }
  if (d.tensor_parallel > 1 && !(d.hardware.interconnect_bytes_per_s > 0)) {
    return InvalidArgumentError("--tensor-parallel " + std::to_string(d.tensor_parallel) +
                                ": hardware '" + d.hardware.name +
                                "' has no interconnect_bytes_per_s");
  }
  return ValidateHardwareProfile(d.hardware);
}

OpCost Roofline(double flops, double bytes, double peak_flops, double bytes_per_s,
                double efficiency) {
  OpCost c;
  c.flops = flops;
  c.bytes = bytes;
  c.compute_s = peak_flops > 0 ? flops / peak_flops : 0.0;
  c.memory_s = bytes_per_s > 0 ? bytes / bytes_per_s : 0.0;
  c.seconds = std::max(c.compute_s, c.memory_s) / efficiency;
  return c;
}

int64_t AttendedTokens(const Deployment& d, int64_t tokens) {
  int64_t cap = std::numeric_limits<int64_t>::max();
  if (d.model.sliding_window_tokens > 0) cap = d.model.sliding_window_tokens;
  if (d.kv_budget_tokens > 0) cap = std::min(cap, d.kv_budget_tokens + d.kv.block_size);
  return std::min(tokens, cap);
}

StepCost ComputeStepCost(const Deployment& d, std::span<const StepSeq> seqs) {
  const ModelShape& m = d.model;
  const HardwareProfile& hw = d.hardware;
  const double tp = static_cast<double>(d.tensor_parallel);
  const double bw = hw.memory_bandwidth_bytes_per_s;
  const double bpp = d.weight_bytes_per_parameter;
  StepCost step;
  for (const StepSeq& s : seqs) {
    step.num_tokens += s.num_new_tokens;
    step.num_sampled += s.samples;
  }
  const double n = static_cast<double>(step.num_tokens);
  const double weight_peak = PeakFlops(hw, d.weight_dtype);
  if (step.num_tokens > 0) {
    // Weights read once per step; routed experts: the ones the step's tokens touch.
    double experts_read = 0.0;
    if (m.num_moe_layers > 0) {
      const double e = static_cast<double>(m.num_experts);
      const double k = static_cast<double>(m.num_experts_used);
      experts_read = e * (1.0 - std::pow(1.0 - k / e, n));
    }
    const double read_parameters =
        static_cast<double>(m.layer_parameters) +
        static_cast<double>(m.num_moe_layers * m.routed_expert_parameters) * experts_read;
    const double used_parameters =
        static_cast<double>(m.layer_parameters) +
        static_cast<double>(m.num_moe_layers * m.num_experts_used * m.routed_expert_parameters);
    step.matmul = Roofline(2.0 * n * used_parameters / tp, bpp * read_parameters / tp,
                           weight_peak, bw, hw.efficiency.matmul.At(n));
  }
  if (step.num_sampled > 0 && m.output_parameters > 0) {
    const double s = static_cast<double>(step.num_sampled);
    const double p = static_cast<double>(m.output_parameters);
    step.output = Roofline(2.0 * s * p / tp, bpp * p / tp, weight_peak, bw,
                           hw.efficiency.matmul.At(s));
  }
  // Attention: each sequence's own roofline (its KV is its own bytes), at bf16 (f32 for an
  // f32 cache) compute.
  const double attention_peak =
      PeakFlops(hw, d.kv.dtype == DType::kF32 ? DType::kF32 : DType::kBF16);
  const double flops_per_key = 2.0 * static_cast<double>(m.num_layers) *
                               static_cast<double>(m.num_heads) *
                               static_cast<double>(m.attention_qk_dim + m.attention_v_dim);
  const double bytes_per_token = static_cast<double>(d.kv.bytes_per_token());
  for (const StepSeq& s : seqs) {
    if (s.num_new_tokens <= 0) continue;
    const int64_t end = s.num_computed_tokens + s.num_new_tokens;
    const int64_t cap = AttendedTokens(d, end);
    const double keys = AttendedSum(s.num_computed_tokens, s.num_new_tokens, cap);
    const double bytes = bytes_per_token * static_cast<double>(cap + s.num_new_tokens);
    step.attention.Add(Roofline(flops_per_key * keys / tp, bytes / tp, attention_peak, bw,
                                hw.efficiency.AttentionAt(d.kv.dtype, s.num_new_tokens, cap)));
  }
  if (d.tensor_parallel > 1 && step.num_tokens > 0) {
    const double all_reduce_bytes = n * static_cast<double>(m.hidden_dim) * 2.0;  // bf16
    step.comm_s = 2.0 * static_cast<double>(m.num_layers) * 2.0 * (tp - 1.0) / tp *
                  all_reduce_bytes / hw.interconnect_bytes_per_s;
  }
  step.overhead_s = hw.efficiency.step_overhead_s + hw.efficiency.token_overhead_s * n;
  step.seconds = step.matmul.seconds + step.output.seconds + step.attention.seconds +
                 step.comm_s + step.overhead_s;
  return step;
}

StepCost DecodeStepCost(const Deployment& d, int64_t batch, int64_t context_tokens) {
  const std::vector<StepSeq> seqs(
      static_cast<size_t>(std::max<int64_t>(batch, 0)),
      StepSeq{.num_computed_tokens = context_tokens, .num_new_tokens = 1, .samples = true});
  return ComputeStepCost(d, seqs);
}

}  // namespace kvserve::cost
