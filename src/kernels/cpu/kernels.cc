#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/reference/reference.h"
#include "tensor/quant_blocks.h"

namespace kvserve {

std::vector<float> RopeInvFreqs(const RopeOptions& options) {
  return reference::RopeInvFreqs(options);
}

namespace kernels {
namespace {

bool UseSimd() { return internal::CurrentSimdLevel() != internal::SimdLevel::kScalar; }

}  // namespace

bool SimdEnabled() { return UseSimd(); }

const char* SimdLevelName() { return internal::SimdLevelName(internal::CurrentSimdLevel()); }
const char* CpuSimdLevelName() { return internal::SimdLevelName(internal::DetectedSimdLevel()); }
const std::string& SimdLevelNote() { return internal::SimdLevelNote(); }
bool F16WeightsAsBf16() { return internal::PackF16AsBf16(); }

void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool) {
  KV_CHECK(w.shape.size() == 2) << "Matmul weight must be 2-D, got " << w.ShapeString();
  KV_CHECK(m >= 0);
  if (m == 0 || w.shape[0] == 0) return;
  if (w.dtype == DType::kQ8_0) KV_CHECK(w.shape[1] % kQ8_0BlockElems == 0);
  switch (internal::CurrentSimdLevel()) {
    case internal::SimdLevel::kAvx512Vnni: return internal::avx512::Matmul(x, m, w, y, pool);
    case internal::SimdLevel::kAvx2: return internal::avx2::Matmul(x, m, w, y, pool);
    case internal::SimdLevel::kScalar: return internal::MatmulScalar(x, m, w, y, pool);
  }
}

void MatmulGroup(const float* x, int64_t m, std::initializer_list<MatmulOut> outs,
                 ThreadPool* pool) {
  KV_CHECK(outs.size() >= 1 && outs.size() <= static_cast<size_t>(kMaxMatmulGroup));
  KV_CHECK(m >= 0);
  for (const MatmulOut& o : outs) {
    KV_CHECK(o.w->shape.size() == 2 && o.w->shape[1] == outs.begin()->w->shape[1])
        << "MatmulGroup weights must be 2-D with one k";
    if (o.w->dtype == DType::kQ8_0) KV_CHECK(o.w->shape[1] % kQ8_0BlockElems == 0);
  }
  if (m == 0) return;
  const int count = static_cast<int>(outs.size());
  switch (internal::CurrentSimdLevel()) {
    case internal::SimdLevel::kAvx512Vnni:
      return internal::avx512::MatmulGroup(x, m, outs.begin(), count, pool);
    case internal::SimdLevel::kAvx2:
      return internal::avx2::MatmulGroup(x, m, outs.begin(), count, pool);
    case internal::SimdLevel::kScalar:
      for (const MatmulOut& o : outs) internal::MatmulScalar(x, m, *o.w, o.y, pool);
      return;
  }
}

namespace {
bool Vnni() { return internal::CurrentSimdLevel() == internal::SimdLevel::kAvx512Vnni; }

// Whether the current level has a packed layout for w: q8_0 panels, q4_0 and q5_0 4- and 5-bit
// panels (PackQ8Weights too: they run on the Q8_0 activations), q4_k and q6_k panels, and
// float (f32, f16, bf16) panels, at AVX2 and AVX-512 VNNI.
bool HasPackedLayout(const Tensor& w) {
  if (w.shape.size() != 2 || internal::CurrentSimdLevel() == internal::SimdLevel::kScalar) {
    return false;
  }
  const bool q8_panels =
      w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0 || w.dtype == DType::kQ5_0;
  return (q8_panels && w.shape[1] % kQ8_0BlockElems == 0) ||
         ((w.dtype == DType::kQ4_K || w.dtype == DType::kQ6_K) &&
          w.shape[1] % kQKK == 0) ||
         IsFloatDType(w.dtype);
}

}  // namespace

std::shared_ptr<const void> PackMatmulWeights(const Tensor& w) {
  if (!HasPackedLayout(w)) return nullptr;
  if (IsFloatDType(w.dtype)) {
    return Vnni() ? internal::avx512::PackFloatWeights(w) : internal::avx2::PackFloatWeights(w);
  }
  if (w.dtype == DType::kQ4_K) {
    return Vnni() ? internal::avx512::PackK4Weights(w) : internal::avx2::PackK4Weights(w);
  }
  if (w.dtype == DType::kQ6_K) {
    return Vnni() ? internal::avx512::PackK6Weights(w) : internal::avx2::PackK6Weights(w);
  }
  return Vnni() ? internal::avx512::PackQ8Weights(w) : internal::avx2::PackQ8Weights(w);
}

bool PackedReplacesWeights(const Tensor& w) {
  // Every packed layout serves every row count.
  return w.packed != nullptr && HasPackedLayout(w);
}

int64_t PackedMatmulWeightsBytes(const Tensor& w) {
  if (!HasPackedLayout(w)) return 0;
  if (IsFloatDType(w.dtype)) {
    return Vnni() ? internal::avx512::PackedFloatWeightsBytes(w)
                  : internal::avx2::PackedFloatWeightsBytes(w);
  }
  if (w.dtype == DType::kQ4_K) {
    return Vnni() ? internal::avx512::PackedK4WeightsBytes(w)
                  : internal::avx2::PackedK4WeightsBytes(w);
  }
  if (w.dtype == DType::kQ6_K) {
    return Vnni() ? internal::avx512::PackedK6WeightsBytes(w)
                  : internal::avx2::PackedK6WeightsBytes(w);
  }
  return Vnni() ? internal::avx512::PackedQ8WeightsBytes(w)
                : internal::avx2::PackedQ8WeightsBytes(w);
}

void RmsNorm(const float* x, const float* weight, int64_t num_rows, int64_t n, float eps,
             float* out) {
  if (!UseSimd()) return reference::RmsNorm(x, weight, num_rows, n, eps, out);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    float mean_sq = internal::simd::SumSquares(xr, n) / static_cast<float>(n);
    float inv = 1.0f / std::sqrt(mean_sq + eps);
    internal::simd::ScaleMul(xr, weight, inv, n, out + r * n);
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t num_rows,
               int64_t n, float eps, float* out) {
  if (!UseSimd()) return reference::LayerNorm(x, weight, bias, num_rows, n, eps, out);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * n;
    const float mean = internal::simd::Sum(xr, n) / static_cast<float>(n);
    const float var = internal::simd::SumSquaredDeviations(xr, n, mean) / static_cast<float>(n);
    internal::simd::NormalizeAffine(xr, mean, 1.0f / std::sqrt(var + eps), weight, bias, n,
                                    out + r * n);
  }
}

