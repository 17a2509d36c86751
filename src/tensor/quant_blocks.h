// The GGML quantized block layouts that GGUF files store (legacy 32-value blocks Q4_0, Q4_1,
// Q5_0, Q5_1 and the 256-value "k-quant" super-blocks Q2_K ... Q6_K), byte for byte as ggml
// defines them, so the data of a memory-mapped file is used in place. Q8_0 is in dtype.h.
// Written from the public format description (ggml-common.h); the code here is our own.
//
// Every block decodes to w = d * q (+ m), with q small unsigned or signed integers:
//   Q4_0  32 values: q = 4-bit - 8,            w = d * q
//   Q4_1  32 values: q = 4-bit,                w = d * q + m
//   Q5_0  32 values: q = 5-bit - 16,           w = d * q
//   Q5_1  32 values: q = 5-bit,                w = d * q + m
//   Q2_K  256 values in 16 sub-blocks of 16: 4-bit scale and min each,  w = d*sc*q - dmin*mn, q 2-bit
//   Q3_K  256 values in 16 sub-blocks of 16: 6-bit signed scale each,   w = d*(sc-32)*(q-4), q 3-bit
//   Q4_K  256 values in 8 sub-blocks of 32:  6-bit scale and min each,  w = d*sc*q - dmin*mn, q 4-bit
//   Q5_K  256 values in 8 sub-blocks of 32:  6-bit scale and min each,  w = d*sc*q - dmin*mn, q 5-bit
//   Q6_K  256 values in 16 sub-blocks of 16: int8 scale each,           w = d*sc*(q-32),     q 6-bit
#pragma once

#include <cstdint>

namespace kvserve {

inline constexpr int kQK = 32;         // values per legacy block (Q4_0 ... Q5_1, Q8_0)
inline constexpr int kQKK = 256;       // values per k-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K (and Q3_K)

// Q4_0: value j (< 16) is the low nibble of qs[j], value j + 16 its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQK / 2];
};
// Q4_1: as Q4_0, unsigned, plus a minimum.
struct BlockQ4_1 {
  uint16_t d, m;  // fp16
  uint8_t qs[kQK / 2];
};
// Q5_0: as Q4_0 with a fifth bit: bit j of the little-endian uint32 qh is value j's.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q2_K: scales[i] low nibble = sub-block i's scale, high nibble its min. In each half of 128
// values, value 32 * s + l (s < 4 shifts, l < 32) is bits 2s..2s+1 of qs[half * 32 + l];
// sub-block = value / 16.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
// Q3_K: the low two bits as Q2_K; the third bit of value v is bit (v / 32) of hmask[v % 32]
// (set means +4 before the -4 offset, i.e. q = low | hbit << 2, w = d * (sc - 32) * (q - 4)).
// The 16 6-bit scales: low 4 bits in scales[0..8) (nibbles), high 2 bits in scales[8..12).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32; value 64 * p + l (l < 32) is the low nibble of qs[32 * p + l],
// value 64 * p + 32 + l its high nibble. Scales and mins are 6-bit, packed (see UnpackScaleMinK4).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// Q5_K: Q4_K plus a fifth bit: value 64 * p + l has bit (2p) of qh[l], value 64 * p + 32 + l bit
// (2p + 1).
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// Q6_K: in each half of 128 values (ql += 64, qh += 32 per half), for l < 32:
//   value l:      low nibble of ql[l]      | bits 0-1 of qh[l] << 4
//   value 32 + l: low nibble of ql[32 + l] | bits 2-3 of qh[l] << 4
//   value 64 + l: high nibble of ql[l]     | bits 4-5 of qh[l] << 4
//   value 96 + l: high nibble of ql[32 + l]| bits 6-7 of qh[l] << 4
// minus 32; sub-block = value / 16 with an int8 scale.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// Sub-block j's (< 8) 6-bit scale and min of a Q4_K / Q5_K block: j < 4 in the low 6 bits of
// q[j] and q[j + 4]; j >= 4 in q[j + 4]'s nibbles with the top 2 bits of q[j - 4] and q[j].
inline void UnpackScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// The 16 6-bit scales of a Q3_K block (0..63; the weight uses scale - 32).
void UnpackScalesQ3K(const uint8_t packed[kKScaleBytes], uint8_t scales[16]);

// Dequantizes `num_blocks` consecutive blocks of each type (32 or 256 values per block).
void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t num_blocks);
void DequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t num_blocks);
void DequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t num_blocks);
void DequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t num_blocks);
void DequantizeQ2_K(const BlockQ2_K* x, float* y, int64_t num_blocks);
void DequantizeQ3_K(const BlockQ3_K* x, float* y, int64_t num_blocks);
void DequantizeQ4_K(const BlockQ4_K* x, float* y, int64_t num_blocks);
void DequantizeQ5_K(const BlockQ5_K* x, float* y, int64_t num_blocks);
void DequantizeQ6_K(const BlockQ6_K* x, float* y, int64_t num_blocks);

}  // namespace kvserve
