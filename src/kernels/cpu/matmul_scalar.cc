#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "tensor/dtype.h"

namespace kvserve::kernels::internal {

void QuantizeActivationsQ8(const float* x, int64_t num_rows, int64_t k, int8_t* qs, float* d) {
  const int64_t num_blocks = k / kQ8_0BlockElems;
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      const float* xb = x + r * k + b * kQ8_0BlockElems;
      float amax = 0.0f;
      for (int i = 0; i < kQ8_0BlockElems; ++i) amax = std::max(amax, std::fabs(xb[i]));
      float scale = amax / 127.0f;
      float inv = scale > 0.0f ? 127.0f / amax : 0.0f;
      int8_t* q = qs + r * k + b * kQ8_0BlockElems;
      for (int i = 0; i < kQ8_0BlockElems; ++i) {
        float v = std::nearbyint(xb[i] * inv);
        q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
      // Stored as fp16, as GGML Q8_0 blocks (and llama.cpp) do.
      d[r * num_blocks + b] = Fp16ToFp32(Fp32ToFp16(scale));
    }
  }
}

void MatmulScalar(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool) {
  KV_CHECK(w.shape.size() == 2) << "Matmul weight must be 2-D, got " << w.ShapeString();
  const int64_t n = w.shape[0];
  const int64_t k = w.shape[1];
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<float> row(k);
    for (int64_t j = begin; j < end; ++j) {
      DequantizeRow(w.dtype, w.row(j), row.data(), k);
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        float acc[4] = {0, 0, 0, 0};
        int64_t c = 0;
        for (; c + 4 <= k; c += 4) {
          for (int u = 0; u < 4; ++u) acc[u] += xi[c + u] * row[c + u];
        }
        for (; c < k; ++c) acc[0] += xi[c] * row[c];
        y[i * n + j] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n, 16, body);
  } else {
    body(0, n);
  }
}

}  // namespace kvserve::kernels::internal
