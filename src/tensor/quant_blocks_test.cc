// Dequantisation of every GGML block type, bit-exact against an element-at-a-time reference
// written here from the format description (ggml-common.h), independently of quant_blocks.cc:
// fields are read by byte offset, fp16 decoded with ldexp, and for value v of a block the
// reference finds its bits and its (sub-block) scale and min, then computes the float in the
// order ggml does ((d * scale) * q - dmin * min). Blocks are random and extreme: largest and
// smallest-subnormal fp16 scales, negative, zero, inf and NaN scales, all-ones bytes, scales and
// mins at their largest codes, and every hmask / qh byte pattern.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace kvserve {
namespace {

// IEEE half, decoded without dtype.cc.
float RefHalf(const uint8_t* p) {
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  float mag;
  if (exp == 31) {
    mag = mant == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else {
    mag = std::ldexp(static_cast<float>(mant + 1024), exp - 25);
  }
  return sign ? -mag : mag;
}

float F(int v) { return static_cast<float>(v); }

// Value v of one block of `type` at `b` (the block's bytes), from the format description.
float RefValue(DType type, const uint8_t* b, int v) {
  switch (type) {
    case DType::kQ4_0: {  // d | qs[16]: value j < 16 low nibble of qs[j], j >= 16 high of qs[j-16]
      const int q = v < 16 ? (b[2 + v] & 15) : (b[2 + v - 16] >> 4);
      return F(q - 8) * RefHalf(b);
    }
    case DType::kQ4_1: {  // d | m | qs[16]
      const int q = v < 16 ? (b[4 + v] & 15) : (b[4 + v - 16] >> 4);
      return F(q) * RefHalf(b) + RefHalf(b + 2);
    }
    case DType::kQ5_0: {  // d | qh[4] (bit v: value v's fifth bit) | qs[16]
      const int low = v < 16 ? (b[6 + v] & 15) : (b[6 + v - 16] >> 4);
      const int high = (b[2 + v / 8] >> (v % 8)) & 1;
      return F((low | high << 4) - 16) * RefHalf(b);
    }
    case DType::kQ5_1: {  // d | m | qh[4] | qs[16]
      const int low = v < 16 ? (b[8 + v] & 15) : (b[8 + v - 16] >> 4);
      const int high = (b[4 + v / 8] >> (v % 8)) & 1;
      return F(low | high << 4) * RefHalf(b) + RefHalf(b + 2);
    }
    case DType::kQ2_K: {  // scales[16] | qs[64] | d | dmin
      const int q = (b[16 + 32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
      const int sc = b[v / 16] & 15, mn = b[v / 16] >> 4;
      return RefHalf(b + 80) * F(sc) * F(q) - RefHalf(b + 82) * F(mn);
    }
    case DType::kQ3_K: {  // hmask[32] | qs[64] | scales[12] | d
      const int low = (b[32 + 32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
      const int high = (b[v % 32] >> (v / 32)) & 1;
      const int j = v / 16;
      const uint8_t* s = b + 96;
      const int sc4 = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
      const int sc2 = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      return RefHalf(b + 108) * F((sc4 | sc2 << 4) - 32) * F((low | high << 2) - 4);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {  // d | dmin | scales[12] | (Q5_K: qh[32]) | qs[128]
      const bool five = type == DType::kQ5_K;
      const uint8_t* qs = b + (five ? 48 : 16);
      const int j = v / 32;
      int q = (qs[32 * (v / 64) + v % 32] >> (4 * (j % 2))) & 15;
      if (five) q |= ((b[16 + v % 32] >> j) & 1) << 4;
      const uint8_t* s = b + 4;
      int sc, mn;
      if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      return RefHalf(b) * F(sc) * F(q) - RefHalf(b + 2) * F(mn);
    }
    case DType::kQ6_K: {  // ql[128] | qh[64] | scales[16] (int8) | d
      const int h = v / 128, t = (v % 128) / 32, l = v % 32;
      const int low = (b[64 * h + l + 32 * (t % 2)] >> (4 * (t / 2))) & 15;
      const int high = (b[128 + 32 * h + l] >> (2 * t)) & 3;
      const int sc = static_cast<int8_t>(b[192 + v / 16]);
      return RefHalf(b + 208) * F(sc) * F((low | high << 4) - 32);
    }
    default:
      ADD_FAILURE() << "no reference for " << DTypeName(type);
      return 0.0f;
  }
}

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K,
                            DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// Byte offsets of the fp16 scale fields (d, then dmin / m where present) of each type.
std::vector<int> HalfFields(DType type) {
  switch (type) {
    case DType::kQ4_0: case DType::kQ5_0: return {0};
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

bool SameBits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Dequantizes `bytes` (whole blocks) with DequantizeRow and compares every value's bits.
void ExpectMatchesReference(DType type, const std::vector<uint8_t>& bytes) {
  const int64_t block_bytes = DTypeBlockBytes(type), elems = DTypeBlockElems(type);
  const int64_t num_blocks = static_cast<int64_t>(bytes.size()) / block_bytes;
  std::vector<float> got(num_blocks * elems);
  DequantizeRow(type, bytes.data(), got.data(), num_blocks * elems);
  int failures = 0;
  for (int64_t blk = 0; blk < num_blocks && failures < 5; ++blk) {
    for (int v = 0; v < elems; ++v) {
      const float want = RefValue(type, bytes.data() + blk * block_bytes, v);
      const float have = got[blk * elems + v];
      if (!SameBits(want, have)) {
        ADD_FAILURE() << DTypeName(type) << " block " << blk << " value " << v << ": want "
                      << want << " got " << have;
        if (++failures >= 5) break;
      }
    }
  }
}

TEST(QuantBlocksTest, RandomBlocksMatchReference) {
  std::mt19937 rng(7);
  for (DType type : kTypes) {
    std::vector<uint8_t> bytes(DTypeBlockBytes(type) * 64);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    // Mostly finite, moderate scales (random halves are sometimes inf / NaN: fine too).
    for (size_t off = 0; off < bytes.size(); off += DTypeBlockBytes(type)) {
      for (int f : HalfFields(type)) bytes[off + f + 1] &= 0xbf;  // exponent < 16: |x| < 2
    }
    ExpectMatchesReference(type, bytes);
  }
}

TEST(QuantBlocksTest, ExtremeBlocksMatchReference) {
  // fp16 bit patterns: zero, -0, smallest subnormal (+-), largest subnormal, smallest normal,
  // 1, -1, largest finite (+-), inf, -inf, NaN, all-ones (a NaN).
  const uint16_t kHalves[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                              0xbc00, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xffff};
  const uint8_t kFill[] = {0x00, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x3f, 0x80, 0x7f};
  std::mt19937 rng(11);
  for (DType type : kTypes) {
    const int64_t bb = DTypeBlockBytes(type);
    std::vector<uint8_t> bytes;
    auto add_block = [&](const std::vector<uint8_t>& blk) {
      bytes.insert(bytes.end(), blk.begin(), blk.end());
    };
    const std::vector<int> halves = HalfFields(type);
    for (uint8_t fill : kFill) {
      for (uint16_t d : kHalves) {
        for (uint16_t dmin : {uint16_t{0x7bff}, uint16_t{0xfbff}, uint16_t{0x0001}, d}) {
          std::vector<uint8_t> blk(bb, fill);
          blk[halves[0]] = d & 0xff;
          blk[halves[0] + 1] = d >> 8;
          if (halves.size() > 1) {
            blk[halves[1]] = dmin & 0xff;
            blk[halves[1] + 1] = dmin >> 8;
          }
          add_block(blk);
        }
      }
    }
    // Every byte pattern in every non-scale byte position (covers every hmask / qh pattern and
    // every scale / min code), with random fp16 scales.
    for (int pattern = 0; pattern < 256; pattern += 1) {
      std::vector<uint8_t> blk(bb);
      for (int64_t i = 0; i < bb; ++i) blk[i] = static_cast<uint8_t>(pattern + 37 * i);
      for (int f : halves) {
        const uint16_t h = static_cast<uint16_t>(rng()) & 0xbfff;
        blk[f] = h & 0xff;
        blk[f + 1] = h >> 8;
      }
      add_block(blk);
    }
    ExpectMatchesReference(type, bytes);
  }
}

TEST(QuantBlocksTest, Q5LegacyEveryHighBitSetAlone) {
  for (DType type : {DType::kQ5_0, DType::kQ5_1}) {
    std::vector<uint8_t> bytes;
    const int qh_at = type == DType::kQ5_0 ? 2 : 4;
    for (int bit = 0; bit < 33; ++bit) {
      std::vector<uint8_t> blk(DTypeBlockBytes(type), 0x5a);
      blk[0] = 0x00;
      blk[1] = 0x3c;  // d = 1
      if (type == DType::kQ5_1) blk[2] = blk[3] = 0;
      for (int i = 0; i < 4; ++i) blk[qh_at + i] = 0;
      if (bit < 32) blk[qh_at + bit / 8] = static_cast<uint8_t>(1 << (bit % 8));
      bytes.insert(bytes.end(), blk.begin(), blk.end());
    }
    ExpectMatchesReference(type, bytes);
  }
}

TEST(QuantBlocksTest, PackingHelpersInvertUnpacking) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t codes[16], packed[kKScaleBytes], back[16];
    for (auto& c : codes) c = static_cast<uint8_t>(trial < 2 ? trial * 63 : rng() % 64);
    PackScalesQ3K(codes, packed);
    UnpackScalesQ3K(packed, back);
    ASSERT_EQ(std::memcmp(codes, back, 16), 0) << trial;

    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(trial < 2 ? trial * 63 : rng() % 64);
      mn[j] = static_cast<uint8_t>(trial < 2 ? 63 - trial * 63 : rng() % 64);
    }
    PackScaleMinK4(sc, mn, packed);
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      UnpackScaleMinK4(j, packed, &s, &m);
      ASSERT_EQ(s, sc[j]) << trial << " " << j;
      ASSERT_EQ(m, mn[j]) << trial << " " << j;
    }
  }
}

TEST(QuantBlocksTest, NamesAndSizes) {
  struct Expected {
    DType type;
    const char* name;
    int64_t block_elems, block_bytes;
  };
  const Expected kExpected[] = {
      {DType::kQ4_0, "q4_0", 32, 18},  {DType::kQ4_1, "q4_1", 32, 20},
      {DType::kQ5_0, "q5_0", 32, 22},  {DType::kQ5_1, "q5_1", 32, 24},
      {DType::kQ2_K, "q2_k", 256, 84}, {DType::kQ3_K, "q3_k", 256, 110},
      {DType::kQ4_K, "q4_k", 256, 144}, {DType::kQ5_K, "q5_k", 256, 176},
      {DType::kQ6_K, "q6_k", 256, 210},
  };
  for (const Expected& e : kExpected) {
    EXPECT_STREQ(DTypeName(e.type), e.name);
    ASSERT_TRUE(ParseDType(e.name).has_value()) << e.name;
    EXPECT_EQ(*ParseDType(DTypeName(e.type)), e.type) << e.name;
    EXPECT_TRUE(IsGgmlBlockType(e.type)) << e.name;
    EXPECT_EQ(DTypeBlockElems(e.type), e.block_elems) << e.name;
    EXPECT_EQ(DTypeBlockBytes(e.type), e.block_bytes) << e.name;
    EXPECT_EQ(DTypeRowBytes(e.type, 2048), 2048 / e.block_elems * e.block_bytes) << e.name;
    EXPECT_EQ(DTypeRowBytes(e.type, 0), 0) << e.name;
  }
  // Bits per weight as llama.cpp states them.
  EXPECT_EQ(DTypeRowBytes(DType::kQ4_K, 256) * 8, 4.5 * 256);
  EXPECT_EQ(DTypeRowBytes(DType::kQ6_K, 256) * 8, 6.5625 * 256);
  EXPECT_FALSE(ParseDType("Q4_K").has_value());  // names are lower case
  EXPECT_FALSE(ParseDType("q4_k_m").has_value());  // a file mix, not a tensor type
}

}  // namespace
}  // namespace kvserve
