// Hardware profiles: the built-ins, the JSON form both ways, errors naming the field.
#include "cost/hardware.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kvserve::cost {
namespace {

using nlohmann::json;

TEST(Hardware, BuiltinsAreValidAndRoundTrip) {
  ASSERT_GE(HardwareProfileNames().size(), 6u);
  for (const std::string& name : HardwareProfileNames()) {
    StatusOr<HardwareProfile> p = BuiltinHardwareProfile(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_TRUE(ValidateHardwareProfile(*p).ok()) << name;
    EXPECT_FALSE(p->source.empty()) << name;
    EXPECT_GT(p->price_per_hour, 0) << name;
    StatusOr<HardwareProfile> back = HardwareProfileFromJson(HardwareProfileToJson(*p), "x");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(HardwareProfileToJson(*back), HardwareProfileToJson(*p)) << name;
  }
  const HardwareProfile h100 = *BuiltinHardwareProfile("h100-sxm");
  EXPECT_EQ(h100.memory_bytes, 80'000'000'000);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, DType::kBF16), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, DType::kFp8E4M3), 1978.9e12);
  EXPECT_DOUBLE_EQ(PeakFlops(h100, DType::kQ8_0), 1978.9e12);
  // The A100 has no fp8: bf16 runs it.
  EXPECT_DOUBLE_EQ(PeakFlops(*BuiltinHardwareProfile("a100-80gb"), DType::kFp8E4M3), 312e12);
  EXPECT_NE(BuiltinHardwareProfile("h900").status().message().find("h100-sxm"), std::string::npos);
}

TEST(Hardware, FileOverridesItsBase) {
  const json j = json::parse(R"({"name": "cheap-h100", "base": "h100-sxm",
      "price_per_hour": 1.25,
      "efficiency": {"matmul": [[1, 0.5], [512, 0.8]], "attention": {"int8": 0.4},
                     "prefill_attention": [[16, 0.2], [256, 0.3]],
                     "step_overhead_s": 0.002}})");
  StatusOr<HardwareProfile> p = HardwareProfileFromJson(j, "f.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->name, "cheap-h100");
  EXPECT_DOUBLE_EQ(p->price_per_hour, 1.25);
  EXPECT_DOUBLE_EQ(p->memory_bandwidth_bytes_per_s, 3.35e12);  // from the base
  EXPECT_DOUBLE_EQ(p->efficiency.matmul.At(512), 0.8);
  EXPECT_DOUBLE_EQ(p->efficiency.AttentionCurve(DType::kI8).At(100), 0.4);
  EXPECT_DOUBLE_EQ(p->efficiency.AttentionCurve(DType::kBF16).At(100), 0.6);
  EXPECT_DOUBLE_EQ(p->efficiency.step_overhead_s, 0.002);
  EXPECT_DOUBLE_EQ(p->efficiency.AttentionAt(DType::kI8, 256, 100), 0.3);  // a chunk
  EXPECT_DOUBLE_EQ(p->efficiency.AttentionAt(DType::kI8, 1, 100), 0.4);    // decode
  // The curve survives a round trip through the file form.
  StatusOr<HardwareProfile> again = HardwareProfileFromJson(HardwareProfileToJson(*p), "again");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_DOUBLE_EQ(again->efficiency.prefill_attention.At(16), 0.2);
}

TEST(Hardware, BadFilesNameTheField) {
  auto error = [](const char* text) {
    StatusOr<HardwareProfile> p = HardwareProfileFromJson(json::parse(text), "f.json");
    return p.ok() ? std::string("ok") : p.status().message();
  };
  EXPECT_NE(error("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "bandwidth": 1})").find("\"bandwidth\""), std::string::npos);
  EXPECT_NE(error(R"({"memory_bytes": 1, "peak_flops": {"f32": 1}})").find("bandwidth"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "memory_bandwidth_bytes_per_s": -1})")
                .find("memory_bandwidth_bytes_per_s"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "peak_flops": {"fp4": 1}})").find("fp4"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "efficiency": {"matmul": [[4, 0.5], [2, 0.6]]}})")
                .find("increasing"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "efficiency": {"matmul": 7}})").find("(0, 1.5]"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "efficiency": {"attention": {"q9": 0.5}}})").find("q9"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "efficiency": {"prefill_attention": [[1, 2]]}})")
                .find("prefill_attention"),
            std::string::npos);
  EXPECT_NE(error(R"({"base": "nope"})").find("base"), std::string::npos);
  EXPECT_NE(error(R"({"base": "h100-sxm", "price_per_hour": "2"})").find("price_per_hour"),
            std::string::npos);
}

TEST(Hardware, ResolveTakesNamesAndFiles) {
  EXPECT_EQ(ResolveHardwareProfile("h200")->name, "h200");
  EXPECT_EQ(ResolveHardwareProfile("missing.json").status().code(), StatusCode::kNotFound);
  EXPECT_NE(ResolveHardwareProfile("tpu").status().message().find("built-in"), std::string::npos);
  const std::string dir = ::testing::TempDir() + "/hw_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/ok.json") << R"({"base": "l40s", "name": "my-l40s"})";
    std::ofstream(dir + "/bad.json") << "{not json";
  }
  StatusOr<HardwareProfile> p = ResolveHardwareProfile(dir + "/ok.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->name, "my-l40s");
  EXPECT_NE(ResolveHardwareProfile(dir + "/bad.json").status().message().find("not valid JSON"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvserve::cost
