// Tests of the `kvserve sim` binary (cli/sim_cmd.cc): flags reach the replay, the report's
// forms, errors. The replay itself: sim/sim_test.cc.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing/test_dependency.h"
#include "cli_test_util.h"
#include "sim/sim_test_util.h"

namespace kvserve::sim {
namespace {

using ::testing::HasSubstr;

const std::string kTrace = MooncakeTracePath();

// Runs `kvserve` with space-separated `args`; returns its stdout, then its stderr.
std::string RunBinary(const std::string& args, int* exit_code) {
  std::vector<std::string> argv;
  std::istringstream in(args);
  for (std::string a; in >> a;) argv.push_back(a);
  const cli::testing::Ran ran = cli::testing::RunKv(argv);
  *exit_code = ran.exit_code;
  return ran.out + ran.err;
}

TEST(SimCliTest, ReplaysAFileAndReportsErrors) {
  const std::string path = ::testing::TempDir() + "/sim_test_trace.jsonl";
  {
    std::ofstream f(path);
    for (const TraceRequest& r : SyntheticTrace(40, 512, 9)) {
      nlohmann::json j = {{"timestamp", r.timestamp_ms},
                          {"input_length", r.input_tokens},
                          {"output_length", r.output_tokens},
                          {"hash_ids", r.hash_ids}};
      f << j.dump() << "\n";
    }
  }
  int rc = -1;
  std::string out =
      RunBinary("sim --trace " + path + " --kv-cache-blocks 20,1000 --format json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["capacity_blocks"], 20);
  EXPECT_EQ(j["rows"][1]["capacity_blocks"], 1000);
  EXPECT_EQ(j["num_requests"], 40);
  EXPECT_GT(j["unbounded"]["hit_rate_tokens"].get<double>(), 0.0);

  out =
      RunBinary("sim --trace " + path + " --kv-cache-blocks 1000 --no-enable-prefix-caching", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("prefix caching off"));
  EXPECT_THAT(out, HasSubstr("chunked prefill on"));

  // The scheduler flags reach the scheduler: without chunked prefill the budget must hold the
  // longest request, and a tiny cache preempts.
  out = RunBinary("sim --trace " + path + " --kv-cache-blocks 1000 --no-enable-chunked-prefill",
                  &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("chunked prefill disabled"));
  out = RunBinary("sim --trace " + path +
                      " --kv-cache-blocks 1000 --no-enable-chunked-prefill "
                      "--max-num-batched-tokens 65536 --max-model-len 60000 --max-num-seqs 4 "
                      "--format json",
                  &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto nc = nlohmann::json::parse(out);
  EXPECT_EQ(nc["options"]["enable_chunked_prefill"], false);
  EXPECT_EQ(nc["rows"][0]["max_model_len"], 60000);
  EXPECT_EQ(nc["rows"][0]["num_requests"], 40);

  out = RunBinary("sim --trace /nonexistent.jsonl", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("error: "));
  out = RunBinary("sim --trace " + path + " --block-tokens 0", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("--block-tokens"));
  out = RunBinary("sim", &rc);
  EXPECT_EQ(rc, 1);  // a trace to sweep, or a workload to predict
  EXPECT_THAT(out, HasSubstr("--trace FILE is required"));
  std::remove(path.c_str());
}

// The prediction of bench serve: a dataset on a model and a hardware profile, written as bench
// serve's result file; that file replayed again as a trace; errors.
TEST(SimCliTest, PredictsBenchServe) {
  const std::string result = ::testing::TempDir() + "/sim_predict.json";
  int rc = -1;
  std::string out = RunBinary(
      "sim --preset llama-3.1-8b --hardware h100-sxm --dataset-name random --num-prompts 30 "
      "--random-input-len 256 --random-output-len 16 --request-rate 20 --seed 3 "
      "--result-file " + result, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("Llama-3.1-8B on h100-sxm x1: bf16 KV, 16-token blocks"));
  EXPECT_THAT(out, HasSubstr("Median TTFT (ms):"));
  EXPECT_THAT(out, HasSubstr("per million output tokens"));
  std::ifstream in(result);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["completed"], 30);
  EXPECT_EQ(j["total_output_tokens"], 30 * 16);
  EXPECT_EQ(j["dataset_name"], "random");
  EXPECT_EQ(j["request_rate_per_s"], 20.0);
  EXPECT_GT(j["ttft"]["median_ms"].get<double>(), 0.0);
  EXPECT_GT(j["tpot"]["median_ms"].get<double>(), 0.0);
  EXPECT_TRUE(j.contains("date"));
  EXPECT_GT(j["sim"]["cost_per_million_output_tokens"].get<double>(), 0.0);
  EXPECT_EQ(j["sim"]["hardware"]["name"], "h100-sxm");

  // The result file as a trace: its lengths and send times, recognised from the file.
  out = RunBinary("sim --trace " + result + " --preset llama-3.1-8b --hardware h100-sxm "
                  "--format json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto again = nlohmann::json::parse(out.substr(0, out.rfind('}') + 1));
  EXPECT_EQ(again["completed"], 30);
  EXPECT_EQ(again["dataset_name"], "result-file");
  EXPECT_EQ(again["total_input_tokens"], j["total_input_tokens"]);

  // Errors name the flag.
  out = RunBinary("sim --preset llama-3.1-8b --hardware tpu-v9", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("unknown hardware 'tpu-v9'"));
  out = RunBinary("sim --preset llama-3.1-8b", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("--hardware"));
  out = RunBinary("sim --dataset-name mooncake --hardware h100-sxm --preset llama-3.1-8b", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("needs --trace"));
  out = RunBinary("sim --preset llama-3.3-70b --hardware l40s", &rc);
  EXPECT_EQ(rc, 1);  // 141 GB of weights on one 48 GB device
  EXPECT_THAT(out, HasSubstr("nothing is left for the KV cache"));
  const std::string bad = ::testing::TempDir() + "/sim_bad_hw.json";
  std::ofstream(bad) << R"({"base": "h100-sxm", "memory_bandwidth_bytes_per_s": "fast"})";
  out = RunBinary("sim --preset llama-3.1-8b --hardware " + bad, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("memory_bandwidth_bytes_per_s"));
  std::remove(bad.c_str());
  std::remove(result.c_str());
}

// The binary on the first 1000 requests of the real trace, every default capacity: the hit rate
// grows with the capacity up to the unbounded one.
TEST(SimCliTest, MooncakeTraceBinary) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kTrace), kTrace);
  int rc = -1;
  const std::string out =
      RunBinary("sim --trace " + kTrace + " --max-requests 1000 --format json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["rows"].size(), 7u);
  EXPECT_EQ(j["num_requests"], 1000);
  double previous = 0.0;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["num_requests"].get<int64_t>() + row["num_rejected"].get<int64_t>(), 1000);
    EXPECT_GE(row["hit_rate_tokens"].get<double>(), previous - 0.005) << row.dump();
    previous = row["hit_rate_tokens"].get<double>();
    EXPECT_GT(row["end_s"].get<double>(), 0.0);
  }
  EXPECT_LE(previous, j["unbounded"]["hit_rate_tokens"].get<double>());
}

