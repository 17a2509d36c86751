// Element types of weights, activations and KV storage, and scalar conversions.
// Quantized block types (Q8_0) store groups of kBlockElems values in kBlockBytes bytes with
// the GGML layout, so GGUF data is used in place.
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
};

// "f32", "f16", "bf16", "q8_0", "fp8_e4m3", "fp8_e5m2", "int8", "i32".
const char* DTypeName(DType dtype);
std::optional<DType> ParseDType(std::string_view name);

// Number of values in one storage block (1 for plain types, 32 for Q8_0).
int64_t DTypeBlockElems(DType dtype);
// Bytes of one storage block (4 for f32, 34 for Q8_0).
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

// Converts `num_elems` values of `dtype` starting at `src` (which must start on a block
// boundary) to float. For Q8_0 `num_elems` must be a multiple of 32.
void DequantizeRow(DType dtype, const void* src, float* dst, int64_t num_elems);
// Converts floats to `dtype` (f32, f16, bf16 or q8_0; Q8_0 uses absmax / 127 per block).
void QuantizeRow(DType dtype, const float* src, void* dst, int64_t num_elems);

}  // namespace kvserve
