// Elementwise row helpers the forward passes share (LlamaModel, BertModel): plain loops the
// compiler vectorises; the heavy work is in kernels/.
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve {

// rows[r][i] += bias[i] for `num_rows` rows of bias.size() values.
inline void AddBias(float* rows, int64_t num_rows, const std::vector<float>& bias) {
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = rows + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] += bias[static_cast<size_t>(i)];
  }
}

inline void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

inline void MulInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= y[i];
}

}  // namespace kvserve
