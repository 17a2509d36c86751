#!/usr/bin/env bash
# Quality of each GGUF weight type (issue "The GGUF files people actually download ..."):
# stories260K (the real trained model in ../shared/assets) converted to each type with
# `kvserve convert --dtype`, then `kvserve eval perplexity` on the TinyStories validation head,
# beside the F32 file's. Prints a markdown table: file bytes, bits per weight of the matrices,
# the types the file holds, perplexity and its change against F32.
#
# usage: bench/weight_quant_eval.sh [--types "f32 f16 ... q6_k"] [--max-windows N] [--ctx 512]
# Needs build/kvserve and ../shared/assets. Progress on stderr.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TYPES="f32 f16 bf16 q8_0 q6_k q5_k_m q5_k_s q5_1 q5_0 q4_k_m q4_k_s q4_1 q4_0 q3_k_l q3_k_m q3_k_s q2_k"
MAX_WINDOWS=0; CTX=512
while (($#)); do
  case "$1" in
    --types) TYPES="$2"; shift ;;
    --max-windows) MAX_WINDOWS="$2"; shift ;;
    --ctx) CTX="$2"; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
K=build/kvserve
A=../shared/assets
MODEL="$A/models/stories260K/stories260K.bin"
TEXT="$A/text/tinystories_validation_head.txt"
[[ -x "$K" ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
[[ -f "$MODEL" && -f "$TEXT" ]] || { echo "error: $MODEL or $TEXT missing" >&2; exit 1; }
WORK="$(mktemp -d -t kvserve-wq.XXXXXX)"; trap 'rm -rf "$WORK"' EXIT
windows=(); ((MAX_WINDOWS > 0)) && windows=(--max-windows "$MAX_WINDOWS")
echo "stories260K, $(basename "$TEXT"), --ctx $CTX, f32 KV; $(lscpu | sed -n 's/^Model name: *//p')"
echo
echo "| --dtype | file bytes | types in the file | perplexity | vs f32 |"
echo "|---|---:|---|---:|---:|"
base=""
for t in $TYPES; do
  echo "[weight_quant_eval] $t" >&2
  f="$WORK/stories260K-$t.gguf"
  types="$("$K" convert -m "$MODEL" -o "$f" --dtype "$t" 2>&1 | sed -n 's/.*weights [^(]*(\(.*\)).*/\1/p' | tail -n 1)"
  ppl="$("$K" eval perplexity -m "$f" -f "$TEXT" --ctx "$CTX" "${windows[@]}" --format json \
          2>/dev/null | jq -r .perplexity)"
  [[ -z "$base" ]] && base="$ppl"
  delta="$(python3 -c "print(f'{($ppl / $base - 1) * 100:+.2f}%')")"
  echo "| $t | $(stat -c %s "$f") | ${types:-?} | $ppl | $delta |"
done
