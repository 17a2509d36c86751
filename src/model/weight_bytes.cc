#include "model/weight_bytes.h"

#include <algorithm>

#include "base/str_format.h"

namespace kvserve {

std::string FormatWeightBytes(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return StrFormat("%lld B", static_cast<long long>(bytes));
  if (b < 0.1 * kMiB) return StrFormat("%.1f KiB", b / 1024.0);
  if (b < 1024.0 * kMiB) return StrFormat("%.1f MiB", b / kMiB);
  return StrFormat("%.2f GiB", b / (1024.0 * kMiB));
}

WeightBytesByType TallyWeightBytes(const std::vector<std::pair<DType, int64_t>>& tensors) {
  std::map<DType, int64_t> by_type;
  WeightBytesByType out;
  for (const auto& [dtype, bytes] : tensors) {
    by_type[dtype] += bytes;
    out.total_bytes += bytes;
  }
  out.by_type.assign(by_type.begin(), by_type.end());
  std::stable_sort(out.by_type.begin(), out.by_type.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

WeightBytesByType TallyWeightBytes(const std::map<std::string, Tensor>& tensors) {
  std::vector<std::pair<DType, int64_t>> pairs;
  pairs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) pairs.emplace_back(t.dtype, t.num_bytes());
  return TallyWeightBytes(pairs);
}

WeightBytesByType TallyWeightBytes(const std::vector<GgufTensorInfo>& tensors) {
  std::vector<std::pair<DType, int64_t>> pairs;
  pairs.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) {
    pairs.emplace_back(t.dtype, static_cast<int64_t>(t.num_bytes));
  }
  return TallyWeightBytes(pairs);
}

std::string WeightBytesByType::main_type() const {
  return by_type.empty() ? "none" : DTypeName(by_type.front().first);
}

std::string WeightBytesByType::ToString() const {
  if (by_type.empty()) return "0 B";
  std::string out = FormatWeightBytes(total_bytes) + " (";
  if (by_type.size() == 1) return out + DTypeName(by_type.front().first) + ")";
  for (size_t i = 0; i < by_type.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::string(DTypeName(by_type[i].first)) + " " + FormatWeightBytes(by_type[i].second);
  }
  return out + ")";
}

}  // namespace kvserve
