// Hardware profiles: the built-in datasheet figures, the JSON form, the peak per compute type.
#include "cost/hardware.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace kvserve::cost {
namespace {

using nlohmann::json;

constexpr double kGB = 1e9;
constexpr double kTB = 1e12;
constexpr double kTflops = 1e12;

// Prices are planning defaults, not quotes: typical on-demand rental per device-hour as of the
// date given; users set their own with --price-per-hour.
constexpr char kPriceNote[] =
    "planning default (USD per device-hour, 2026-12), not a quote: set --price-per-hour";

HardwareProfile Gpu(const char* name, const char* description, const char* source,
                    double memory_bytes, double bandwidth, double f32, double bf16, double fp8,
                    double int8, double link, double price) {
  HardwareProfile p;
  p.name = name;
  p.description = description;
  p.source = source;
  p.memory_bytes = static_cast<int64_t>(memory_bytes);
  p.memory_bandwidth_bytes_per_s = bandwidth;
  p.peak_flops_f32 = f32;
  p.peak_flops_bf16 = bf16;
  p.peak_flops_fp8 = fp8;
  p.peak_flops_int8 = int8;
  p.interconnect_bytes_per_s = link;
  p.price_per_hour = price;
  p.price_note = kPriceNote;
  // Assumed, not measured (docs/cost.md): 70% of the roofline for matmuls, 60% for attention,
  // no fixed step cost (CUDA graphs). `kvserve profile` measures them on the machine it runs.
  p.efficiency.matmul = EfficiencyCurve::Constant(0.7);
  p.efficiency.attention_default = EfficiencyCurve::Constant(0.6);
  return p;
}

Status FieldError(const std::string& origin, const std::string& field, const std::string& what) {
  return InvalidArgumentError(origin + ": \"" + field + "\" " + what);
}

StatusOr<double> NumberField(const json& j, const std::string& key, const std::string& origin,
                             double fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  if (!v.is_number()) return FieldError(origin, key, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) return FieldError(origin, key, "must be a finite number >= 0");
  return x;
}

StatusOr<std::string> StringField(const json& j, const std::string& key, const std::string& origin,
                                  const std::string& fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string()) return FieldError(origin, key, "must be a string");
  return j[key].get<std::string>();
}

StatusOr<EfficiencyCurve> CurveFromJson(const json& v, const std::string& origin,
                                        const std::string& field) {
  if (v.is_number()) return EfficiencyCurve::Constant(v.get<double>());
  if (!v.is_array()) {
    return FieldError(origin, field, "must be a number or an array of [x, fraction] pairs");
  }
  EfficiencyCurve c;
  for (const json& point : v) {
    if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
        !point[1].is_number()) {
      return FieldError(origin, field, "must be an array of [x, fraction] number pairs");
    }
    c.points.emplace_back(point[0].get<double>(), point[1].get<double>());
  }
  return c;
}

json CurveToJson(const EfficiencyCurve& c) {
  json a = json::array();
  for (const auto& [x, f] : c.points) a.push_back({x, f});
  return a;
}

Status ValidateCurve(const EfficiencyCurve& c, const std::string& field) {
  double last_x = 0.0;
  for (const auto& [x, f] : c.points) {
    if (!(x > last_x) || !std::isfinite(x)) {
      return InvalidArgumentError("hardware profile: efficiency \"" + field +
                                  "\" needs x > 0, increasing");
    }
    if (!(f > 0.0 && f <= 1.5)) {
      return InvalidArgumentError("hardware profile: efficiency \"" + field +
                                  "\" fractions must be in (0, 1.5]");
    }
    last_x = x;
  }
  return OkStatus();
}

}  // namespace

double EfficiencyCurve::At(double x) const {
  if (points.empty()) return 1.0;
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i) {
    const auto& [x1, f1] = points[i];
    if (x > x1) continue;
    const auto& [x0, f0] = points[i - 1];
    const double t = (std::log2(x) - std::log2(x0)) / (std::log2(x1) - std::log2(x0));
    return f0 + t * (f1 - f0);
  }
  return points.back().second;
}

const EfficiencyCurve& Efficiency::AttentionCurve(DType kv_dtype) const {
  const auto it = attention.find(DTypeName(kv_dtype));
  return it == attention.end() ? attention_default : it->second;
}

double Efficiency::AttentionAt(DType kv_dtype, int64_t num_queries,
                               int64_t attended_tokens) const {
  if (num_queries > 1 && !prefill_attention.points.empty()) {
    return prefill_attention.At(static_cast<double>(num_queries));
  }
  return AttentionCurve(kv_dtype).At(static_cast<double>(attended_tokens));
}

