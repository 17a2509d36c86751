#!/usr/bin/env bash
# Installs what is missing (scripts/bootstrap.sh), configures build/ (Ninja, Release) and builds
# everything: the `build/kvserve` binary, the libraries and the tests.
# Environment: BUILD_DIR (default build), JOBS (default: number of CPUs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/bootstrap.sh
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
# ccache keys on paths relative to the checkout, so other clones and worktrees share hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
