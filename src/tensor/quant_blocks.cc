#include "tensor/quant_blocks.h"

#include <cstring>

#include "tensor/dtype.h"

namespace kvserve {

void UnpackScalesQ3K(const uint8_t packed[kKScaleBytes], uint8_t scales[16]) {
  for (int i = 0; i < 16; ++i) {
    const uint8_t low = i < 8 ? (packed[i] & 0x0f) : (packed[i - 8] >> 4);
    const uint8_t high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = static_cast<uint8_t>(low | (high << 4));
  }
}

void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, y += kQK) {
    const float d = Fp16ToFp32(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((x[b].qs[j] & 0x0f) - 8);
      y[j + kQK / 2] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
    }
  }
}

void DequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, y += kQK) {
    const float d = Fp16ToFp32(x[b].d);
    const float m = Fp16ToFp32(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(x[b].qs[j] & 0x0f) + m;
      y[j + kQK / 2] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
    }
  }
}

namespace {
// The 5-bit values of a Q5_0 / Q5_1 block (0..31).
inline void Unpack5(const uint8_t qh_bytes[4], const uint8_t qs[kQK / 2], int q[kQK]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}
}  // namespace

void DequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t num_blocks) {
  int q[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, y += kQK) {
    const float d = Fp16ToFp32(x[b].d);
    Unpack5(x[b].qh, x[b].qs, q);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j] - 16);
  }
}

void DequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t num_blocks) {
  int q[kQK];
  for (int64_t b = 0; b < num_blocks; ++b, y += kQK) {
    const float d = Fp16ToFp32(x[b].d);
    const float m = Fp16ToFp32(x[b].m);
    Unpack5(x[b].qh, x[b].qs, q);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void DequantizeQ2_K(const BlockQ2_K* x, float* y, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, y += kQKK) {
    const float d = Fp16ToFp32(x[b].d);
    const float dmin = Fp16ToFp32(x[b].dmin);
    for (int v = 0; v < kQKK; ++v) {
      const int half = v / 128, shift = (v % 128) / 32, l = v % 32;
      const int q = (x[b].qs[half * 32 + l] >> (2 * shift)) & 3;
      const uint8_t sc = x[b].scales[v / 16];
      y[v] = d * static_cast<float>(sc & 0x0f) * static_cast<float>(q) -
             dmin * static_cast<float>(sc >> 4);
    }
  }
}

void DequantizeQ3_K(const BlockQ3_K* x, float* y, int64_t num_blocks) {
  uint8_t scales[16];
  for (int64_t b = 0; b < num_blocks; ++b, y += kQKK) {
    const float d = Fp16ToFp32(x[b].d);
    UnpackScalesQ3K(x[b].scales, scales);
    for (int v = 0; v < kQKK; ++v) {
      const int half = v / 128, shift = (v % 128) / 32, l = v % 32;
      const int low = (x[b].qs[half * 32 + l] >> (2 * shift)) & 3;
      const int high = (x[b].hmask[l] >> (v / 32)) & 1;
      const int q = (low | (high << 2)) - 4;
      y[v] = d * static_cast<float>(scales[v / 16] - 32) * static_cast<float>(q);
    }
  }
}

namespace {
// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; `high_bit(b, s, l)` is the
// fifth bit of value 32 * s + l of block b (0 for Q4_K).
template <class Block, class HighBit>
void DequantizeK4Family(const Block* x, float* y, int64_t num_blocks, HighBit high_bit) {
  for (int64_t b = 0; b < num_blocks; ++b, y += kQKK) {
    const float d = Fp16ToFp32(x[b].d);
    const float dmin = Fp16ToFp32(x[b].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, mn;
      UnpackScaleMinK4(s, x[b].scales, &sc, &mn);
      const float scale = d * static_cast<float>(sc);
      const float min = dmin * static_cast<float>(mn);
      const uint8_t* q = x[b].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0f) | (high_bit(x[b], s, l) << 4);
        y[32 * s + l] = scale * static_cast<float>(v) - min;
      }
    }
  }
}
}  // namespace

void DequantizeQ4_K(const BlockQ4_K* x, float* y, int64_t num_blocks) {
  DequantizeK4Family(x, y, num_blocks, [](const BlockQ4_K&, int, int) { return 0; });
}

void DequantizeQ5_K(const BlockQ5_K* x, float* y, int64_t num_blocks) {
  DequantizeK4Family(x, y, num_blocks,
                     [](const BlockQ5_K& blk, int s, int l) { return (blk.qh[l] >> s) & 1; });
}

void DequantizeQ6_K(const BlockQ6_K* x, float* y, int64_t num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b, y += kQKK) {
    const float d = Fp16ToFp32(x[b].d);
    for (int v = 0; v < kQKK; ++v) {
      const int half = v / 128, t = (v % 128) / 32, l = v % 32;
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      const int low = (ql[l + 32 * (t % 2)] >> (4 * (t / 2))) & 0x0f;
      const int high = (qh[l] >> (2 * t)) & 3;
      const int q = (low | (high << 4)) - 32;
      y[v] = d * static_cast<float>(x[b].scales[v / 16]) * static_cast<float>(q);
    }
  }
}

}  // namespace kvserve
