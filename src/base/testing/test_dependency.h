// Test-only: one rule for tests whose inputs may be absent on a developer's machine (the real
// data in ../shared/assets, python3 with jinja2, promtool, ...).
//
//   KVSERVE_SKIP_IF_ABSENT(std::filesystem::exists(path), path);
//   KVSERVE_SKIP_IF_ABSENT(!python.empty(), "python3 with jinja2 (apt-get install python3-jinja2)");
//
// When the first argument (the dependency is present) is false, the test stops: it is skipped
// (GTEST_SKIP) normally, and it fails (GTEST_FAIL: a failure, then return) when the environment
// variable KVSERVE_REQUIRE_ASSETS is set to anything but "" or "0", as CI does (.ci/run), where
// every dependency is installed and a skip would hide a broken setup. The second argument names
// what is missing; it is streamed into the message, so `"no " << a << " or " << b` works.
// Use it in a TEST body or in a fixture's SetUp (a failed SetUp does not run the body).
// Not for a CPU lacking a SIMD level: that skip is legitimate on any machine.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace kvserve {

// True when KVSERVE_REQUIRE_ASSETS asks for every test dependency to be present.
inline bool TestDependenciesRequired() {
  const char* v = std::getenv("KVSERVE_REQUIRE_ASSETS");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

}  // namespace kvserve

// The switch keeps a following `else` from binding to the macro's `if` (GoogleTest's trick).
#define KVSERVE_SKIP_IF_ABSENT(present, what)                                                   \
  switch (0)                                                                                    \
  case 0:                                                                                       \
  default:                                                                                      \
    if (present) {                                                                              \
    } else if (::kvserve::TestDependenciesRequired())                                           \
      GTEST_FAIL() << "missing test dependency: " << what                                       \
                   << " (KVSERVE_REQUIRE_ASSETS is set: a missing dependency fails the test)";  \
    else                                                                                        \
      GTEST_SKIP() << "missing test dependency: " << what                                       \
                   << " (set KVSERVE_REQUIRE_ASSETS=1 to fail instead of skipping)"
