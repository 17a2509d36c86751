// SIMD item kernels of the paged attention: paged_attention_item.inc with the AVX2 operations
// of paged_attention_simd.inc, compiled twice: for AVX2+FMA+F16C, and with AVX-512 enabled
// (32 registers allow bigger register tiles; scores and V rows use 16-float vectors).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/check.h"
#include "kernels/cpu/paged_attention_impl.h"
#include "tensor/dtype.h"

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* placeholders (inside _mm512_insertf64x4,
// _mm512_cvtph_ps, ...) as "may be used uninitialized"; a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kvserve::kernels::internal::paged {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
namespace {
#include "kernels/cpu/simd_math.inc"
#define KV_PAGED_VECTOR_REGISTERS 16
#include "kernels/cpu/paged_attention_simd.inc"
#undef KV_PAGED_VECTOR_REGISTERS
#include "kernels/cpu/paged_attention_item.inc"
}  // namespace
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch) {
  RunItemT<Ops>(problem, item, next_item, scratch);
}
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace avx512 {
namespace {
#include "kernels/cpu/simd_math.inc"
#define KV_PAGED_VECTOR_REGISTERS 32
#include "kernels/cpu/paged_attention_simd.inc"
#undef KV_PAGED_VECTOR_REGISTERS
#include "kernels/cpu/paged_attention_item.inc"
}  // namespace
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch) {
  RunItemT<Ops>(problem, item, next_item, scratch);
}
}  // namespace avx512
#pragma GCC pop_options

}  // namespace kvserve::kernels::internal::paged

#else  // not x86-64: CurrentSimdLevel() is always kScalar; these exist only to link.

namespace kvserve::kernels::internal::paged {
namespace avx2 {
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch) {
  scalar::RunItem(problem, item, next_item, scratch);
}
}  // namespace avx2
namespace avx512 {
void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch) {
  scalar::RunItem(problem, item, next_item, scratch);
}
}  // namespace avx512
}  // namespace kvserve::kernels::internal::paged

#endif
