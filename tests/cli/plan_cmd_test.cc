// `kvserve plan` as built: the standard figure, JSON output, errors and exit codes (the
// planner itself is tested in plan/plan_test.cc).

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace kvserve::cli {
namespace {

using nlohmann::json;
using testing::Ran;
using testing::RunKv;

constexpr char kStandardLine[] = "KV per request (64000 tokens): 20.97 GB (19.53 GiB)";

TEST(KvservePlanTest, StandardFigure) {
  Ran r = RunKv(
      {"plan", "--preset", "llama-3.3-70b", "--context", "64000", "--kv-cache-dtype", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(kStandardLine), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("80 layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 KV heads, head dim 128"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(KvservePlanTest, JsonFormat) {
  Ran r = RunKv({"plan", "--preset", "llama-3.3-70b", "--context", "64000", "--kv-cache-dtype",
                 "bf16", "--memory", "141GB", "--weights-dtype", "fp8", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["kv_bytes_per_request"], 20971520000);
  EXPECT_EQ(j["memory_bytes"], 141000000000);
  EXPECT_EQ(j["weight_bytes"], 70553706496);
  EXPECT_EQ(j["kv_budget_bytes"], 141000000000 - 70553706496);
  EXPECT_EQ(j["requests_paged"], (141000000000 - 70553706496) / 20971520000);  // 3
  EXPECT_EQ(j["requests_contiguous"], 1);  // 131072-token reservations of 42.9 GB
}

TEST(KvservePlanTest, ErrorsAndHelp) {
  Ran r = RunKv({"plan", "--preset", "nope"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: unknown preset 'nope'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("deepseek-v2-lite"), std::string::npos) << r.err;
  r = RunKv({"plan"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--preset"), std::string::npos) << r.err;
  r = RunKv({"plan", "--preset", "llama-3.3-70b", "--memory", "80GiB"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("weights"), std::string::npos) << r.err;
  r = RunKv({"plan", "--preset", "llama-3.1-8b", "--format", "xml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = RunKv({"plan", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt :
       {"--preset", "--model", "--context", "--kv-cache-dtype", "--memory", "--block-size",
        "--format", "--max-model-len", "--kv-cache-memory", "--weights-dtype", "--avg-context"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
}

}  // namespace
}  // namespace kvserve::cli
