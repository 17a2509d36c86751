// AVX2/FMA vector helpers for the non-matmul kernels. Internal to kernels/cpu; callers must
// check internal::CurrentSimdLevel() != kScalar first. All functions accept any n >= 0 and
// unaligned pointers.
#pragma once

#include <cstdint>

namespace kvserve::kernels::internal::simd {

float SumSquares(const float* x, int64_t n);
float Sum(const float* x, int64_t n);
// sum((x[i] - mean)^2)
float SumSquaredDeviations(const float* x, int64_t n, float mean);
// out[i] = (x[i] - mean) * scale * weight[i] + bias[i]; out may alias x.
void NormalizeAffine(const float* x, float mean, float scale, const float* weight,
                     const float* bias, int64_t n, float* out);
// GELU, tanh form (kernels::Gelu); out may alias x.
void Gelu(const float* x, int64_t n, float* out);
// out[i] = x[i] * scale * weight[i]
void ScaleMul(const float* x, const float* weight, float scale, int64_t n, float* out);
// (a[i], b[i]) <- (a cos - b sin, a sin + b cos)
void RotateHalves(float* a, float* b, const float* cos, const float* sin, int64_t n);
// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i]; out may alias gate or up.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
float Max(const float* x, int64_t n);
// x[i] = exp(x[i] - shift); returns the sum.
float ExpSubtractSum(float* x, int64_t n, float shift);
// acc[i] += exp(x[i] - shift), each exp exactly as ExpSubtractSum computes it.
void AddExpSubtract(const float* x, int64_t n, float shift, float* acc);
void Scale(float* x, int64_t n, float scale);
float Dot(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i]
void Axpy(float alpha, const float* x, int64_t n, float* y);
// One attention head over `num_keys` positions: out[0..head_dim) = sum_t p_t v_t with
// p = softmax(scale * q . k_t). k and v point at position 0; consecutive positions are
// kv_stride floats apart. `scores` is scratch of num_keys floats. num_keys >= 1.
void AttendHead(const float* q, const float* k, const float* v, int64_t kv_stride,
                int64_t num_keys, int64_t head_dim, float scale, float* scores, float* out);
// exp of 8 lanes at a time applied to n values (for testing the approximation).
void Exp(const float* x, int64_t n, float* out);

}  // namespace kvserve::kernels::internal::simd
