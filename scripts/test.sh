#!/usr/bin/env bash
# Bootstraps, builds (scripts/build.sh) and runs every test with ctest. Exit status: ctest's.
# Tests that need ../shared/assets skip themselves when that folder is absent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build.sh
# Test-only llama.cpp reference for tests/llamacpp_compat_test.sh (~85 MB; skips when offline).
scripts/setup_llamacpp.sh || true
exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"${CTEST_JOBS:-2}"
