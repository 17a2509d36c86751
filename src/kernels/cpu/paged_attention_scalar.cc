// Portable item kernel of the paged attention (SimdLevel::kScalar and non-x86 builds): the
// algorithm of paged_attention_item.inc with plain loops and std::exp.
#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/paged_attention_impl.h"
#include "tensor/dtype.h"

namespace kvserve::kernels::internal::paged::scalar {
namespace {

struct Ops {
  static constexpr bool kConvertsInLoops = false;

  static void ConvertRows(DType dtype, const uint8_t* const* src, int64_t n, int64_t head_dim,
                          int64_t padded, float* dst) {
    for (int64_t j = 0; j < n; ++j) {
      float* d = dst + j * padded;
      switch (dtype) {
        case DType::kFp8E4M3: {
          const float* table = Fp8E4M3Table();
          for (int64_t i = 0; i < head_dim; ++i) d[i] = table[src[j][i]] * (1.0f / kE4M3Factor);
          break;
        }
        case DType::kI8:
          for (int64_t i = 0; i < head_dim; ++i) d[i] = static_cast<int8_t>(src[j][i]);
          break;
        default:  // f32, f16, bf16, fp8 E5M2: exact conversions
          DequantizeRow(dtype, src[j], d, head_dim);
      }
      std::fill(d + head_dim, d + padded, 0.0f);
    }
  }

  static void Scores(const float* q, int64_t num_rows, DType row_type,
                     const uint8_t* const* k_rows, int64_t num_keys, int64_t padded,
                     float* scores, int64_t ld, PrefetchQueue* /*prefetch*/) {
    KV_CHECK(row_type == DType::kF32);  // kConvertsInLoops is false
    for (int64_t r = 0; r < num_rows; ++r) {
      const float* qr = q + r * padded;
      for (int64_t t = 0; t < num_keys; ++t) {
        const auto* kt = reinterpret_cast<const float*>(k_rows[t]);
        float s = 0.0f;
        for (int64_t d = 0; d < padded; ++d) s += qr[d] * kt[d];
        scores[r * ld + t] = s;
      }
    }
  }

  static float Max(const float* x, int64_t n) { return *std::max_element(x, x + n); }

  static float ExpSubtractSum(float* x, int64_t n, float shift) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
    return sum;
  }

  static void Multiply(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= y[i];
  }

  static void Scale(float* x, int64_t n, float c) {
    for (int64_t i = 0; i < n; ++i) x[i] *= c;
  }

  static void AccumulateV(const float* p, int64_t ld, int64_t num_rows, DType row_type,
                          const uint8_t* const* v_rows, int64_t n, int64_t padded, float* acc,
                          PrefetchQueue* /*prefetch*/) {
    KV_CHECK(row_type == DType::kF32);
    for (int64_t r = 0; r < num_rows; ++r) {
      float* a = acc + r * padded;
      for (int64_t t = 0; t < n; ++t) {
        const auto* vt = reinterpret_cast<const float*>(v_rows[t]);
        const float pt = p[r * ld + t];
        for (int64_t d = 0; d < padded; ++d) a[d] += pt * vt[d];
      }
    }
  }
};

#include "kernels/cpu/paged_attention_item.inc"

}  // namespace

void RunItem(const Problem& problem, const WorkItem& item, const WorkItem* next_item,
             ItemScratch& scratch) {
  RunItemT<Ops>(problem, item, next_item, scratch);
}

}  // namespace kvserve::kernels::internal::paged::scalar
