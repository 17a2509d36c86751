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
  EXPECT_EQ(rc, 2);  // --trace is required: a parse error
  std::remove(path.c_str());
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

}  // namespace
}  // namespace kvserve::sim
