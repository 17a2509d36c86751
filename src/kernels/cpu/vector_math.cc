#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>

namespace kvserve::kernels::internal::simd {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

#include "kernels/cpu/simd_math.inc"

inline float Exp1(float x) {
  alignas(32) float lanes[8] = {x};
  _mm256_store_ps(lanes, Exp8(_mm256_load_ps(lanes)));
  return lanes[0];
}

}  // namespace

float Sum(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
  float s = 0.0f;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += x[i];
  return s;
}

float SumSquaredDeviations(const float* x, int64_t n, float mean) {
  const __m256 m = _mm256_set1_ps(mean);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
  float s = 0.0f;
  for (float v : lanes) s += v;
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

void NormalizeAffine(const float* x, float mean, float scale, const float* weight,
                     const float* bias, int64_t n, float* out) {
  const __m256 m = _mm256_set1_ps(mean), sv = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m), sv);
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(d, _mm256_loadu_ps(weight + i), _mm256_loadu_ps(bias + i)));
  }
  for (; i < n; ++i) out[i] = (x[i] - mean) * scale * weight[i] + bias[i];
}

void Gelu(const float* x, int64_t n, float* out) {
  // tanh(u) = 1 - 2 / (exp(2u) + 1), with u clamped to +-10 (tanh is +-1 to float precision
  // there) so exp stays finite.
  const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), half = _mm256_set1_ps(0.5f);
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    __m256 u = _mm256_mul_ps(c, _mm256_fmadd_ps(k, v3, v));
    u = _mm256_min_ps(hi, _mm256_max_ps(lo, u));
    const __m256 e = Exp8(_mm256_mul_ps(two, u));
    const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
  }
  for (; i < n; ++i) {
    const float v = x[i];
    const float u = std::clamp(0.7978845608028654f * (v + 0.044715f * v * v * v), -10.0f, 10.0f);
    out[i] = 0.5f * v * (1.0f + (1.0f - 2.0f / (Exp1(2.0f * u) + 1.0f)));
  }
}

float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 v0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
  }
  float s = HorizontalSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

void ScaleMul(const float* x, const float* weight, float scale, int64_t n, float* out) {
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                            _mm256_loadu_ps(weight + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void RotateHalves(float* a, float* b, const float* cos, const float* sin, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x0 = _mm256_loadu_ps(a + i), x1 = _mm256_loadu_ps(b + i);
    __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
    _mm256_storeu_ps(a + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
    _mm256_storeu_ps(b + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
  }
  for (; i < n; ++i) {
    float x0 = a[i], x1 = b[i];
    a[i] = x0 * cos[i] - x1 * sin[i];
    b[i] = x0 * sin[i] + x1 * cos[i];
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 e = Exp8(_mm256_xor_ps(g, sign));
    __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + Exp1(-gate[i])) * up[i];
}

float Max(const float* x, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
  if (n >= 8) {
    __m256 mv = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mv);
    for (float v : lanes) m = std::max(m, v);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float ExpSubtractSum(float* x, int64_t n, float shift) {
  const __m256 sv = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = HorizontalSum(acc);
  for (; i < n; ++i) {
    x[i] = Exp1(x[i] - shift);
    s += x[i];
  }
  return s;
}

void AddExpSubtract(const float* x, int64_t n, float shift, float* acc) {
  const __m256 sv = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), e));
  }
  for (; i < n; ++i) acc[i] += Exp1(x[i] - shift);
}

void Scale(float* x, int64_t n, float scale) {
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
  for (; i < n; ++i) x[i] *= scale;
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  float s = HorizontalSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void AttendHead(const float* q, const float* k, const float* v, int64_t kv_stride,
                int64_t num_keys, int64_t head_dim, float scale, float* scores, float* out) {
  // Scores: q . k_t, with the dot product inlined (one call per position cost more than the
  // arithmetic at head_dim 64).
  const int64_t hd8 = head_dim / 8 * 8;
  for (int64_t t = 0; t < num_keys; ++t) {
    const float* kt = k + t * kv_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= hd8; i += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kt + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(kt + i + 8), a1);
    }
    for (; i < hd8; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kt + i), a0);
    float s = HorizontalSum(_mm256_add_ps(a0, a1));
    for (; i < head_dim; ++i) s += q[i] * kt[i];
    scores[t] = s * scale;
  }
  const float sum = ExpSubtractSum(scores, num_keys, Max(scores, num_keys));
  const float inv = 1.0f / sum;
  // Output: up to 64 columns at a time held in 8 registers across all positions.
  for (int64_t c0 = 0; c0 < hd8; c0 += 64) {
    const int nv = static_cast<int>(std::min<int64_t>(64, hd8 - c0) / 8);
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t t = 0; t < num_keys; ++t) {
      const __m256 p = _mm256_set1_ps(scores[t]);
      const float* vt = v + t * kv_stride + c0;
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        if (j < nv) acc[j] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * j), acc[j]);
      }
    }
    const __m256 iv = _mm256_set1_ps(inv);
    for (int j = 0; j < nv; ++j) _mm256_storeu_ps(out + c0 + 8 * j, _mm256_mul_ps(acc[j], iv));
  }
  for (int64_t c = hd8; c < head_dim; ++c) {
    float s = 0.0f;
    for (int64_t t = 0; t < num_keys; ++t) s += scores[t] * v[t * kv_stride + c];
    out[c] = s * inv;
  }
}

void Exp(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = Exp1(x[i]);
}

#pragma GCC pop_options

}  // namespace kvserve::kernels::internal::simd

#else  // Not x86-64: CurrentSimdLevel() is always kScalar, these exist only to link.


namespace kvserve::kernels::internal::simd {

float Sum(const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}
float SumSquaredDeviations(const float* x, int64_t n, float mean) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}
void NormalizeAffine(const float* x, float mean, float scale, const float* weight,
                     const float* bias, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * scale * weight[i] + bias[i];
}
void Gelu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  }
}

float SumSquares(const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}
void ScaleMul(const float* x, const float* weight, float scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}
void RotateHalves(float* a, float* b, const float* cos, const float* sin, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x0 = a[i], x1 = b[i];
    a[i] = x0 * cos[i] - x1 * sin[i];
    b[i] = x0 * sin[i] + x1 * cos[i];
  }
}
void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
float Max(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}
void AddExpSubtract(const float* x, int64_t n, float shift, float* acc) {
  for (int64_t i = 0; i < n; ++i) acc[i] += std::exp(x[i] - shift);
}
float ExpSubtractSum(float* x, int64_t n, float shift) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += (x[i] = std::exp(x[i] - shift));
  return s;
}
void Scale(float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}
float Dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void AttendHead(const float* q, const float* k, const float* v, int64_t kv_stride,
                int64_t num_keys, int64_t head_dim, float scale, float* scores, float* out) {
  for (int64_t t = 0; t < num_keys; ++t) scores[t] = Dot(q, k + t * kv_stride, head_dim) * scale;
  const float inv = 1.0f / ExpSubtractSum(scores, num_keys, Max(scores, num_keys));
  for (int64_t c = 0; c < head_dim; ++c) out[c] = 0.0f;
  for (int64_t t = 0; t < num_keys; ++t) Axpy(scores[t] * inv, v + t * kv_stride, head_dim, out);
}
void Exp(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

}  // namespace kvserve::kernels::internal::simd

#endif
