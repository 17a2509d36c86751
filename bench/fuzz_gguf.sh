#!/usr/bin/env bash
# Builds the GGUF libFuzzer target with clang (ASan + UBSan) in build-fuzz/ and runs it for
# SECONDS (default 600) on the seed corpus. New inputs go to fuzz/corpus-work/ (gitignored);
# crashes are written there as crash-*/leak-*/timeout-* files.
#   bench/fuzz_gguf.sh [SECONDS]
set -euo pipefail
seconds="${1:-600}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${root}/build-fuzz"
work="${root}/fuzz/corpus-work"

cmake -S "${root}" -B "${build}" -G Ninja -DKVSERVE_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "${build}" -j2 gguf_fuzz

mkdir -p "${work}"
# The first corpus directory receives new inputs; the others are read-only seeds.
"${build}/fuzz/gguf_fuzz" "${work}" "${root}/fuzz/corpus/gguf" \
  "${root}/tests/data/gguf_malformed" "${root}/tests/data/gguf" \
  -dict="${root}/fuzz/gguf.dict" -max_total_time="${seconds}" -max_len=8192 \
  -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="${work}/"
