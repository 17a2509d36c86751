// KvCacheSpec byte arithmetic per dtype and layout, and the --kv-cache-dtype / byte-size
// parsers and the byte formatter the planner prints with.
#include "kv/kv_spec.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace kvserve {
namespace {

// Llama-3.3-70B: 80 layers, 8 KV heads, head dim 128.
KvCacheSpec Llama70B(DType dtype) {
  KvCacheSpec s;
  s.num_layers = 80;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.dtype = dtype;
  return s;
}

// DeepSeek-V2-Lite: 27 layers, kv_lora_rank 512, qk_rope_head_dim 64.
KvCacheSpec DeepSeekV2Lite(DType dtype) {
  return KvCacheSpec::MlaLatent(27, 512, 64, dtype, 16);
}

TEST(KvCacheSpecTest, F16IsTwoTimesLayersKvHeadsHeadDimTimesTwoBytes) {
  const int64_t f16 = 2 * 80 * 8 * 128 * 2;
  EXPECT_EQ(Llama70B(DType::kF16).bytes_per_token(), f16);
  EXPECT_EQ(Llama70B(DType::kBF16).bytes_per_token(), f16);
  EXPECT_EQ(Llama70B(DType::kF32).bytes_per_token(), 2 * f16);
  EXPECT_EQ(Llama70B(DType::kF16).values_per_token_per_layer(), 2 * 8 * 128);
  EXPECT_EQ(Llama70B(DType::kF16).scales_per_token_per_layer(), 0);
  EXPECT_EQ(Llama70B(DType::kF16).fixed_scale_bytes(), 0);
  EXPECT_EQ(Llama70B(DType::kF32).fixed_scale_bytes(), 0);
}

TEST(KvCacheSpecTest, Fp8IsHalfOfF16PerTokenWithFixedPerLayerScales) {
  const int64_t f16 = Llama70B(DType::kF16).bytes_per_token();
  for (DType d : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    const KvCacheSpec s = Llama70B(d);
    EXPECT_EQ(s.value_bytes(), 1);
    EXPECT_EQ(s.bytes_per_token() * 2, f16) << DTypeName(d);
    EXPECT_EQ(s.scales_per_token_per_layer(), 0) << DTypeName(d);
    // One float scale per layer, KV head, K and V: a fixed cost, not per token.
    EXPECT_EQ(s.fixed_scale_bytes(), 80 * 2 * 8 * kKvScaleBytes) << DTypeName(d);
  }
}

TEST(KvCacheSpecTest, Int8IsHalfOfF16PlusPerTokenScales) {
  const int64_t f16 = Llama70B(DType::kF16).bytes_per_token();
  const KvCacheSpec s = Llama70B(DType::kI8);
  EXPECT_EQ(s.scales_per_token_per_layer(), 2 * 8);
  EXPECT_EQ(s.bytes_per_token(), f16 / 2 + 80 * 2 * 8 * 4);
  EXPECT_EQ(s.bytes_per_token(), 168960);  // 163840 + 5120
  EXPECT_EQ(s.fixed_scale_bytes(), 0);
}

TEST(KvCacheSpecTest, MlaCachesLatentPlusRopeKeyPerLayer) {
  EXPECT_EQ(DeepSeekV2Lite(DType::kBF16).values_per_token_per_layer(), 576);
  EXPECT_EQ(DeepSeekV2Lite(DType::kBF16).bytes_per_token(), 27 * 576 * 2);
  EXPECT_EQ(DeepSeekV2Lite(DType::kF32).bytes_per_token(), 27 * 576 * 4);
  EXPECT_EQ(DeepSeekV2Lite(DType::kFp8E4M3).bytes_per_token(), 27 * 576);
  EXPECT_EQ(DeepSeekV2Lite(DType::kFp8E4M3).fixed_scale_bytes(), 27 * kKvScaleBytes);
  // int8: one scale per token and layer for the whole latent.
  EXPECT_EQ(DeepSeekV2Lite(DType::kI8).scales_per_token_per_layer(), 1);
  EXPECT_EQ(DeepSeekV2Lite(DType::kI8).bytes_per_token(), 27 * (576 + 4));
  // The MLA layout ignores the MHA fields.
  KvCacheSpec s = DeepSeekV2Lite(DType::kBF16);
  s.num_kv_heads = 16;
  s.head_dim = 192;
  EXPECT_EQ(s.bytes_per_token(), 27 * 576 * 2);
}

TEST(KvCacheSpecTest, StandardFigureLlama70BAt64kTokens) {
  const KvCacheSpec s = Llama70B(DType::kBF16);
  EXPECT_EQ(s.bytes_per_token(), 327680);
  const int64_t request = 64000 * s.bytes_per_token();
  EXPECT_EQ(request, 20971520000);
  EXPECT_EQ(FormatBytesDecimalAndBinary(static_cast<double>(request)), "20.97 GB (19.53 GiB)");
}

TEST(KvCacheSpecTest, BlocksForTokensRoundsUp) {
  KvCacheSpec s = Llama70B(DType::kBF16);
  s.block_size = 16;
  EXPECT_EQ(s.bytes_per_block(), 16 * s.bytes_per_token());
  EXPECT_EQ(s.blocks_for_tokens(0), 0);
  EXPECT_EQ(s.blocks_for_tokens(-3), 0);
  EXPECT_EQ(s.blocks_for_tokens(1), 1);
  EXPECT_EQ(s.blocks_for_tokens(16), 1);
  EXPECT_EQ(s.blocks_for_tokens(17), 2);
  EXPECT_EQ(s.blocks_for_tokens(64000), 4000);
  s.block_size = 1;
  EXPECT_EQ(s.blocks_for_tokens(17), 17);
  s.block_size = 256;
  EXPECT_EQ(s.blocks_for_tokens(257), 2);
  EXPECT_EQ(s.bytes_per_block(), 256 * s.bytes_per_token());
}

TEST(KvCacheSpecTest, ValidateAcceptsKvDtypesOnly) {
  for (DType d :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3, DType::kFp8E5M2, DType::kI8}) {
    EXPECT_TRUE(IsKvCacheDtype(d)) << DTypeName(d);
    EXPECT_TRUE(Llama70B(d).Validate().ok()) << DTypeName(d);
    EXPECT_TRUE(DeepSeekV2Lite(d).Validate().ok()) << DTypeName(d);
  }
  for (DType d : {DType::kQ8_0, DType::kI32}) {
    EXPECT_FALSE(IsKvCacheDtype(d)) << DTypeName(d);
    const Status st = Llama70B(d).Validate();
    EXPECT_FALSE(st.ok()) << DTypeName(d);
    EXPECT_NE(st.message().find(DTypeName(d)), std::string::npos) << st.message();
  }
}