void Gelu(const float* x, int64_t n, float* out) {
  if (!UseSimd()) return reference::Gelu(x, n, out);
  internal::simd::Gelu(x, n, out);
}

void RopeCosSin(int64_t position, const std::vector<float>& inv_freqs, float* cos_sin) {
  const int64_t num_pairs = static_cast<int64_t>(inv_freqs.size());
  for (int64_t i = 0; i < num_pairs; ++i) {
    const double angle = static_cast<double>(position) * static_cast<double>(inv_freqs[i]);
    cos_sin[i] = static_cast<float>(std::cos(angle));
    cos_sin[num_pairs + i] = static_cast<float>(std::sin(angle));
  }
}

void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, const float* cos_sin, RopeLayout layout) {
  // The reference computes its angles in double itself.
  if (!UseSimd()) return reference::Rope(x, num_heads, head_dim, position, inv_freqs, layout);
  const int64_t num_pairs = static_cast<int64_t>(inv_freqs.size());
  KV_CHECK(2 * num_pairs <= head_dim) << "rotary_dim " << 2 * num_pairs << " > " << head_dim;
  const float* cs = cos_sin;
  const float* sn = cos_sin + num_pairs;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* xh = x + h * head_dim;
    if (layout == RopeLayout::kNeox) {
      internal::simd::RotateHalves(xh, xh + num_pairs, cs, sn, num_pairs);
    } else {
      for (int64_t i = 0; i < num_pairs; ++i) {
        float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * cs[i] - x1 * sn[i];
        xh[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

void Rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
          const std::vector<float>& inv_freqs, RopeLayout layout) {
  if (!UseSimd()) return reference::Rope(x, num_heads, head_dim, position, inv_freqs, layout);
  const int64_t num_pairs = static_cast<int64_t>(inv_freqs.size());
  float stack[256];
  std::vector<float> heap;
  float* cos_sin = stack;
  if (num_pairs > 128) {
    heap.resize(static_cast<size_t>(2 * num_pairs));
    cos_sin = heap.data();
  }
  RopeCosSin(position, inv_freqs, cos_sin);
  Rope(x, num_heads, head_dim, position, inv_freqs, cos_sin, layout);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  if (!UseSimd()) return reference::SwiGlu(gate, up, n, out);
  internal::simd::SwiGlu(gate, up, n, out);
}

void Softmax(float* x, int64_t n) {
  if (!UseSimd()) return reference::Softmax(x, n);
  if (n <= 0) return;
  float max_value = internal::simd::Max(x, n);
  float sum = internal::simd::ExpSubtractSum(x, n, max_value);
  internal::simd::Scale(x, n, 1.0f / sum);
}

float Dot(const float* a, const float* b, int64_t n) {
  if (!UseSimd()) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
  }
  return internal::simd::Dot(a, b, n);
}

void EmbeddingLookup(const Tensor& table, int64_t token, float* out) {
  reference::EmbeddingLookup(table, token, out);  // one row: DequantizeRow is enough
}

void DenseAttention(const float* q, const float* k, const float* v, const AttentionShape& shape,
                    float* out, ThreadPool* pool) {
  if (!UseSimd()) return reference::DenseAttention(q, k, v, shape, out, pool);
  KV_CHECK(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0);
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t kv_stride = shape.num_kv_heads * hd;
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / shape.num_heads;
      const int64_t h = item % shape.num_heads;
      const float* qh = q + item * hd;
      float* o = out + item * hd;
      const int64_t num_visible = std::min(shape.num_keys, shape.first_pos + i + 1);
      if (num_visible <= 0) {
        std::fill(o, o + hd, 0.0f);
        continue;
      }
      const float* kh = k + (h / group) * hd;
      const float* vh = v + (h / group) * hd;
      scores.resize(num_visible);
      internal::simd::AttendHead(qh, kh, vh, kv_stride, num_visible, hd, shape.scale,
                                 scores.data(), o);
    }
  };
  const int64_t num_items = shape.num_queries * shape.num_heads;
  if (pool != nullptr) {
    pool->ParallelFor(num_items, 1, body);
  } else {
    body(0, num_items);
  }
}

}  // namespace kernels
}  // namespace kvserve
