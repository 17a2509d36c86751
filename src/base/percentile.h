// Percentiles of a sample, with one definition for every report (bench serve's TTFT/TPOT/ITL,
// sim's queueing and TTFT, eval's KLD): linear interpolation between closest ranks, NumPy's
// default (`numpy.percentile(v, p)`, method "linear"), which llama.cpp's KLD report and vLLM's
// benchmark also use. Over the n values sorted ascending, v[0] <= ... <= v[n - 1], the p-th
// percentile is at rank r = p / 100 * (n - 1):
//   Percentile(v, p) = v[floor(r)] + (v[floor(r) + 1] - v[floor(r)]) * (r - floor(r))
// so p = 0 is the minimum, p = 100 the maximum, p = 50 the median (the mean of the two middle
// values when n is even), and the result is always within [min, max].
//
// Plain functions; no state.
#pragma once

#include <span>
#include <vector>

namespace kvserve {

// The p-th percentile (0 <= p <= 100; KV_CHECK) of `values`; 0 for an empty sample.
double Percentile(std::vector<double> values, double p);

// The same over values already sorted ascending (not checked, not copied).
double PercentileOfSorted(std::span<const double> sorted, double p);

}  // namespace kvserve