TEST(KvCacheSpecTest, ValidateRejectsBadGeometry) {
  KvCacheSpec s = Llama70B(DType::kBF16);
  s.num_layers = 0;
  EXPECT_FALSE(s.Validate().ok());
  s = Llama70B(DType::kBF16);
  s.num_kv_heads = 0;
  EXPECT_FALSE(s.Validate().ok());
  s = Llama70B(DType::kBF16);
  s.head_dim = -1;
  EXPECT_FALSE(s.Validate().ok());
  for (int64_t bad : {0, -16, 4097}) {
    s = Llama70B(DType::kBF16);
    s.block_size = bad;
    const Status st = s.Validate();
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("--block-size"), std::string::npos) << st.message();
  }
  s = Llama70B(DType::kBF16);
  s.block_size = 4096;
  EXPECT_TRUE(s.Validate().ok());
  s = DeepSeekV2Lite(DType::kBF16);
  s.latent_dim = 0;
  EXPECT_FALSE(s.Validate().ok());
  s = DeepSeekV2Lite(DType::kBF16);
  s.rope_dim = -1;
  EXPECT_FALSE(s.Validate().ok());
  s = KvCacheSpec::MlaLatent(27, 512, 0, DType::kBF16, 16);  // no decoupled RoPE key: allowed
  EXPECT_TRUE(s.Validate().ok());
  s = DeepSeekV2Lite(DType::kBF16);
  s.head_dim = 512;  // the kernels' row must be the latent plus the RoPE key
  EXPECT_FALSE(s.Validate().ok());
}

TEST(KvCacheSpecTest, ToStringNamesGeometryDtypeAndBlocks) {
  KvCacheSpec s;
  s.num_layers = 28;
  s.num_kv_heads = 8;
  s.head_dim = 64;
  s.dtype = DType::kFp8E4M3;
  EXPECT_EQ(s.ToString(), "28 layers x 8 KV heads x 64, fp8_e4m3, 16-token blocks");
  EXPECT_EQ(DeepSeekV2Lite(DType::kBF16).ToString(),
            "27 layers x MLA latent 512 + rope 64, bf16, 16-token blocks");
}

TEST(ParseKvCacheDtypeTest, NamesAndAliases) {
  struct Case {
    const char* name;
    DType dtype;
  } cases[] = {
      {"f32", DType::kF32},          {"float32", DType::kF32},      {"float", DType::kF32},
      {"f16", DType::kF16},          {"float16", DType::kF16},      {"half", DType::kF16},
      {"bf16", DType::kBF16},        {"bfloat16", DType::kBF16},    {"fp8", DType::kFp8E4M3},
      {"fp8_e4m3", DType::kFp8E4M3}, {"fp8_e5m2", DType::kFp8E5M2}, {"int8", DType::kI8},
  };
  for (const Case& c : cases) {
    StatusOr<DType> d = ParseKvCacheDtype(c.name, DType::kF32);
    ASSERT_TRUE(d.ok()) << c.name << ": " << d.status().message();
    EXPECT_EQ(*d, c.dtype) << c.name;
  }
}

