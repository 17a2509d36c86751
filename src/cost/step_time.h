// The step-time model: how long one engine step takes on a hardware profile, from what the
// scheduler put in it. The one definition of the cost arithmetic: `kvserve sim` times every
// real SchedulerOutput with it, and `kvserve plan` times the steps of a planned load with it.
//
// A step of N computed tokens (S of them sampled) over sequences j with c_j tokens already in
// the cache and n_j new:
//   matmul    flops 2 N (P_layers + k P_expert L_moe); bytes: the weights read once,
//             b (P_layers + L_moe P_expert E (1 - (1 - k/E)^N)) (the experts N tokens are
//             expected to touch under uniform routing);
//   output    flops 2 S P_output, bytes b P_output when S > 0;
//   attention per sequence: flops 2 L H (d_qk + d_v) sum_{i=1..n} min(c + i, M) over L
//             layers, bytes: the M-capped context read once plus the n new tokens written,
//             at the KV cache's bytes per token (KvCacheSpec::bytes_per_token, all layers:
//             dtype, int8 scales, the MLA latent); M = min(sliding window, eviction
//             budget + block size), the slots a compressed request holds (as `kvserve plan
//             --kv-budget` counts them);
//   comm      tensor parallel over T devices: two all-reduces of N x hidden bf16 values per
//             layer, each 2 (T - 1) / T of it over the interconnect;
//   overhead  the profile's per-step and per-token fixed costs.
// Each op takes max(flops / peak, bytes / bandwidth) / efficiency (the profile's curve at the
// op's size); flops and bytes are per device (divided by T). The step is the sum.
//
// Plain value types and functions; no state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "cost/hardware.h"
#include "kv/kv_spec.h"
#include "tensor/dtype.h"

namespace kvserve::cost {

// What the model is, as far as time goes. Parameter counts, not bytes.
struct ModelShape {
  std::string name;
  int64_t num_layers = 0;
  int64_t hidden_dim = 0;
  int64_t num_heads = 0;          // query heads
  int64_t attention_qk_dim = 0;   // per head: query x key width (MLA absorbed: latent + rope)
  int64_t attention_v_dim = 0;    // per head: value width (MLA absorbed: latent)
  int64_t sliding_window_tokens = 0;  // 0: full attention
  // Weights every token multiplies (all layers: attention, dense feed-forward, shared experts,
  // routers); not the embedding table (rows are looked up) nor routed experts nor the output.
  int64_t layer_parameters = 0;
  int64_t output_parameters = 0;          // vocab x hidden, for the rows that sample
  int64_t routed_expert_parameters = 0;   // one routed expert of one layer
  int64_t num_moe_layers = 0;
  int64_t num_experts = 0;
  int64_t num_experts_used = 0;

  // Parameters one token multiplies through (layers, its k experts, the output).
  int64_t active_parameters() const;
};

// A model on a machine: everything the step time depends on besides the step.
struct Deployment {
  ModelShape model;
  double weight_bytes_per_parameter = 2.0;  // stored bytes over parameters (q8_0: 34/32)
  DType weight_dtype = DType::kBF16;        // what the matmuls compute on (PeakFlops)
  KvCacheSpec kv;                           // the KV cache's dtype, layout, block size
  int64_t kv_budget_tokens = 0;             // token eviction's budget per request; 0: none
  int tensor_parallel = 1;                  // devices the weights and heads are split over
  HardwareProfile hardware;
};

// InvalidArgument naming what is wrong (shapes, tensor parallel without an interconnect, ...).
Status ValidateDeployment(const Deployment& deployment);

// What the scheduler put in the step for one sequence.
struct StepSeq {
  int64_t num_computed_tokens = 0;  // already in the KV cache
  int64_t num_new_tokens = 0;       // computed in this step
  bool samples = false;             // the step samples a token for it
};

// One op's work and time (per device).
struct OpCost {
  double flops = 0.0;
  double bytes = 0.0;
  double compute_s = 0.0;  // flops / peak
  double memory_s = 0.0;   // bytes / bandwidth
  double seconds = 0.0;    // max(compute_s, memory_s) / efficiency

  void Add(const OpCost& other);
};

struct StepCost {
  OpCost matmul;
  OpCost output;
  OpCost attention;
  double comm_s = 0.0;
  double overhead_s = 0.0;
  double seconds = 0.0;  // the sum
  int64_t num_tokens = 0;
  int64_t num_sampled = 0;
};

// The roofline of one op: max(flops / peak, bytes / bandwidth) / efficiency.
OpCost Roofline(double flops, double bytes, double peak_flops, double bytes_per_s,
                double efficiency);

// The context a query at position `tokens` attends to: min(tokens, sliding window, eviction
// budget + block size).
int64_t AttendedTokens(const Deployment& deployment, int64_t tokens);

// The time of a step over `seqs` (deployment assumed valid). A step with no tokens costs only
// the per-step overhead.
StepCost ComputeStepCost(const Deployment& deployment, std::span<const StepSeq> seqs);

// A decode step of `batch` sequences with `context_tokens` each already cached.
StepCost DecodeStepCost(const Deployment& deployment, int64_t batch, int64_t context_tokens);

}  // namespace kvserve::cost
