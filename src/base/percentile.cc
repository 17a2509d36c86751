#include "base/percentile.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace kvserve {

double PercentileOfSorted(std::span<const double> sorted, double p) {
  KV_CHECK(p >= 0.0 && p <= 100.0) << "p=" << p;
  if (sorted.empty()) return 0.0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return PercentileOfSorted(values, p);
}

}  // namespace kvserve
