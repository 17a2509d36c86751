// `kvserve plan` as built: the standard figure, JSON output, errors and exit codes (the
// planner itself is tested in plan/plan_test.cc).

#include <filesystem>
#include <fstream>
#include <sstream>
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

TEST(KvservePlanTest, StackTableJsonAndPlot) {
  const std::string svg = ::testing::TempDir() + "/plan_stack_test.svg";
  Ran r = RunKv({"plan", "--stack", "--preset", "deepseek-v2-lite", "--context", "32768",
                 "--hardware", "h100-sxm", "--prefix-share", "0.5", "--format", "json", "--plot",
                 svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 6u);  // MLA: the latent row last
  EXPECT_EQ(j["rows"][0]["factor"], 1.0);
  EXPECT_EQ(j["rows"][5]["name"], "+ latent KV (MLA)");
  EXPECT_GT(j["rows"][5]["factor"].get<double>(), j["rows"][4]["factor"].get<double>());
  EXPECT_EQ(j["tensor_parallel"], 1);
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("<svg"), std::string::npos);
  EXPECT_NE(text.str().find("+ latent KV (MLA)"), std::string::npos);
  std::filesystem::remove(svg);

  // Errors: no hardware, a share out of range, both sources of the share.
  r = RunKv({"plan", "--stack", "--preset", "llama-3.1-8b"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--hardware"), std::string::npos) << r.err;
  r = RunKv({"plan", "--stack", "--preset", "llama-3.1-8b", "--hardware", "h100-sxm",
             "--prefix-share", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--prefix-share"), std::string::npos) << r.err;
  r = RunKv({"plan", "--stack", "--preset", "llama-3.1-8b", "--hardware", "nope.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nope.json"), std::string::npos) << r.err;
}

TEST(KvservePlanTest, SearchPrintsAServeCommand) {
  Ran r = RunKv({"plan", "--search", "--preset", "llama-3.1-8b", "--hardware", "l40s",
                 "--dataset-name", "random", "--num-prompts", "40", "--random-input-len",
                 "1000", "--random-output-len", "20", "--request-rate", "10",
                 "--slo-ttft-p90", "100000", "--slo-tpot-p99", "100000",
                 "--search-block-size", "16", "--search-max-num-seqs", "64",
                 "--search-kv-budget", "0", "--search-chunked-prefill", "on"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("chosen: 1 x 1 device(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kvserve serve --model"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("candidates"), std::string::npos) << r.err;  // the progress line
  r = RunKv({"plan", "--search", "--preset", "llama-3.1-8b", "--hardware", "l40s",
             "--dataset-name", "random", "--slo-ttft-p90", "0", "--slo-tpot-p99", "100"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--slo-ttft-p90"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvserve::cli
