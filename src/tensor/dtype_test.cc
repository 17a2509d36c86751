#include "tensor/dtype.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(Fp8Test, E4M3KnownValues) {
  EXPECT_EQ(Fp8E4M3ToFp32(0x00), 0.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(0x38), 1.0f);        // exp 7 (bias 7), mantissa 0
  EXPECT_EQ(Fp8E4M3ToFp32(0x7e), 448.0f);      // largest finite
  EXPECT_EQ(Fp8E4M3ToFp32(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFp32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFp32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFp32(0xff)));
}

TEST(Fp8Test, E5M2KnownValues) {
  EXPECT_EQ(Fp8E5M2ToFp32(0x3c), 1.0f);
  EXPECT_EQ(Fp8E5M2ToFp32(0x7b), 57344.0f);
  EXPECT_EQ(Fp8E5M2ToFp32(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(Fp8E5M2ToFp32(0x7c)));
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFp32(0x7d)));
  // E5M2 is the top byte of an IEEE half.
  for (int i = 0; i < 256; ++i) {
    float f = Fp8E5M2ToFp32(static_cast<uint8_t>(i));
    float h = Fp16ToFp32(static_cast<uint16_t>(i << 8));
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(f)) << i;
    } else {
      EXPECT_EQ(f, h) << i;
    }
  }
}

// Every finite code encodes back to itself, and every float rounds to a nearest code (ties to
// the even code), checked against a brute-force search over the table.
void CheckRoundTripAndNearest(const float* table, uint8_t (*encode)(float, bool*), float max,
                              float clip_threshold) {
  for (int i = 0; i < 256; ++i) {
    const float v = table[i];
    if (!std::isfinite(v)) continue;
    const uint8_t back = encode(v, nullptr);
    if (v == 0.0f) {
      EXPECT_EQ(table[back], 0.0f);
    } else {
      EXPECT_EQ(back, i) << "value " << v;
    }
  }
  uint32_t state = 12345;
  for (int trial = 0; trial < 200000; ++trial) {
    state = state * 1664525u + 1013904223u;
    // Log-uniform magnitudes across the whole range plus sign.
    const float mag = std::ldexp(1.0f, static_cast<int>(state % 40) - 22) *
                      (1.0f + static_cast<float>((state >> 8) & 0xffff) / 65536.0f);
    const float x = (state & 0x80000000u) ? -mag : mag;
    bool clipped = false;
    const uint8_t code = encode(x, &clipped);
    EXPECT_EQ(clipped, std::fabs(x) > clip_threshold) << x;
    if (std::fabs(x) > max) {
      EXPECT_EQ(table[code], x > 0 ? max : -max);
      continue;
    }
    float best_err = INFINITY;
    for (int i = 0; i < 256; ++i) {
      if (std::isfinite(table[i])) best_err = std::min(best_err, std::fabs(table[i] - x));
    }
    ASSERT_EQ(std::fabs(table[code] - x), best_err) << "x=" << x << " got " << table[code];
  }
}

TEST(Fp8Test, E4M3RoundsToNearestAndSaturates) {
  CheckRoundTripAndNearest(Fp8E4M3Table(), Fp32ToFp8E4M3, kFp8E4M3Max, 464.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(Fp32ToFp8E4M3(1e9f)), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(Fp32ToFp8E4M3(-INFINITY)), -448.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFp32(Fp32ToFp8E4M3(NAN))));
  // Ties go to the even mantissa: 1 + 1/16 is halfway between 1 and 1.125.
  EXPECT_EQ(Fp8E4M3ToFp32(Fp32ToFp8E4M3(1.0625f)), 1.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(Fp32ToFp8E4M3(1.1875f)), 1.25f);
}

TEST(Fp8Test, E5M2RoundsToNearestAndSaturates) {
  CheckRoundTripAndNearest(Fp8E5M2Table(), Fp32ToFp8E5M2, kFp8E5M2Max, 61440.0f);
}

TEST(Fp8Test, RowsRoundTrip) {
  const float src[5] = {0.5f, -3.0f, 448.0f, 1e-3f, 0.0f};  // 1e-3 is subnormal
  uint8_t q[5];
  float back[5];
  QuantizeRow(DType::kFp8E4M3, src, q, 5);
  DequantizeRow(DType::kFp8E4M3, q, back, 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) / 16 + std::ldexp(1.0f, -10));
}

}  // namespace
}  // namespace kvserve
