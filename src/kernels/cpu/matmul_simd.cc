// Instantiates matmul_simd.inc (and what it includes: the Q8_0 panels, matmul_q8_panels.inc,
// the float panels, matmul_float_panels.inc, and the GGML 2- to 6-bit kernels,
// matmul_quant_simd.inc) for each SIMD level (see the comments there).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/system_memory.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* placeholders (used inside _mm512_reduce_add_ps,
// _mm512_cvtph_ps, ...) as "may be used uninitialized"; the warning is a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kvserve::kernels::internal {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
#define KV_MATMUL_VNNI 0
#include "kernels/cpu/matmul_simd.inc"
#undef KV_MATMUL_VNNI
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace avx512 {
#define KV_MATMUL_VNNI 1
#include "kernels/cpu/matmul_simd.inc"
#undef KV_MATMUL_VNNI
}  // namespace avx512
#pragma GCC pop_options

}  // namespace kvserve::kernels::internal

#else  // not x86-64: the SIMD entry points fall back to the scalar kernel.

namespace kvserve::kernels::internal {
namespace avx2 {
void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool) {
  MatmulScalar(x, m, w, y, pool);
}
void MatmulGroup(const float* x, int64_t m, const MatmulOut* outs, int count, ThreadPool* pool) {
  for (int i = 0; i < count; ++i) MatmulScalar(x, m, *outs[i].w, outs[i].y, pool);
}
std::shared_ptr<const void> PackQ8Weights(const Tensor&) { return nullptr; }
int64_t PackedQ8WeightsBytes(const Tensor&) { return 0; }
std::shared_ptr<const void> PackFloatWeights(const Tensor&) { return nullptr; }
int64_t PackedFloatWeightsBytes(const Tensor&) { return 0; }
}  // namespace avx2
namespace avx512 {
void Matmul(const float* x, int64_t m, const Tensor& w, float* y, ThreadPool* pool) {
  MatmulScalar(x, m, w, y, pool);
}
void MatmulGroup(const float* x, int64_t m, const MatmulOut* outs, int count, ThreadPool* pool) {
  for (int i = 0; i < count; ++i) MatmulScalar(x, m, *outs[i].w, outs[i].y, pool);
}
std::shared_ptr<const void> PackQ8Weights(const Tensor&) { return nullptr; }
int64_t PackedQ8WeightsBytes(const Tensor&) { return 0; }
std::shared_ptr<const void> PackFloatWeights(const Tensor&) { return nullptr; }
int64_t PackedFloatWeightsBytes(const Tensor&) { return 0; }
}  // namespace avx512
}  // namespace kvserve::kernels::internal

#endif
