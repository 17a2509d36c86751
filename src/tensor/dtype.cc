#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

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
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kFp8E4M3,
                  DType::kFp8E5M2, DType::kI8, DType::kI32}) {
    if (name == DTypeName(d)) return d;
  }
  return std::nullopt;
}

int64_t DTypeBlockElems(DType dtype) { return dtype == DType::kQ8_0 ? kQ8_0BlockElems : 1; }

int64_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kFp8E4M3: case DType::kFp8E5M2: case DType::kI8: return 1;
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
    default:
      KV_CHECK(false) << "QuantizeRow: unsupported dtype " << DTypeName(dtype);
  }
}

}  // namespace kvserve
