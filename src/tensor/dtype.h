// Element types of weights, activations and KV storage, and scalar conversions.
// Quantized block types (Q8_0, and the 2- to 6-bit weight types of quant_blocks.h) store groups
// of DTypeBlockElems values in DTypeBlockBytes bytes with the GGML layout, so GGUF data is used
// in place.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,      // GGML Q8_0: blocks of 32 int8 with one fp16 scale (34 bytes per block)
  kFp8E4M3,   // OCP FP8 E4M3 (finite-only, max 448)
  kFp8E5M2,   // OCP FP8 E5M2 (max 57344)
  kI8,        // plain int8 (a separate scale lives beside it)
  kI32,
  // GGML weight types (layouts in quant_blocks.h): 32-value blocks ...
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  // ... and 256-value k-quant super-blocks.
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

// "f32", "f16", "bf16", "q8_0", "fp8_e4m3", "fp8_e5m2", "int8", "i32", "q4_0", "q4_1",
// "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k".
const char* DTypeName(DType dtype);
std::optional<DType> ParseDType(std::string_view name);

// Number of values in one storage block (1 for plain types, 32 for Q8_0 and Q4_0 ... Q5_1,
// 256 for the k-quants).
int64_t DTypeBlockElems(DType dtype);
// True for the GGML block types (Q8_0, Q4_0 ... Q6_K): weights only, never KV or activations.
bool IsGgmlBlockType(DType dtype);
// True for f32, f16 and bf16.
inline bool IsFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}
// Bytes of one storage block (4 for f32, 34 for Q8_0, 144 for Q4_K).
int64_t DTypeBlockBytes(DType dtype);
// Bytes of a row of `num_elems` values; num_elems must be a multiple of the block size.
int64_t DTypeRowBytes(DType dtype, int64_t num_elems);

// Q8_0 block: y[i] = d * qs[i].
inline constexpr int kQ8_0BlockElems = 32;
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQ8_0BlockElems];
};
static_assert(sizeof(BlockQ8_0) == 34);

// IEEE half <-> float, round to nearest even. Handles subnormals, inf and NaN.
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);

// bfloat16 <-> float, round to nearest even (NaN stays NaN).
inline float Bf16ToFp32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t Fp32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// OCP FP8 (OFP8 spec): E4M3 "fn" (bias 7, no infinities, 0x7f/0xff NaN, max 448) and E5M2
// (bias 15, IEEE-like infinities and NaNs, max finite 57344). Decoding is exact (a table).
// Encoding rounds to nearest even and saturates: any finite |f| above the largest finite
// value becomes +-max; NaN stays NaN; +-inf saturates too. *clipped (when given) is set when
// |f| is beyond what rounds to max anyway (above max + half the last gap: 464 for E4M3,
// 61440 for E5M2), i.e. when saturation changed the value.
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;
float Fp8E4M3ToFp32(uint8_t v);
float Fp8E5M2ToFp32(uint8_t v);
uint8_t Fp32ToFp8E4M3(float f, bool* clipped = nullptr);
uint8_t Fp32ToFp8E5M2(float f, bool* clipped = nullptr);
// 256-entry decode tables (index = the byte).
const float* Fp8E4M3Table();
const float* Fp8E5M2Table();

// Converts `num_elems` values of `dtype` starting at `src` (which must start on a block
// boundary) to float. For block types `num_elems` must be a multiple of the block size.
void DequantizeRow(DType dtype, const void* src, float* dst, int64_t num_elems);
// Converts floats to `dtype` (f32, f16, bf16, q8_0, the 2- to 6-bit GGML types of
// quant_blocks.h, or fp8 with scale 1; Q8_0 uses absmax / 127 per block; Q4_0 ... Q6_K use the
// error-minimising quantisers of quantize.h; fp8 saturates). For block types `num_elems` must be
// a multiple of the block size.
void QuantizeRow(DType dtype, const float* src, void* dst, int64_t num_elems);

}  // namespace kvserve