TEST(ParseKvCacheDtypeTest, AutoIsTheModelDtype) {
  EXPECT_EQ(*ParseKvCacheDtype("auto", DType::kBF16), DType::kBF16);
  EXPECT_EQ(*ParseKvCacheDtype("auto", DType::kF16), DType::kF16);
  EXPECT_EQ(*ParseKvCacheDtype("auto", DType::kF32), DType::kF32);
}

TEST(ParseKvCacheDtypeTest, UnknownNamesListTheChoices) {
  for (const char* bad : {"", "q8_0", "int4", "FP8", "fp8_e4m3fn", "bf16 "}) {
    StatusOr<DType> d = ParseKvCacheDtype(bad, DType::kBF16);
    ASSERT_FALSE(d.ok()) << "'" << bad << "'";
    EXPECT_NE(d.status().message().find("--kv-cache-dtype"), std::string::npos);
    EXPECT_NE(d.status().message().find("fp8_e5m2"), std::string::npos);
  }
}

TEST(ParseByteSizeTest, BinaryAndDecimalSuffixes) {
  struct Case {
    const char* text;
    int64_t bytes;
  } cases[] = {
      {"4GiB", int64_t{4} << 30},
      {"512MiB", int64_t{512} << 20},
      {"1.5GB", 1500000000},
      {"1e9", 1000000000},
      {"1048576", 1048576},
      {"0", 0},
      {"80GiB", int64_t{80} << 30},
      {"80 GiB", int64_t{80} << 30},
      {"80gib", int64_t{80} << 30},
      {"2K", 2048},
      {"2KiB", 2048},
      {"2KB", 2000},
      {"3M", int64_t{3} << 20},
      {"3MB", 3000000},
      {"1G", int64_t{1} << 30},
      {"1T", int64_t{1} << 40},
      {"1TiB", int64_t{1} << 40},
      {"1TB", 1000000000000},
      {"141GB", 141000000000},
      {"0.5GiB", int64_t{1} << 29},
      {"100B", 100},
  };
  for (const Case& c : cases) {
    StatusOr<int64_t> b = ParseByteSize(c.text);
    ASSERT_TRUE(b.ok()) << c.text << ": " << b.status().message();
    EXPECT_EQ(*b, c.bytes) << c.text;
  }
}

TEST(ParseByteSizeTest, GarbageIsAnErrorWithExamples) {
  for (const char* bad : {"", "abc", "GiB", "4XB", "4 G i B", "-1GiB", "-5", "nan", "inf", "1e30",
                          "1e400", "4GiBs", "4PiB4"}) {
    StatusOr<int64_t> b = ParseByteSize(bad);
    ASSERT_FALSE(b.ok()) << "'" << bad << "' parsed as " << *b;
    EXPECT_NE(b.status().message().find("bad byte size"), std::string::npos);
    EXPECT_NE(b.status().message().find("GiB"), std::string::npos);
  }
}

TEST(FormatBytesTest, DecimalWithBinaryBeside) {
  EXPECT_EQ(FormatBytesDecimalAndBinary(0), "0 B");
  EXPECT_EQ(FormatBytesDecimalAndBinary(999), "999 B");
  EXPECT_EQ(FormatBytesDecimalAndBinary(1000), "1.00 KB (1000 B)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(1024), "1.02 KB (1.00 KiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(327680), "327.68 KB (320.00 KiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(5242880), "5.24 MB (5.00 MiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(20971520000.0), "20.97 GB (19.53 GiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(static_cast<double>(int64_t{80} << 30)),
            "85.90 GB (80.00 GiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(2e15), "2.00 PB (1.78 PiB)");
}

TEST(FormatBytesTest, RoundingNeverShowsAThousandOfAUnit) {
  // 999999 B is 999.999 KB: two decimals would print "1000.00 KB".
  EXPECT_EQ(FormatBytesDecimalAndBinary(999999), "1.00 MB (976.56 KiB)");
  // 1048575 B is 1023.999 KiB: "1024.00 KiB" would be the same mistake in binary.
  EXPECT_EQ(FormatBytesDecimalAndBinary(1048575), "1.05 MB (1.00 MiB)");
  EXPECT_EQ(FormatBytesDecimalAndBinary(999994), "999.99 KB (976.56 KiB)");
}

}  // namespace
}  // namespace kvserve
