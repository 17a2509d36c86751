#!/usr/bin/env bash
# Single-prompt `kvserve generate` speed of two builds, side by side in alternating runs on the
# same synthetic GGUF: median prefill and decode tok/s of each and their ratio (B / A).
#
# usage: bench/ab_generate.sh BUILD_DIR_A BUILD_DIR_B [--runs 5] [--preset smollm2-135m]
#          [--dtype q8_0] [--threads 2] [--prompt-tokens 512] [--gen-tokens 128]
#
# Both builds must have a `kvserve` binary (scripts/build.sh; an older commit can be built in a
# git worktree). The model is made once with A's `mkmodel` into build/bench-models.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh

if (($# < 2)); then sed -n '2,9p' "$0"; exit 2; fi
A="$1"; B="$2"; shift 2
RUNS=5; PRESET=smollm2-135m; DTYPE=q8_0; THREADS=2; PROMPT_TOKENS=512; GEN_TOKENS=128
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift ;;
    --preset) PRESET="$2"; shift ;;
    --dtype) DTYPE="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --prompt-tokens) PROMPT_TOKENS="$2"; shift ;;
    --gen-tokens) GEN_TOKENS="$2"; shift ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
for d in "$A" "$B"; do
  [[ -x "$d/kvserve" ]] || { echo "error: $d/kvserve not found" >&2; exit 1; }
done
MODEL="$(bench_model "$A/kvserve" "$PRESET" "$DTYPE")"

OUT="$(mktemp /tmp/kvserve-ab.XXXXXX)"
trap 'rm -f "$OUT"' EXIT
for ((i = 1; i <= RUNS; i++)); do
  for side in A B; do
    dir="$A"; [[ "$side" == B ]] && dir="$B"
    echo "[ab] run $i/$RUNS: $side ($dir)" >&2
    json=$("$dir/kvserve" generate --model "$MODEL" --random-prompt-tokens "$PROMPT_TOKENS" \
      -n "$GEN_TOKENS" --ignore-eos --temperature 0 --threads "$THREADS" \
      --output-format json 2>/dev/null)
    echo "$side $json" >> "$OUT"
  done
done
python3 - "$OUT" "$A" "$B" "$PRESET" "$DTYPE" "$THREADS" "$PROMPT_TOKENS" "$GEN_TOKENS" <<'EOF'
import json, statistics, sys
path, a, b, preset, dtype, threads, prompt, gen = sys.argv[1:]
runs = {"A": [], "B": []}
for line in open(path):
    side, js = line.split(" ", 1)
    runs[side].append(json.loads(js))
def med(side, key):
    return statistics.median(r[key] for r in runs[side])
print(f"{preset} {dtype}, {threads} threads, prompt {prompt}, {gen} generated; "
      f"medians of {len(runs['A'])} alternating runs")
print("| build | prefill tok/s | decode tok/s |")
print("|---|---:|---:|")
for side, d in (("A", a), ("B", b)):
    print(f"| {side}: {d} | {med(side, 'prefill_tokens_per_s'):.1f} | "
          f"{med(side, 'decode_tokens_per_s'):.1f} |")
print(f"| B / A | {med('B', 'prefill_tokens_per_s') / med('A', 'prefill_tokens_per_s'):.3f} | "
      f"{med('B', 'decode_tokens_per_s') / med('A', 'decode_tokens_per_s'):.3f} |")
EOF
