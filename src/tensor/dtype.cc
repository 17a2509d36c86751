#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace kvserve {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kFp8E4M3: return "fp8_e4m3";
    case DType::kFp8E5M2: return "fp8_e5m2";
    case DType::kI8: return "int8";
    case DType::kI32: return "i32";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ5_0: return "q5_0";
    case DType::kQ5_1: return "q5_1";
    case DType::kQ2_K: return "q2_k";
    case DType::kQ3_K: return "q3_k";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kFp8E4M3,
                  DType::kFp8E5M2, DType::kI8, DType::kI32, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

int64_t DTypeBlockElems(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0:
    case DType::kQ5_1:
      return kQK;
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K:
    case DType::kQ6_K:
      return kQKK;
    default:
      return 1;
  }
}

bool IsGgmlBlockType(DType dtype) { return DTypeBlockElems(dtype) > 1; }

int64_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kFp8E4M3: case DType::kFp8E5M2: case DType::kI8: return 1;
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ4_1: return sizeof(BlockQ4_1);
    case DType::kQ5_0: return sizeof(BlockQ5_0);
    case DType::kQ5_1: return sizeof(BlockQ5_1);
    case DType::kQ2_K: return sizeof(BlockQ2_K);
    case DType::kQ3_K: return sizeof(BlockQ3_K);
    case DType::kQ4_K: return sizeof(BlockQ4_K);
    case DType::kQ5_K: return sizeof(BlockQ5_K);
    case DType::kQ6_K: return sizeof(BlockQ6_K);
  }
  return 0;
}

int64_t DTypeRowBytes(DType dtype, int64_t num_elems) {
  int64_t block = DTypeBlockElems(dtype);
  KV_CHECK(num_elems % block == 0) << DTypeName(dtype) << " row of " << num_elems;
  return num_elems / block * DTypeBlockBytes(dtype);
}

float Fp16ToFp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t Fp32ToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (abs < 0x38800000) {  // result is subnormal or zero
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);  // < half of smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(exp);  // 113 - exp + 13
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t r = abs - 0x38000000;  // rebias exponent 127 -> 15
  r += 0xfff + ((r >> 13) & 1);   // round to nearest even
  return static_cast<uint16_t>(sign | (r >> 13));
}

namespace {

// Format of one FP8 flavour: mantissa bits, exponent bias, largest finite code (without sign).
// clip_threshold: max_value plus half the gap below it; magnitudes up to it round to max_value
// anyway, beyond it they saturate.
struct Fp8Format {
  int mant_bits;
  int bias;
  uint8_t max_code;
  float max_value;
  float clip_threshold;
};
constexpr Fp8Format kE4M3{3, 7, 0x7e, kFp8E4M3Max, 464.0f};
constexpr Fp8Format kE5M2{2, 15, 0x7b, kFp8E5M2Max, 61440.0f};

float DecodeFp8(uint8_t v, const Fp8Format& fmt, bool ieee_specials) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp_bits = 7 - fmt.mant_bits;
  const int exp = (v >> fmt.mant_bits) & ((1 << exp_bits) - 1);
  const int mant = v & ((1 << fmt.mant_bits) - 1);
  const int max_exp = (1 << exp_bits) - 1;
  if (ieee_specials && exp == max_exp) {
    return mant == 0 ? sign * INFINITY : NAN;
  }
  if (!ieee_specials && (v & 0x7f) == 0x7f) return NAN;
  const float frac = static_cast<float>(mant) / static_cast<float>(1 << fmt.mant_bits);
  if (exp == 0) return sign * std::ldexp(frac, 1 - fmt.bias);
  return sign * std::ldexp(1.0f + frac, exp - fmt.bias);
}

uint8_t EncodeFp8(float f, const Fp8Format& fmt, bool* clipped) {
  if (std::isnan(f)) return 0x7f;  // a NaN code in both formats
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a > fmt.max_value) {
    if (clipped != nullptr && a > fmt.clip_threshold) *clipped = true;
    return sign | fmt.max_code;
  }
  const int steps = 1 << fmt.mant_bits;
  const float min_normal = std::ldexp(1.0f, 1 - fmt.bias);
  int code;
  if (a < min_normal) {
    // Subnormals are multiples of min_normal / steps; rounding up to `steps` lands exactly on
    // the smallest normal's code.
    code = static_cast<int>(std::nearbyint(a / min_normal * static_cast<float>(steps)));
  } else {
    int e2;
    const float m = std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
    int exp = e2 - 1;
    int q = static_cast<int>(std::nearbyint((m * 2.0f - 1.0f) * static_cast<float>(steps)));
    if (q == steps) {
      q = 0;
      ++exp;
    }
    code = ((exp + fmt.bias) << fmt.mant_bits) | q;
  }
  if (code > fmt.max_code) code = fmt.max_code;  // rounding just above max: saturate
  return static_cast<uint8_t>(sign | code);
}

