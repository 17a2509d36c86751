#!/usr/bin/env bash
# Bootstraps, builds (scripts/build.sh) and runs every test with ctest. Exit status: ctest's.
# Tests that need ../shared/assets skip themselves when that folder is absent.
# Before the main run, the same tests run in an ASan + UBSan build (build-asan, -O1, debug
# checks on); KVSERVE_SANITIZERS=0 skips that pass.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build.sh
# Test-only llama.cpp reference for tests/llamacpp_compat_test.sh (~85 MB; skips when offline).
scripts/setup_llamacpp.sh || true
# The openai npm package for the `kvserve serve` end-to-end test (tests/e2e; fails without it).
scripts/setup_e2e.sh || echo "test.sh: setup_e2e failed: the serve_e2e test will fail"
if [[ "${KVSERVE_SANITIZERS:-1}" != 0 ]]; then
  echo "test.sh: ASan + UBSan pass (build-asan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVSERVE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g0" >/dev/null
  ninja -C build-asan -j"${JOBS:-$(nproc)}"
  ctest --test-dir build-asan --output-on-failure -j"${CTEST_JOBS:-2}" -E llamacpp_compat
fi
exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"${CTEST_JOBS:-2}"
