#!/usr/bin/env bash
# The test command (README quick start).
#   scripts/test.sh               Release: scripts/build.sh (bootstrap + build/), then ctest there.
#   scripts/test.sh --sanitizers  the same tests in an ASan + UBSan build (build-asan, -O1, debug
#                                 checks on; the llama.cpp cross-check is left to the Release run).
# Before ctest it installs the test-only npm packages: the openai package for the `kvserve serve`
# end-to-end test (scripts/setup_e2e.sh) and, for the Release run, the llama.cpp reference for
# tests/llamacpp_compat_test.sh (scripts/setup_llamacpp.sh).
# Tests whose inputs are absent (../shared/assets, python3-jinja2, promtool, the llama.cpp
# reference) skip themselves, unless KVSERVE_REQUIRE_ASSETS=1 (as .ci/run sets), which turns each
# such skip into a failure naming what is missing, and makes a failed npm setup fail here.
# Exit status: ctest's; the last line printed is ctest's summary ("100% tests passed, ...").
# Environment: JOBS (build jobs, default: number of CPUs), CTEST_JOBS (default 2), BUILD_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=release
case "${1:-}" in
  "") ;;
  --sanitizers) mode=sanitizers ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "test.sh: unknown argument '$1' (usage: scripts/test.sh [--sanitizers])" >&2; exit 2 ;;
esac
required=0
[[ -n "${KVSERVE_REQUIRE_ASSETS:-}" && "${KVSERVE_REQUIRE_ASSETS}" != 0 ]] && required=1

export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
if [[ $mode == release ]]; then
  scripts/build.sh
  dir="${BUILD_DIR:-build}"
  exclude=()
else
  scripts/bootstrap.sh
  dir=build-asan
  echo "test.sh: ASan + UBSan build ($dir)"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVSERVE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g0" >/dev/null
  ninja -C "$dir" -j"${JOBS:-$(nproc)}"
  exclude=(-E llamacpp_compat)
fi

# Outside CI a failed llama.cpp setup only warns (the compat test then skips); in CI it fails.
[[ $mode == release ]] && scripts/setup_llamacpp.sh
if ! scripts/setup_e2e.sh; then
  ((required)) && { echo "test.sh: error: scripts/setup_e2e.sh failed" >&2; exit 1; }
  echo "test.sh: setup_e2e failed: the serve_e2e test will fail"
fi

log="$dir/ctest-output.log"
set +e
ctest --test-dir "$dir" --output-on-failure -j"${CTEST_JOBS:-2}" "${exclude[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# ctest prints its summary line before the label times and the failed tests: end with it.
summary="$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1 || true)"
[[ -n "$summary" ]] && echo "$summary"
exit "$rc"
