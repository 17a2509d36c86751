#!/usr/bin/env bash
# DeepSeek MLA + MoE speed (issue 14), on a synthetic GGUF of a real shape made by
# `kvserve mkmodel` (deepseek-v2-lite q8_0 by default: 15.5 GB, memory-mapped):
#   1. prefill (--prompt-tokens) and decode (--gen-tokens) tokens/s of `kvserve generate` and of
#      the real llama.cpp (bench/llamacpp_speed.mjs, node-llama-cpp's prebuilt CPU build) on the
#      same file, alternating runs, f16 KV for both, at each --threads; medians and ratios;
#   2. decode tokens/s at each --contexts length, absorbed (latent cache) against expanded
#      (per-head K/V cache) through build/bench/mla_decode, and the KV bytes each holds.
#
# usage: bench/mla_bench.sh [--preset deepseek-v2-lite] [--dtype q8_0] [--threads "1 2"]
#          [--runs 3] [--prompt-tokens 512] [--gen-tokens 128] [--contexts "1024 8192 32768"]
# Needs a built tree (scripts/build.sh, with build/bench/mla_decode), node and
# tests/llamacpp/node_modules (scripts/setup_llamacpp.sh). Markdown to stdout, progress to stderr.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh

PRESET=deepseek-v2-lite; DTYPE=q8_0; THREADS="1 2"; RUNS=3; PROMPT=512; GEN=128
CONTEXTS="1024 8192 32768"
while (($#)); do
  case "$1" in
    --preset) PRESET="$2"; shift ;;
    --dtype) DTYPE="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --prompt-tokens) PROMPT="$2"; shift ;;
    --gen-tokens) GEN="$2"; shift ;;
    --contexts) CONTEXTS="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
K=build/kvserve
[[ -x "$K" && -x build/bench/mla_decode ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
MODEL="$(bench_model "$K" "$PRESET" "$DTYPE")"
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' "$@"; }

echo "Model: $MODEL ($("$K" plan -m "$MODEL" 2>/dev/null | grep -m1 '^weights' | sed 's/^weights: *//'))"
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(free -g | awk '/^Mem/ {print $2}') GiB"
echo
echo "| threads | kvserve prefill tok/s | llama.cpp prefill tok/s | ratio | kvserve decode tok/s | llama.cpp decode tok/s | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for t in $THREADS; do
  kp=(); kd=(); lp=(); ld=()
  for ((r = 1; r <= RUNS; r++)); do
    echo "[mla_bench] threads $t run $r/$RUNS: kvserve" >&2
    j="$("$K" generate -m "$MODEL" --random-prompt-tokens "$PROMPT" -n "$GEN" --temperature 0 \
          --ignore-eos --threads "$t" --kv-cache-dtype f16 --max-model-len $((PROMPT + GEN + 16)) \
          --output-format json 2>/dev/null)"
    kp+=("$(jq -r .prefill_tokens_per_s <<<"$j")"); kd+=("$(jq -r .decode_tokens_per_s <<<"$j")")
    echo "[mla_bench] threads $t run $r/$RUNS: llama.cpp" >&2
    j="$(node bench/llamacpp_speed.mjs --model "$MODEL" --threads "$t" --prompt-tokens "$PROMPT" \
          --gen-tokens "$GEN" --runs 1 2>/dev/null)"
    lp+=("$(jq -r '.runs[0].prefill_tokens_per_s' <<<"$j")"); ld+=("$(jq -r '.runs[0].decode_tokens_per_s' <<<"$j")")
  done
  KP="$(median "${kp[@]}")"; KD="$(median "${kd[@]}")"; LP="$(median "${lp[@]}")"; LD="$(median "${ld[@]}")"
  echo "| $t | $KP | $LP | $(python3 -c "print(f'{$KP/$LP:.2f}')") | $KD | $LD | $(python3 -c "print(f'{$KD/$LD:.2f}')") |"
done
echo
echo "Decode at long contexts (2 threads, f16 KV, cache filled with random rows, $RUNS runs):"
echo
./build/bench/mla_decode --model "$MODEL" --contexts "$CONTEXTS" --gen-tokens 16 --threads 2 \
  --runs "$RUNS" --kv-dtype f16
