// Start-up calibration of fp8 KV scales: run some text through the model with float32 KV,
// record the largest |K| and |V| per layer and KV head, and derive scales from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_storage.h"
#include "model/llama.h"

namespace kvserve {

// Scales leave this much room above the calibration maximum before fp8 saturates (E4M3 has
// the same relative precision over its whole normal range, so headroom costs only the
// smallest values).
inline constexpr float kFp8CalibrationHeadroom = 2.0f;

// English prose used when no --kv-calibration-file is given (a few hundred tokens).
const std::string& BuiltinCalibrationText();

// What a calibration pass measures for a quantized KV dtype.
struct KvCalibration {
  KvScales scales;              // fp8: per-layer, per-head scales (empty for int8)
  KvStorage::ChannelNorm norm;  // channel normalization (empty vectors when not wanted)
};

// Runs `tokens` (split into windows of at most 512 tokens and the model's context) through
// `model` with an f32 paged cache that observes K and V, and returns, with `normalize`, the
// channel normalization (KvStorage::SetChannelNorm): per-channel means of K and V, and for
// int8 also per-channel ranges (values stored as (x - mean) / range); and for fp8 the per-head
// scales of the stored values (source kCalibrated, `detail` saying what was run).
// Errors when tokens is empty or dtype is not int8/fp8.
StatusOr<KvCalibration> CalibrateKvCache(LlamaModel& model, DType dtype,
                                         const std::vector<TokenId>& tokens, ThreadPool* pool,
                                         const std::string& detail, bool normalize = true);
// Installs a calibration into a storage of the same dtype and geometry.
Status ApplyKvCalibration(const KvCalibration& calibration, KvStorage* storage);

// Reads fp8 KV scales that the model file carries: per layer, tensors
// `blk.N.attn_k.kv_scale` / `blk.N.attn_v.kv_scale` (a scalar, broadcast to every KV head, as
// HF checkpoints' self_attn.k_scale / v_scale) or [num_kv_heads] vectors. Returns NotFound
// when the file has none.
StatusOr<KvScales> Fp8KvScalesFromModel(const LoadedModel& model);

}  // namespace kvserve
