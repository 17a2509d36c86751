// Matmul implementations behind kernels::Matmul, one per SIMD level. Internal to kernels/cpu.
#pragma once

#include <cstdint>
#include <memory>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/tensor.h"

namespace kvserve::kernels::internal {

// Portable: dequantizes each weight row and runs float dot products. Threads split rows of W.
void MatmulScalar(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool);

// PackQ8Weights / PackK4Weights / PackK6Weights / PackFloatWeights (and their sizes): kernels::PackMatmulWeights at that level
// (its own panel layout; null on builds without SIMD). A packed layout is read only by the level that
// made it.
namespace avx2 {
void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool);
void MatmulGroup(const float* x, int64_t m, const MatmulOut* outs, int count, ThreadPool* pool);
std::shared_ptr<const void> PackQ8Weights(const Tensor& w);  // q8_0, q4_0, q5_0
int64_t PackedQ8WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackK4Weights(const Tensor& w);  // q4_k
int64_t PackedK4WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackK6Weights(const Tensor& w);  // q6_k
int64_t PackedK6WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackFloatWeights(const Tensor& w);  // f32, f16, bf16
int64_t PackedFloatWeightsBytes(const Tensor& w);
}  // namespace avx2

namespace avx512 {
void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool);
void MatmulGroup(const float* x, int64_t m, const MatmulOut* outs, int count, ThreadPool* pool);
std::shared_ptr<const void> PackQ8Weights(const Tensor& w);  // q8_0, q4_0, q5_0
int64_t PackedQ8WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackK4Weights(const Tensor& w);  // q4_k
int64_t PackedK4WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackK6Weights(const Tensor& w);  // q6_k
int64_t PackedK6WeightsBytes(const Tensor& w);
std::shared_ptr<const void> PackFloatWeights(const Tensor& w);  // f32, f16, bf16
int64_t PackedFloatWeightsBytes(const Tensor& w);
}  // namespace avx512

// Quantizes `num_rows` rows of k floats (k a multiple of 32) to Q8_0-style blocks: int8 values
// at qs[r * k + c] and one float scale per block at d[r * (k / 32) + b] (absmax / 127, values
// rounded to nearest even). Used for the int8 x int8 Q8_0 matmul.
void QuantizeActivationsQ8(const float* x, int64_t num_rows, int64_t k, int8_t* qs, float* d);

}  // namespace kvserve::kernels::internal
