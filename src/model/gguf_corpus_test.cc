// Replays the GGUF fuzzer's seed corpus and the malformed files through the fuzz target's
// body (fuzz/gguf_fuzz_body.h), so regressions found by fuzzing are caught by ordinary
// (g++) test runs. Run under KVSERVE_SANITIZE=ON to get the sanitizer checks too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../../fuzz/gguf_fuzz_body.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

std::string ReadFileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int ReplayDir(const fs::path& dir, int* num_ok) {
  int num_files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    SCOPED_TRACE(entry.path().string());
    std::string bytes = ReadFileBytes(entry.path());
    Status s = fuzz::RunGgufFuzzBody(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_NE(s.code(), StatusCode::kInternal) << s.ToString();
    if (s.ok()) ++*num_ok;
    ++num_files;
  }
  return num_files;
}

TEST(GgufCorpusTest, ReplaysFuzzCorpus) {
  fs::path corpus = fs::path(KVSERVE_TESTDATA_DIR) / "../../fuzz/corpus/gguf";
  int num_ok = 0;
  int num_files = ReplayDir(corpus, &num_ok);
  EXPECT_GE(num_files, 5);
  EXPECT_GE(num_ok, 2);  // the valid seeds parse end to end
}

TEST(GgufCorpusTest, ReplaysMalformedFiles) {
  int num_ok = 0;
  int num_files = ReplayDir(fs::path(KVSERVE_TESTDATA_DIR) / "gguf_malformed", &num_ok);
  EXPECT_GE(num_files, 40);
  // All but too_many_nested_arrays.gguf, which only exceeds a lowered GgufLimits (see
  // gguf_malformed_test.cc), are refused under the default limits.
  EXPECT_EQ(num_ok, 1);
}

TEST(GgufCorpusTest, ReplaysValidFiles) {
  int num_ok = 0;
  int num_files = ReplayDir(fs::path(KVSERVE_TESTDATA_DIR) / "gguf", &num_ok);
  EXPECT_EQ(num_ok, num_files);
}

}  // namespace
}  // namespace kvserve
