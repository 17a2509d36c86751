// `kvserve profile`: measures this machine as the cost model sees it (cost/hardware.h), for one
// model's shapes, and writes a hardware profile that `kvserve sim --hardware FILE.json` and
// `kvserve plan --hardware FILE.json` read:
//   1. ceilings (kernels/ceiling.h): read bandwidth, f32 FMA and int8 dot-product peaks;
//   2. matmul efficiency: the model's own packed layer weights (every matrix but the embedding
//      table and the output) through kernels::Matmul at several row counts, as the roofline's
//      time (weights read once, 2 x rows x parameters operations at the peak of the weights'
//      type) over the measured time;
//   3. attention efficiency: kernels::PagedDecodeAttention over the model's KV geometry for one
//      query at several context lengths, per KV dtype, as the roofline time of that read over
//      the measured time (times the layers); and kernels::PagedPrefillAttention for chunks of
//      several query rows after a cached context (f32 KV), the prefill curve;
//   4. the engine: real EngineCore steps (decode batches, prefill chunks) on this model,
//      fitted (least squares in relative error) as a scale on what 1-3 predict (the kernels
//      inside the engine against the kernels alone; every efficiency is divided by it) plus a
//      cost per step and per computed token (norms, RoPE, activations, sampling, scheduling).
// Every figure is the median of repeated runs. The result carries the raw measurements too.
//
// Not thread-safe: one profile at a time (it drives the model and the pool).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/thread_pool.h"
#include "cost/hardware.h"
#include "model/llama.h"
#include "plan/plan_model.h"

namespace kvserve::profile {

struct ProfileOptions {
  std::string name = "this-machine";  // the profile's name
  std::vector<int64_t> matmul_rows = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::vector<int64_t> attention_contexts = {128, 512, 2048, 8192};
  std::vector<DType> kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3,
                                  DType::kI8};
  std::vector<int64_t> prefill_attention_rows = {16, 64, 256};
  int64_t prefill_attention_cached_tokens = 512;  // context before each chunk
  std::vector<int64_t> decode_batches = {1, 4, 16};
  std::vector<int64_t> prefill_tokens = {16, 64, 256};
  int64_t read_buffer_bytes = int64_t{1} << 30;  // the bandwidth measurement's buffer
  int repetitions = 5;                            // per measurement (median; ceilings: best)
  // (stage, done, total): stages "ceilings", "matmul", "attention", "engine".
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

struct ProfileResult {
  cost::HardwareProfile profile;
  // Ceilings, every timing and what the fit left over (per engine step: measured, predicted).
  nlohmann::json measurements;
};

// Profiles `model` (loaded, weights packed) whose planner view is `shape_source` (the same
// file through plan::LoadPlanModel), on `pool`'s threads. Errors: a model the cost model cannot
// describe, an engine that cannot be created.
StatusOr<ProfileResult> ProfileMachine(LlamaModel& model, const plan::PlanModel& shape_source,
                                       ThreadPool* pool, const ProfileOptions& options);

// The profile file: HardwareProfileToJson plus "measurements".
nlohmann::json ProfileToJson(const ProfileResult& result);

}  // namespace kvserve::profile
