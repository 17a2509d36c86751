# Sourced by the shell tests (tests/llamacpp_compat_test.sh, tests/e2e/run_e2e.sh): the shell
# twin of KVSERVE_SKIP_IF_ABSENT (src/base/testing/test_dependency.h).
#   missing_dependency "what is missing"
# prints SKIP and exits 77 (ctest's SKIP_RETURN_CODE) normally; prints FAIL and exits 1 when
# KVSERVE_REQUIRE_ASSETS is set to anything but "" or "0" (CI: .ci/run), where every test
# dependency is installed and a skip would hide a broken setup.
missing_dependency() {
  if [[ -n "${KVSERVE_REQUIRE_ASSETS:-}" && "${KVSERVE_REQUIRE_ASSETS}" != 0 ]]; then
    echo "FAIL: missing test dependency: $* (KVSERVE_REQUIRE_ASSETS is set: a missing dependency fails the test)"
    exit 1
  fi
  echo "SKIP: missing test dependency: $* (set KVSERVE_REQUIRE_ASSETS=1 to fail instead of skipping)"
  exit 77
}