std::vector<std::string> HardwareProfileNames() {
  return {"h100-sxm", "h200", "b200", "a100-80gb", "l40s", "mi300x"};
}

StatusOr<HardwareProfile> BuiltinHardwareProfile(const std::string& name) {
  // Dense figures (the datasheets' "with sparsity" numbers halved); docs/cost.md cites each.
  if (name == "h100-sxm") {
    return Gpu("h100-sxm", "NVIDIA H100 SXM5 80GB",
               "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column)", 80 * kGB, 3.35 * kTB,
               67 * kTflops, 989.4 * kTflops, 1978.9 * kTflops, 1978.9 * kTflops, 450 * kGB,
               2.50);
  }
  if (name == "h200") {
    return Gpu("h200", "NVIDIA H200 SXM 141GB", "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
               141 * kGB, 4.8 * kTB, 67 * kTflops, 989.4 * kTflops, 1978.9 * kTflops,
               1978.9 * kTflops, 450 * kGB, 3.50);
  }
  if (name == "b200") {
    return Gpu("b200", "NVIDIA B200 (HGX B200, per GPU)",
               "NVIDIA HGX B200 / DGX B200 datasheets (per-GPU share of the 8-GPU figures)",
               180 * kGB, 8 * kTB, 75 * kTflops, 2250 * kTflops, 4500 * kTflops,
               4500 * kTflops, 900 * kGB, 5.00);
  }
  if (name == "a100-80gb") {
    return Gpu("a100-80gb", "NVIDIA A100 SXM4 80GB",
               "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column)", 80 * kGB, 2.039 * kTB,
               19.5 * kTflops, 312 * kTflops, 0.0, 624 * kTflops, 300 * kGB, 1.50);
  }
  if (name == "l40s") {
    return Gpu("l40s", "NVIDIA L40S 48GB (PCIe)", "NVIDIA L40S GPU datasheet", 48 * kGB,
               864 * kGB, 91.6 * kTflops, 362.05 * kTflops, 733 * kTflops, 733 * kTflops,
               32 * kGB, 1.00);
  }
  if (name == "mi300x") {
    return Gpu("mi300x", "AMD Instinct MI300X 192GB", "AMD Instinct MI300X accelerator data sheet",
               192 * kGB, 5.3 * kTB, 163.4 * kTflops, 1307.4 * kTflops, 2614.9 * kTflops,
               2614.9 * kTflops, 448 * kGB, 2.50);
  }
  std::string known;
  for (const std::string& n : HardwareProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown hardware '" + name + "' (built-in: " + known +
                              "; or a profile .json file from `kvserve profile`)");
}

Status ValidateHardwareProfile(const HardwareProfile& p) {
  const std::string where = "hardware profile '" + p.name + "': ";
  if (p.memory_bytes <= 0) return InvalidArgumentError(where + "\"memory_bytes\" must be > 0");
  if (!(p.memory_bandwidth_bytes_per_s > 0)) {
    return InvalidArgumentError(where + "\"memory_bandwidth_bytes_per_s\" must be > 0");
  }
  if (!(std::max({p.peak_flops_f32, p.peak_flops_bf16, p.peak_flops_fp8, p.peak_flops_int8}) >
        0)) {
    return InvalidArgumentError(where + "\"peak_flops\" needs at least one type > 0");
  }
  if (!(p.price_per_hour >= 0) || !std::isfinite(p.price_per_hour)) {
    return InvalidArgumentError(where + "\"price_per_hour\" must be >= 0");
  }
  const Efficiency& e = p.efficiency;
  KV_RETURN_IF_ERROR(ValidateCurve(e.matmul, "matmul"));
  KV_RETURN_IF_ERROR(ValidateCurve(e.attention_default, "attention_default"));
  KV_RETURN_IF_ERROR(ValidateCurve(e.prefill_attention, "prefill_attention"));
  for (const auto& [dtype, curve] : e.attention) {
    if (!ParseDType(dtype)) {
      return InvalidArgumentError(where + "efficiency \"attention\" has an unknown dtype '" +
                                  dtype + "'");
    }
    KV_RETURN_IF_ERROR(ValidateCurve(curve, "attention." + dtype));
  }
  if (!(e.step_overhead_s >= 0 && e.step_overhead_s < 10) ||
      !(e.token_overhead_s >= 0 && e.token_overhead_s < 1)) {
    return InvalidArgumentError(where + "overheads must be >= 0 (and seconds, not ms)");
  }
  return OkStatus();
}

StatusOr<HardwareProfile> HardwareProfileFromJson(const json& j, const std::string& origin) {
  if (!j.is_object()) return InvalidArgumentError(origin + ": a hardware profile must be a JSON object");
  static const std::set<std::string> kKeys = {
      "name", "description", "source", "base", "memory_bytes", "memory_bandwidth_bytes_per_s",
      "peak_flops", "interconnect_bytes_per_s", "compute_dtype", "price_per_hour", "price_note",
      "efficiency", "measurements"};
  for (const auto& [key, value] : j.items()) {
    if (!kKeys.count(key)) return FieldError(origin, key, "is not a hardware profile field");
  }
  HardwareProfile p;
  KV_ASSIGN_OR_RETURN(const std::string base, StringField(j, "base", origin, ""));
  if (!base.empty()) {
    StatusOr<HardwareProfile> b = BuiltinHardwareProfile(base);
    if (!b.ok()) return b.status().WithContext(origin + ": \"base\"");
    p = *std::move(b);
  }
  KV_ASSIGN_OR_RETURN(p.name, StringField(j, "name", origin, p.name.empty() ? origin : p.name));
  KV_ASSIGN_OR_RETURN(p.description, StringField(j, "description", origin, p.description));
  KV_ASSIGN_OR_RETURN(p.source, StringField(j, "source", origin, p.source.empty() ? origin : p.source));
  KV_ASSIGN_OR_RETURN(p.price_note, StringField(j, "price_note", origin, p.price_note));
  KV_ASSIGN_OR_RETURN(const double memory,
                      NumberField(j, "memory_bytes", origin, static_cast<double>(p.memory_bytes)));
  if (memory > 9.2e18) return FieldError(origin, "memory_bytes", "is out of range");
  p.memory_bytes = static_cast<int64_t>(memory);
  KV_ASSIGN_OR_RETURN(p.memory_bandwidth_bytes_per_s,
                      NumberField(j, "memory_bandwidth_bytes_per_s", origin,
                                  p.memory_bandwidth_bytes_per_s));
  KV_ASSIGN_OR_RETURN(p.interconnect_bytes_per_s,
                      NumberField(j, "interconnect_bytes_per_s", origin, p.interconnect_bytes_per_s));
  KV_ASSIGN_OR_RETURN(p.price_per_hour, NumberField(j, "price_per_hour", origin, p.price_per_hour));
  KV_ASSIGN_OR_RETURN(const std::string compute,
                      StringField(j, "compute_dtype", origin, DTypeName(p.compute_dtype)));
  const std::optional<DType> compute_dtype = ParseDType(compute);
  if (!compute_dtype || (*compute_dtype != DType::kF32 && *compute_dtype != DType::kF16 &&
                         *compute_dtype != DType::kBF16)) {
    return FieldError(origin, "compute_dtype", "must be f32, f16 or bf16");
  }
  p.compute_dtype = *compute_dtype;
  if (j.contains("peak_flops")) {
    const json& f = j["peak_flops"];
    if (!f.is_object()) return FieldError(origin, "peak_flops", "must be an object");
    for (const auto& [key, value] : f.items()) {
      if (key != "f32" && key != "bf16" && key != "fp8" && key != "int8") {
        return FieldError(origin, "peak_flops." + key, "is not one of f32, bf16, fp8, int8");
      }
    }
    KV_ASSIGN_OR_RETURN(p.peak_flops_f32, NumberField(f, "f32", origin + " peak_flops", p.peak_flops_f32));
    KV_ASSIGN_OR_RETURN(p.peak_flops_bf16, NumberField(f, "bf16", origin + " peak_flops", p.peak_flops_bf16));
    KV_ASSIGN_OR_RETURN(p.peak_flops_fp8, NumberField(f, "fp8", origin + " peak_flops", p.peak_flops_fp8));
    KV_ASSIGN_OR_RETURN(p.peak_flops_int8, NumberField(f, "int8", origin + " peak_flops", p.peak_flops_int8));
  }
  if (j.contains("efficiency")) {
    const json& e = j["efficiency"];
    if (!e.is_object()) return FieldError(origin, "efficiency", "must be an object");
    for (const auto& [key, value] : e.items()) {
      if (key == "matmul") {
        KV_ASSIGN_OR_RETURN(p.efficiency.matmul, CurveFromJson(value, origin, "efficiency.matmul"));
      } else if (key == "prefill_attention") {
        KV_ASSIGN_OR_RETURN(p.efficiency.prefill_attention,
                            CurveFromJson(value, origin, "efficiency.prefill_attention"));
      } else if (key == "attention_default") {
        KV_ASSIGN_OR_RETURN(p.efficiency.attention_default,
                            CurveFromJson(value, origin, "efficiency.attention_default"));
      } else if (key == "attention") {
        if (!value.is_object()) return FieldError(origin, "efficiency.attention", "must be an object");
        for (const auto& [dtype, curve] : value.items()) {
          KV_ASSIGN_OR_RETURN(p.efficiency.attention[dtype],
                              CurveFromJson(curve, origin, "efficiency.attention." + dtype));
        }
      } else if (key == "step_overhead_s" || key == "token_overhead_s") {
        KV_ASSIGN_OR_RETURN(const double s, NumberField(e, key, origin + " efficiency", 0.0));
        (key == "step_overhead_s" ? p.efficiency.step_overhead_s : p.efficiency.token_overhead_s) = s;
      } else {
        return FieldError(origin, "efficiency." + key, "is not an efficiency field");
      }
    }
  }
  Status valid = ValidateHardwareProfile(p);
  if (!valid.ok()) return valid.WithContext(origin);
  return p;
}

json HardwareProfileToJson(const HardwareProfile& p) {
  json e;
  e["matmul"] = CurveToJson(p.efficiency.matmul);
  e["attention_default"] = CurveToJson(p.efficiency.attention_default);
  e["attention"] = json::object();
  if (!p.efficiency.prefill_attention.points.empty()) {
    e["prefill_attention"] = CurveToJson(p.efficiency.prefill_attention);
  }
  for (const auto& [dtype, curve] : p.efficiency.attention) e["attention"][dtype] = CurveToJson(curve);
  e["step_overhead_s"] = p.efficiency.step_overhead_s;
  e["token_overhead_s"] = p.efficiency.token_overhead_s;
  return json{{"name", p.name},
              {"description", p.description},
              {"source", p.source},
              {"memory_bytes", p.memory_bytes},
              {"memory_bandwidth_bytes_per_s", p.memory_bandwidth_bytes_per_s},
              {"peak_flops",
               {{"f32", p.peak_flops_f32},
                {"bf16", p.peak_flops_bf16},
                {"fp8", p.peak_flops_fp8},
                {"int8", p.peak_flops_int8}}},
              {"interconnect_bytes_per_s", p.interconnect_bytes_per_s},
              {"compute_dtype", DTypeName(p.compute_dtype)},
              {"price_per_hour", p.price_per_hour},
              {"price_note", p.price_note},
              {"efficiency", e}};
}

StatusOr<nlohmann::json> ReadHardwareProfileFile(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError(flag + ": cannot open '" + path + "'");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > (16u << 20)) {
    return InvalidArgumentError(flag + ": '" + path + "' is not a file of at most 16 MiB");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return NotFoundError(flag + ": cannot read '" + path + "'");
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(flag + ": '" + path + "' is not valid JSON");
  return j;
}

StatusOr<HardwareProfile> ResolveHardwareProfile(const std::string& value) {
  for (const std::string& n : HardwareProfileNames()) {
    if (value == n) return BuiltinHardwareProfile(value);
  }
  std::error_code ec;
  const bool is_file = std::filesystem::is_regular_file(value, ec);
  const bool looks_like_file = value.size() > 5 && value.substr(value.size() - 5) == ".json";
  if (!is_file && !looks_like_file) return BuiltinHardwareProfile(value);  // the name error
  KV_ASSIGN_OR_RETURN(json j, ReadHardwareProfileFile("--hardware", value));
  return HardwareProfileFromJson(j, "--hardware '" + value + "'");
}

double PeakFlops(const HardwareProfile& p, DType compute) {
  const double f32 = p.peak_flops_f32;
  const double bf16 = p.peak_flops_bf16 > 0 ? p.peak_flops_bf16 : f32;
  const double fp8 = p.peak_flops_fp8 > 0 ? p.peak_flops_fp8 : bf16;
  const double int8 = p.peak_flops_int8 > 0 ? p.peak_flops_int8 : bf16;
  double peak = 0.0;
  switch (compute) {
    case DType::kF32:
    case DType::kI32:
      peak = f32 > 0 ? f32 : bf16;
      break;
    case DType::kF16:
    case DType::kBF16:
      peak = bf16;
      break;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      peak = fp8;
      break;
    default:  // q8_0, int8 and the 4- to 6-bit GGML types compute with integer dot products
      peak = int8;
      break;
  }
  // A device with only narrower types (an int8-only accelerator) runs everything at its best.
  return peak > 0 ? peak : std::max({f32, bf16, fp8, int8});
}

}  // namespace kvserve::cost
