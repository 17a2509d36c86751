// The step log: written lines read back as written; files that are not step logs refused with
// the line named; a last line cut short ignored.
#include "cost/step_log.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kvserve::cost {
namespace {

class StepLogTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(path_); }
  std::string Write(const std::string& text) {
    std::ofstream(path_, std::ios::binary) << text;
    return path_;
  }
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("kvserve_step_log_test_" + std::to_string(::getpid()) + ".jsonl"))
                          .string();
};

StepLogHeader Header() {
  return {.model = "m", .kv_cache_dtype = "f32", .block_size = 16, .threads = 2,
          .simd_level = "avx512"};
}

TEST_F(StepLogTest, LinesReadBackAsWritten) {
  const LoggedStep decode{0.0125, {{100, 1, true}, {37, 1, true}}};
  const LoggedStep mixed{0.25, {{511, 1, true}, {0, 256, false}}};
  Write(StepLogHeaderLine(Header()) + "\n" + StepLogLine(decode) + "\n" + StepLogLine(mixed) +
        "\n");
  StatusOr<StepLog> log = ReadStepLog(path_);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(log->header.model, "m");
  EXPECT_EQ(log->header.kv_cache_dtype, "f32");
  EXPECT_EQ(log->header.block_size, 16);
  EXPECT_EQ(log->header.threads, 2);
  ASSERT_EQ(log->steps.size(), 2u);
  EXPECT_DOUBLE_EQ(log->steps[0].seconds, 0.0125);
  ASSERT_EQ(log->steps[1].seqs.size(), 2u);
  EXPECT_EQ(log->steps[1].seqs[0].num_computed_tokens, 511);
  EXPECT_TRUE(log->steps[1].seqs[0].samples);
  EXPECT_EQ(log->steps[1].seqs[1].num_new_tokens, 256);
  EXPECT_FALSE(log->steps[1].seqs[1].samples);
}

TEST_F(StepLogTest, TheWriterWritesWhatTheReaderReads) {
  StatusOr<std::unique_ptr<StepLogWriter>> w = StepLogWriter::Open(path_, Header());
  ASSERT_TRUE(w.ok()) << w.status().message();
  for (int k = 1; k <= 3; ++k) (*w)->Write({0.001 * k, {{k, 1, true}}});
  EXPECT_EQ((*w)->num_steps(), 3);
  StatusOr<StepLog> log = ReadStepLog(path_);  // readable while the writer is open
  ASSERT_TRUE(log.ok()) << log.status().message();
  ASSERT_EQ(log->steps.size(), 3u);
  EXPECT_EQ(log->steps[2].seqs[0].num_computed_tokens, 3);
  EXPECT_EQ(log->header.simd_level, "avx512");
  EXPECT_FALSE(StepLogWriter::Open("/nonexistent/dir/steps.jsonl", Header()).ok());
}

TEST_F(StepLogTest, ALastLineCutShortIsIgnored) {
  Write(StepLogHeaderLine(Header()) + "\n" + StepLogLine({0.01, {{1, 1, true}}}) +
        "\n{\"seconds\": 0.0");
  StatusOr<StepLog> log = ReadStepLog(path_);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(log->steps.size(), 1u);
}

TEST_F(StepLogTest, WhatIsNotAStepLogIsRefusedWithTheLine) {
  const std::string header = StepLogHeaderLine(Header()) + "\n";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "empty step log"},
      {"{\"seconds\": 1, \"seqs\": [[1, 1, 1]]}\n", ":1: not a step log"},
      {"[1, 2]\n", ":1: not a step log"},
      {"{\"kvserve_step_log\": 1}\n", ":1: bad header"},
      {header + "garbage\n" + StepLogLine({0.01, {{1, 1, true}}}) + "\n", ":2: not JSON"},
      {header + "{\"seconds\": -1, \"seqs\": [[1, 1, 1]]}\n", ":2: seconds must be"},
      {header + "{\"seconds\": 0.1, \"seqs\": []}\n", ":2: a step with no sequences"},
      {header + "{\"seconds\": 0.1, \"seqs\": [[1, 0, 1]]}\n", ":2: held must be"},
      {header + "{\"seconds\": 0.1, \"seqs\": [[1, 1]]}\n", ":2: each sequence"},
      {header + "{\"seconds\": \"x\", \"seqs\": [[1, 1, 1]]}\n", ":2: bad step"},
  };
  for (const Case& c : cases) {
    Write(c.text);
    StatusOr<StepLog> log = ReadStepLog(path_);
    ASSERT_FALSE(log.ok()) << c.text;
    EXPECT_NE(log.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << log.status().message();
  }
  EXPECT_FALSE(ReadStepLog("/nonexistent/steps.jsonl").ok());
}

}  // namespace
}  // namespace kvserve::cost
