// Test and benchmark only: random weight matrices of the GGML 2- to 6-bit block types
// (quant_blocks.h). Every bit pattern is a valid block, so blocks are random bytes with their
// fp16 scale fields replaced by finite values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/tensor.h"

namespace kvserve {

// Byte offsets of a block type's fp16 scale fields (d, and dmin / m where it has one) and of
// its quantized-value fields (the rest: bytes that only hold q bits).
struct GgmlBlockFields {
  std::vector<int> fp16_offsets;
  std::vector<std::pair<int, int>> q_ranges;  // [offset, offset + size)
};

inline GgmlBlockFields BlockFields(DType dtype) {
#define KV_RANGE(T, f) std::pair<int, int>{static_cast<int>(offsetof(T, f)), \
                                            static_cast<int>(offsetof(T, f) + sizeof(T::f))}
  switch (dtype) {
    case DType::kQ4_0: return {{0}, {KV_RANGE(BlockQ4_0, qs)}};
    case DType::kQ4_1: return {{0, 2}, {KV_RANGE(BlockQ4_1, qs)}};
    case DType::kQ5_0: return {{0}, {KV_RANGE(BlockQ5_0, qh), KV_RANGE(BlockQ5_0, qs)}};
    case DType::kQ5_1: return {{0, 2}, {KV_RANGE(BlockQ5_1, qh), KV_RANGE(BlockQ5_1, qs)}};
    case DType::kQ2_K:
      return {{static_cast<int>(offsetof(BlockQ2_K, d)),
               static_cast<int>(offsetof(BlockQ2_K, dmin))},
              {KV_RANGE(BlockQ2_K, qs)}};
    case DType::kQ3_K:
      return {{static_cast<int>(offsetof(BlockQ3_K, d))},
              {KV_RANGE(BlockQ3_K, hmask), KV_RANGE(BlockQ3_K, qs)}};
    case DType::kQ4_K: return {{0, 2}, {KV_RANGE(BlockQ4_K, qs)}};
    case DType::kQ5_K: return {{0, 2}, {KV_RANGE(BlockQ5_K, qh), KV_RANGE(BlockQ5_K, qs)}};
    case DType::kQ6_K:
      return {{static_cast<int>(offsetof(BlockQ6_K, d))},
              {KV_RANGE(BlockQ6_K, ql), KV_RANGE(BlockQ6_K, qh)}};
    default: return {};
  }
#undef KV_RANGE
}

struct RandomGgmlOptions {
  float max_scale = 0.05f;  // |fp16 scales| drawn log-uniformly in [max_scale / 100, max_scale]
  bool extreme = false;     // instead: 0, the smallest subnormal, the smallest normal, 1, +-65504
};

// A [n, k] tensor of `dtype` (a GGML block type) with random blocks.
inline Tensor RandomGgmlWeights(DType dtype, int64_t n, int64_t k, std::mt19937& rng,
                                const RandomGgmlOptions& options = {}) {
  Tensor w = Tensor::Allocate(dtype, {n, k});
  auto* bytes = static_cast<uint8_t*>(w.mutable_data());
  const int64_t total = w.num_bytes();
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < total; ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
  const GgmlBlockFields fields = BlockFields(dtype);
  const int64_t block_bytes = DTypeBlockBytes(dtype);
  std::uniform_real_distribution<float> log_scale(std::log(options.max_scale / 100.0f),
                                                  std::log(options.max_scale));
  const uint16_t kExtremes[] = {0x0000, 0x0001, 0x0400, 0x3c00, 0x7bff, 0xfbff};
  std::uniform_int_distribution<int> pick(0, 5);
  for (int64_t b = 0; b < total / block_bytes; ++b) {
    for (int offset : fields.fp16_offsets) {
      uint16_t h;
      if (options.extreme) {
        h = kExtremes[pick(rng)];
      } else {
        const float v = std::exp(log_scale(rng)) * (byte(rng) & 1 ? -1.0f : 1.0f);
        h = Fp32ToFp16(v);
      }
      std::memcpy(bytes + b * block_bytes + offset, &h, sizeof(h));
    }
  }
  return w;
}

// A copy of `w` with every quantized value's bits zero: its dequantized values are each
// weight's offset term (the part that does not scale with q).
inline Tensor ZeroQuantBits(const Tensor& w) {
  Tensor z = Tensor::Allocate(w.dtype, w.shape);
  auto* bytes = static_cast<uint8_t*>(z.mutable_data());
  std::memcpy(bytes, w.data, static_cast<size_t>(w.num_bytes()));
  const GgmlBlockFields fields = BlockFields(w.dtype);
  const int64_t block_bytes = DTypeBlockBytes(w.dtype);
  for (int64_t b = 0; b < w.num_bytes() / block_bytes; ++b) {
    for (auto [begin, end] : fields.q_ranges) {
      std::memset(bytes + b * block_bytes + begin, 0, static_cast<size_t>(end - begin));
    }
  }
  return z;
}

}  // namespace kvserve