struct Fp8Tables {
  float e4m3[256];
  float e5m2[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = DecodeFp8(static_cast<uint8_t>(i), kE4M3, /*ieee_specials=*/false);
      e5m2[i] = DecodeFp8(static_cast<uint8_t>(i), kE5M2, /*ieee_specials=*/true);
    }
  }
};

const Fp8Tables& Tables() {
  static const Fp8Tables tables;
  return tables;
}

}  // namespace

const float* Fp8E4M3Table() { return Tables().e4m3; }
const float* Fp8E5M2Table() { return Tables().e5m2; }
float Fp8E4M3ToFp32(uint8_t v) { return Tables().e4m3[v]; }
float Fp8E5M2ToFp32(uint8_t v) { return Tables().e5m2[v]; }
uint8_t Fp32ToFp8E4M3(float f, bool* clipped) { return EncodeFp8(f, kE4M3, clipped); }
uint8_t Fp32ToFp8E5M2(float f, bool* clipped) { return EncodeFp8(f, kE5M2, clipped); }

void DequantizeRow(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      KV_CHECK(n % kQ8_0BlockElems == 0);
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kQ8_0BlockElems; ++i) {
        float d = Fp16ToFp32(b[i].d);
        for (int j = 0; j < kQ8_0BlockElems; ++j) dst[i * kQ8_0BlockElems + j] = d * b[i].qs[j];
      }
      return;
    }
#define KV_DEQUANT_CASE(TYPE)                                                   \
    case DType::k##TYPE:                                                        \
      KV_CHECK(n % DTypeBlockElems(dtype) == 0) << DTypeName(dtype) << " row of " << n; \
      Dequantize##TYPE(static_cast<const Block##TYPE*>(src), dst, n / DTypeBlockElems(dtype)); \
      return;
    KV_DEQUANT_CASE(Q4_0)
    KV_DEQUANT_CASE(Q4_1)
    KV_DEQUANT_CASE(Q5_0)
    KV_DEQUANT_CASE(Q5_1)
    KV_DEQUANT_CASE(Q2_K)
    KV_DEQUANT_CASE(Q3_K)
    KV_DEQUANT_CASE(Q4_K)
    KV_DEQUANT_CASE(Q5_K)
    KV_DEQUANT_CASE(Q6_K)
#undef KV_DEQUANT_CASE
    case DType::kFp8E4M3: case DType::kFp8E5M2: {
      const uint8_t* b = static_cast<const uint8_t*>(src);
      const float* table = dtype == DType::kFp8E4M3 ? Fp8E4M3Table() : Fp8E5M2Table();
      for (int64_t i = 0; i < n; ++i) dst[i] = table[b[i]];
      return;
    }
    default:
      KV_CHECK(false) << "DequantizeRow: unsupported dtype " << DTypeName(dtype);
  }
}

void QuantizeRow(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToFp16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToBf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      KV_CHECK(n % kQ8_0BlockElems == 0);
      BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t i = 0; i < n / kQ8_0BlockElems; ++i) {
        const float* x = src + i * kQ8_0BlockElems;
        float amax = 0.0f;
        for (int j = 0; j < kQ8_0BlockElems; ++j) amax = std::max(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = Fp32ToFp16(d);
        for (int j = 0; j < kQ8_0BlockElems; ++j) {
          b[i].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
        }
      }
      return;
    }
#define KV_QUANT_CASE(TYPE)                                                     \
    case DType::k##TYPE:                                                        \
      KV_CHECK(n % DTypeBlockElems(dtype) == 0) << DTypeName(dtype) << " row of " << n; \
      Quantize##TYPE(src, static_cast<Block##TYPE*>(dst), n / DTypeBlockElems(dtype)); \
      return;
    KV_QUANT_CASE(Q4_0)
    KV_QUANT_CASE(Q4_1)
    KV_QUANT_CASE(Q5_0)
    KV_QUANT_CASE(Q5_1)
    KV_QUANT_CASE(Q2_K)
    KV_QUANT_CASE(Q3_K)
    KV_QUANT_CASE(Q4_K)
    KV_QUANT_CASE(Q5_K)
    KV_QUANT_CASE(Q6_K)
#undef KV_QUANT_CASE
    case DType::kFp8E4M3: case DType::kFp8E5M2: {
      uint8_t* b = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        b[i] = dtype == DType::kFp8E4M3 ? Fp32ToFp8E4M3(src[i]) : Fp32ToFp8E5M2(src[i]);
      }
      return;
    }
    default:
      KV_CHECK(false) << "QuantizeRow: unsupported dtype " << DTypeName(dtype);
  }
}

}  // namespace kvserve
