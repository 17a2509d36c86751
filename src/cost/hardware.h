// Hardware profiles for the cost model (`--hardware NAME|FILE.json` on `kvserve plan` and
// `kvserve sim`): what a machine can do (memory, memory bandwidth, dense throughput per compute
// type, the link between tensor-parallel ranks), what it costs per hour, and how close an
// engine's kernels come to those ceilings (efficiency curves, measured by `kvserve profile` or
// assumed for the published profiles). Built-in profiles are published datasheet figures; each
// one's source is in its `source` field and in docs/cost.md.
//
// Plain value types and functions; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kvserve::cost {

// A fraction of a ceiling that depends on the size of the work: points (x, fraction) with x
// increasing, interpolated linearly in log2(x) between points and held flat beyond the ends.
// Empty: 1 everywhere. Fractions are in (0, 1.5] (a kernel may beat a nominal ceiling a
// little: caches, turbo clocks).
struct EfficiencyCurve {
  std::vector<std::pair<double, double>> points;

  double At(double x) const;
  static EfficiencyCurve Constant(double fraction) { return {{{1.0, fraction}}}; }
};

// How close the engine comes to the roofline (time = max(flops / peak, bytes / bandwidth)) of
// each kind of work: the roofline time divided by the time the work takes. x of `matmul` is
// the step's rows (tokens); x of `attention` is the context a query attends to, one curve per
// KV dtype name ("bf16", "fp8_e4m3", "int8", ...), `attention_default` for the others.
// `prefill_attention` times a chunk of several queries (prefill, chunked prefill, a suffix
// after a prefix-cache hit), whose kernel is compute-bound where decode's reads bytes; its x is
// the chunk's query rows. Empty: chunks use the decode curves too.
struct Efficiency {
  EfficiencyCurve matmul = EfficiencyCurve::Constant(0.7);
  std::map<std::string, EfficiencyCurve> attention;
  EfficiencyCurve attention_default = EfficiencyCurve::Constant(0.6);
  EfficiencyCurve prefill_attention;
  // Fixed costs not in the rooflines: per engine step (scheduling, sampling, synchronisation)
  // and per token computed (norms, RoPE, activations, embedding rows).
  double step_overhead_s = 0.0;
  double token_overhead_s = 0.0;

  const EfficiencyCurve& AttentionCurve(DType kv_dtype) const;
  // The efficiency of `num_queries` queries of one sequence attending to `attended_tokens`.
  double AttentionAt(DType kv_dtype, int64_t num_queries, int64_t attended_tokens) const;
};

struct HardwareProfile {
  std::string name;    // "h100-sxm", or the file's name
  std::string description;
  std::string source;  // where the figures come from (a datasheet, `kvserve profile`)
  int64_t memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0.0;
  // Dense peak operations per second by compute type (no structured sparsity). 0: the type is
  // not supported and the next wider one is used (PeakFlops).
  double peak_flops_f32 = 0.0;
  double peak_flops_bf16 = 0.0;  // also f16
  double peak_flops_fp8 = 0.0;
  double peak_flops_int8 = 0.0;
  // Per-device bandwidth of the link tensor-parallel ranks all-reduce over (NVLink, Infinity
  // Fabric, PCIe); 0: single device only.
  double interconnect_bytes_per_s = 0.0;
  // What the engine computes activations in, and so what `--kv-cache-dtype auto` means on
  // this machine: bf16 on the accelerators, f32 for kvserve's CPU engine.
  DType compute_dtype = DType::kBF16;
  double price_per_hour = 0.0;  // USD per device-hour
  std::string price_note;       // where the default price comes from, with its date
  Efficiency efficiency;
};

// The built-in profiles' names: h100-sxm, h200, b200, a100-80gb, l40s, mi300x.
std::vector<std::string> HardwareProfileNames();

// A built-in profile; InvalidArgument listing the known names otherwise.
StatusOr<HardwareProfile> BuiltinHardwareProfile(const std::string& name);

// A profile from its JSON form (HardwareProfileToJson's fields; a built-in's name in "base"
// fills in what the file leaves out). `origin` names the file in errors. Errors name the field.
StatusOr<HardwareProfile> HardwareProfileFromJson(const nlohmann::json& j, const std::string& origin);
nlohmann::json HardwareProfileToJson(const HardwareProfile& profile);

// A profile file's JSON (at most 16 MiB), as written, measurements included; `flag` names it
// in errors ("--hardware", "--refit"). NotFound / InvalidArgument naming the file.
StatusOr<nlohmann::json> ReadHardwareProfileFile(const std::string& flag, const std::string& path);

// `--hardware VALUE`: a built-in name, else a JSON file's path (a value ending in ".json" or
// naming an existing file). Errors say which was tried.
StatusOr<HardwareProfile> ResolveHardwareProfile(const std::string& value);

// The peak for work whose operands are `compute` (weights or KV): int8 for q8_0 and the other
// integer-dot weight types and int8, fp8 for fp8, bf16 for f16/bf16, f32 for f32; a type the
// device lacks falls back to the next wider one that it has.
double PeakFlops(const HardwareProfile& profile, DType compute);

// Ok when every figure is usable (positive memory, bandwidth and at least one peak; fractions
// in range); InvalidArgument naming the field otherwise.
Status ValidateHardwareProfile(const HardwareProfile& profile);

}  // namespace kvserve::cost
