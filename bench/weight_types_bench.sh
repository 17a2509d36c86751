#!/usr/bin/env bash
# Prefill and decode speed of each GGUF weight type (issue "The GGUF files people actually
# download ..."): for each preset and type, `kvserve mkmodel` writes the file once, then
# `kvserve generate` and the real llama.cpp (bench/llamacpp_speed.mjs, node-llama-cpp's prebuilt
# CPU build) run on that same file in alternating runs (f16 KV for both, --threads), and the table
# gives medians and the ratio kvserve / llama.cpp. It also names the machine and its SIMD level.
#
# usage: bench/weight_types_bench.sh [--presets "smollm2-135m llama-3.2-1b"]
#          [--dtypes "f16 q8_0 q4_0 q4_k_m q5_k_m q6_k"] [--threads 2] [--runs 1]
#          [--prompt-tokens 512] [--gen-tokens 128]
# Needs a built tree (scripts/build.sh), node and tests/llamacpp/node_modules
# (scripts/setup_llamacpp.sh). Markdown to stdout, progress to stderr. Files are kept in
# build/bench-models/ (the llama-3.2-1b ones take 0.7-2.5 GB each).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh

PRESETS="smollm2-135m llama-3.2-1b"; DTYPES="f16 q8_0 q4_0 q4_k_m q5_k_m q6_k"; THREADS=2
RUNS=1; PROMPT=512; GEN=128
while (($#)); do
  case "$1" in
    --presets) PRESETS="$2"; shift ;;
    --dtypes) DTYPES="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --prompt-tokens) PROMPT="$2"; shift ;;
    --gen-tokens) GEN="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
K=build/kvserve
[[ -x "$K" ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "error: jq is needed (apt-get install jq)" >&2; exit 1; }
mkdir -p build/bench-models
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' "$@"; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
  "$(grep -o -w 'avx512_vnni\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "Threads $THREADS, prompt $PROMPT tokens, $GEN generated, f16 KV, median of $RUNS run(s)," \
  "kvserve and llama.cpp alternating on the same file."
echo
echo "| model | type | file MiB | kvserve prefill tok/s | llama.cpp prefill tok/s | ratio | kvserve decode tok/s | llama.cpp decode tok/s | ratio |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for preset in $PRESETS; do
  for dtype in $DTYPES; do
    model="$(bench_model "$K" "$preset" "$dtype")"
    mib="$(( $(stat -c %s "$model") / 1048576 ))"
    kp=(); kd=(); lp=(); ld=()
    for ((r = 1; r <= RUNS; r++)); do
      echo "[weight_types_bench] $preset $dtype run $r/$RUNS: kvserve" >&2
      j="$("$K" generate -m "$model" --random-prompt-tokens "$PROMPT" -n "$GEN" --temperature 0 \
            --ignore-eos --threads "$THREADS" --kv-cache-dtype f16 \
            --max-model-len $((PROMPT + GEN + 16)) --output-format json 2>/dev/null)"
      kp+=("$(jq -r .prefill_tokens_per_s <<<"$j")"); kd+=("$(jq -r .decode_tokens_per_s <<<"$j")")
      echo "[weight_types_bench] $preset $dtype run $r/$RUNS: llama.cpp" >&2
      j="$(node bench/llamacpp_speed.mjs --model "$model" --threads "$THREADS" \
            --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --runs 1 2>/dev/null)"
      lp+=("$(jq -r '.runs[0].prefill_tokens_per_s' <<<"$j")")
      ld+=("$(jq -r '.runs[0].decode_tokens_per_s' <<<"$j")")
    done
    KP="$(median "${kp[@]}")"; KD="$(median "${kd[@]}")"; LP="$(median "${lp[@]}")"; LD="$(median "${ld[@]}")"
    echo "| $preset | $dtype | $mib | $KP | $LP | $(ratio "$KP" "$LP") | $KD | $LD | $(ratio "$KD" "$LD") |"
  done
done
