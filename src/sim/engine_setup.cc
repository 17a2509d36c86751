// The engine a prediction runs (see engine_setup.h).
#include "sim/engine_setup.h"

#include <cmath>

#include "base/str_format.h"
#include "plan/plan.h"

namespace kvserve::sim {

std::string Engine::Describe() const {
  const KvCacheSpec& kv = deployment.kv;
  return StrFormat("%s on %s x%d: %s KV, %lld-token blocks, %lld blocks (%lld tokens, %s; %s)",
                   model.name.c_str(), deployment.hardware.name.c_str(),
                   deployment.tensor_parallel, DTypeName(kv.dtype),
                   static_cast<long long>(kv.block_size), static_cast<long long>(capacity_blocks),
                   static_cast<long long>(capacity_blocks * kv.block_size),
                   FormatBytesDecimalAndBinary(static_cast<double>(capacity_blocks) *
                                               static_cast<double>(kv.bytes_per_block()))
                       .c_str(),
                   capacity_source.c_str());
}

StatusOr<Engine> ResolveEngine(const EngineSetup& s) {
  if (s.hardware.empty()) {
    return InvalidArgumentError("--hardware NAME|FILE.json is needed to time a model's steps");
  }
  KV_ASSIGN_OR_RETURN(cost::HardwareProfile hw, cost::ResolveHardwareProfile(s.hardware));
  if (s.price_per_hour >= 0) {
    if (!std::isfinite(s.price_per_hour)) return InvalidArgumentError("--price-per-hour must be finite");
    hw.price_per_hour = s.price_per_hour;
  }
  if (s.tensor_parallel < 1 || s.tensor_parallel > 1024) {
    return InvalidArgumentError("--tensor-parallel must be in [1, 1024]");
  }
  if (!(s.memory_utilization > 0 && s.memory_utilization <= 1)) {
    return InvalidArgumentError("--memory-utilization must be in (0, 1]");
  }
  Engine e;
  KV_ASSIGN_OR_RETURN(e.model, plan::ResolvePlanModel(s.preset, s.model_path));
  StatusOr<DType> dtype = ParseKvCacheDtype(s.kv_cache_dtype, hw.compute_dtype);
  if (!dtype.ok()) return dtype.status().WithContext("--kv-cache-dtype");
  plan::PlanOptions po;
  po.kv_cache_dtype = DTypeName(*dtype);
  po.block_size = s.block_size;
  if (!s.kv_cache_memory.empty()) {
    po.kv_cache_memory = s.kv_cache_memory;
    e.capacity_source = "--kv-cache-memory " + s.kv_cache_memory;
  } else {
    const double device_bytes = static_cast<double>(hw.memory_bytes) * s.tensor_parallel;
    po.memory = StrFormat("%.0f", s.memory_utilization * device_bytes);
    e.capacity_source = StrFormat("%.2f x %s - %s weights", s.memory_utilization,
                                  FormatBytesDecimalAndBinary(device_bytes).c_str(),
                                  FormatBytesDecimalAndBinary(static_cast<double>(e.model.weight_bytes)).c_str());
  }
  StatusOr<plan::PlanResult> planned = plan::ComputePlan(e.model, po);
  if (!planned.ok()) return planned.status();
  e.capacity_blocks = planned->num_blocks;
  if (s.kv_cache_blocks > 0) {
    e.capacity_blocks = s.kv_cache_blocks;
    e.capacity_source = "--kv-cache-blocks";
  }
  if (e.capacity_blocks < 1) {
    return InvalidArgumentError("the KV budget (" + e.capacity_source + ") holds no block");
  }
  KV_ASSIGN_OR_RETURN(e.deployment, plan::MakeDeployment(e.model, planned->spec, hw,
                                                         s.tensor_parallel, 0));
  return e;
}

}  // namespace kvserve::sim