// A prediction on a slice of the real trace at its own timestamps (sped up to queue).
TEST(SimCliTest, MooncakeTracePrediction) {
  KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(kTrace), kTrace);
  int rc = -1;
  const std::string out = RunBinary(
      "sim --trace " + kTrace + " --num-prompts 200 --trace-time-scale 0.05 --preset "
      "llama-3.1-8b --hardware h100-sxm --kv-cache-dtype fp8 --format json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out.substr(0, out.rfind('}') + 1));
  EXPECT_EQ(j["dataset_name"], "mooncake");
  EXPECT_EQ(j["completed"], 200);
  EXPECT_GT(j["prefix_cache"]["server_hit_rate"].get<double>(), 0.0);
  EXPECT_EQ(j["sim"]["kv_cache_dtype"], "fp8_e4m3");
}

TEST(SimCliTest, PredictionWithEvictionWritesAPlot) {
  const std::string svg = ::testing::TempDir() + "/sim_cli_plot.svg";
  int rc = -1;
  const std::string out = RunBinary(
      "sim --preset smollm2-135m --hardware h100-sxm --dataset-name random --num-prompts 12 "
      "--random-input-len 300 --random-output-len 40 --kv-eviction streaming --kv-budget 64 "
      "--format json --plot " + svg, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"completed\": 12"));
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("TTFT distribution"));
  EXPECT_THAT(text.str(), HasSubstr("KV blocks in use"));
  std::filesystem::remove(svg);
  // pyramidkv is not simulated: a clear error.
  const std::string bad = RunBinary(
      "sim --preset smollm2-135m --hardware h100-sxm --dataset-name random --num-prompts 2 "
      "--kv-eviction pyramidkv --kv-budget 64", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(bad, HasSubstr("pyramidkv"));
}

}  // namespace
}  // namespace kvserve::sim
