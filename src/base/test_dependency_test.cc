// KVSERVE_SKIP_IF_ABSENT (base/testing/test_dependency.h): skips normally, fails under
// KVSERVE_REQUIRE_ASSETS=1, and does nothing when the dependency is present.
#include "base/testing/test_dependency.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

// Sets KVSERVE_REQUIRE_ASSETS for one scope (unset when value is null), then restores it.
class ScopedRequireAssets {
 public:
  explicit ScopedRequireAssets(const char* value) {
    if (const char* old = std::getenv("KVSERVE_REQUIRE_ASSETS")) old_ = old;
    if (value) {
      setenv("KVSERVE_REQUIRE_ASSETS", value, 1);
    } else {
      unsetenv("KVSERVE_REQUIRE_ASSETS");
    }
  }
  ~ScopedRequireAssets() {
    if (old_) {
      setenv("KVSERVE_REQUIRE_ASSETS", old_->c_str(), 1);
    } else {
      unsetenv("KVSERVE_REQUIRE_ASSETS");
    }
  }

 private:
  std::optional<std::string> old_;
};

bool g_reached_end = false;

void NeedsThing(bool present) {
  g_reached_end = false;
  KVSERVE_SKIP_IF_ABSENT(present, "the thing at /x/" << 42);
  g_reached_end = true;
}

// Runs NeedsThing with GoogleTest's results captured, so this test itself neither skips nor fails.
std::vector<::testing::TestPartResult> Capture(bool present) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    NeedsThing(present);
  }
  std::vector<::testing::TestPartResult> out;
  for (int i = 0; i < results.size(); ++i) out.push_back(results.GetTestPartResult(i));
  return out;
}

TEST(TestDependencyTest, RequiredOnlyForNonEmptyNonZero) {
  {
    ScopedRequireAssets env(nullptr);
    EXPECT_FALSE(TestDependenciesRequired());
  }
  {
    ScopedRequireAssets env("0");
    EXPECT_FALSE(TestDependenciesRequired());
  }
  {
    ScopedRequireAssets env("");
    EXPECT_FALSE(TestDependenciesRequired());
  }
  {
    ScopedRequireAssets env("1");
    EXPECT_TRUE(TestDependenciesRequired());
  }
}

TEST(TestDependencyTest, PresentDoesNothing) {
  for (const char* value : {static_cast<const char*>(nullptr), "1"}) {
    ScopedRequireAssets env(value);
    EXPECT_TRUE(Capture(true).empty());
    EXPECT_TRUE(g_reached_end);
  }
}

TEST(TestDependencyTest, AbsentSkipsNamingWhat) {
  ScopedRequireAssets env(nullptr);
  const auto results = Capture(false);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].skipped());
  EXPECT_NE(std::string(results[0].message()).find("missing test dependency: the thing at /x/42"),
            std::string::npos)
      << results[0].message();
  EXPECT_FALSE(g_reached_end);
}

TEST(TestDependencyTest, AbsentFailsWhenRequired) {
  ScopedRequireAssets env("1");
  const auto results = Capture(false);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].fatally_failed());
  EXPECT_NE(std::string(results[0].message()).find("missing test dependency: the thing at /x/42"),
            std::string::npos)
      << results[0].message();
  EXPECT_NE(std::string(results[0].message()).find("KVSERVE_REQUIRE_ASSETS"), std::string::npos);
  EXPECT_FALSE(g_reached_end);
}

// A following `else` belongs to the caller's `if`, not to the macro's.
TEST(TestDependencyTest, NoDanglingElse) {
  ScopedRequireAssets env("1");
  bool took_else = false;
  if (false)
    KVSERVE_SKIP_IF_ABSENT(false, "never");
  else
    took_else = true;
  EXPECT_TRUE(took_else);
}

}  // namespace
}  // namespace kvserve
