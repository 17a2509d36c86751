// The engine a prediction runs: a model (a planner preset or file) on a hardware profile with
// serve's KV cache flags, turned into the cost model's Deployment and the KV cache's capacity
// in blocks. The capacity is the planner's (plan::ComputePlan): --kv-cache-memory when given,
// else --memory-utilization x (device memory x --tensor-parallel) minus the weights.
//
// Plain functions; no state.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "cost/step_time.h"
#include "plan/plan_model.h"

namespace kvserve::sim {

// The flags (names as `kvserve serve` and `kvserve plan` spell them).
struct EngineSetup {
  std::string preset;           // --preset
  std::string model_path;       // --model
  std::string hardware;         // --hardware NAME|FILE.json
  double price_per_hour = -1;   // --price-per-hour; < 0: the profile's
  int tensor_parallel = 1;      // --tensor-parallel
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype; auto: the profile's compute dtype
  std::string kv_cache_memory;          // --kv-cache-memory; "" : from the utilization
  double memory_utilization = 0.9;      // --memory-utilization
  int64_t block_size = 16;              // --block-size
  int64_t kv_cache_blocks = 0;          // --kv-cache-blocks: overrides the budget when > 0
};

struct Engine {
  plan::PlanModel model;
  cost::Deployment deployment;
  int64_t capacity_blocks = 0;
  std::string capacity_source;  // "--kv-cache-memory 2GiB", "0.90 x 80.00 GB - weights", ...

  // One line for the report: "SmolLM2-135M on h100-sxm x1: bf16 KV, 16-token blocks, 1234
  // blocks (19744 tokens, 1.2 GB; --kv-cache-memory 1GiB)".
  std::string Describe() const;
};

// InvalidArgument naming the flag for what cannot work (no model, no hardware, weights that
// do not fit, a bad dtype, ...).
StatusOr<Engine> ResolveEngine(const EngineSetup& setup);

}  // namespace kvserve::sim
