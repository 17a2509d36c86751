#!/usr/bin/env bash
# The cost of structured output per token (issue "Tool calling, structured outputs ..."):
# the engine-thread time of grammar masks (compute, apply to the logits row, advance), measured
# inside `kvserve generate --json-schema` on a 128K-token vocabulary (llama-3.2-1b's shape,
# synthetic weights), against the decode step of smollm2-135m at batch 1 (the issue's yardstick:
# under 10% of it). Each run is a fresh process, so the masker starts cold: first-seen states
# are included. Also the in-engine decode with and without the grammar on both models.
#
# usage: bench/structured_output_bench.sh [--threads 2] [--runs 5] [--gen-tokens 256]
# Needs a built tree (scripts/build.sh) and jq. Markdown to stdout, progress to stderr. Model
# files are made once in build/bench-models/ (Q4_0; the 1B one is 0.8 GB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh

THREADS=2; RUNS=5; GEN=256
while (($#)); do
  case "$1" in
    --threads) THREADS="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --gen-tokens) GEN="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
K=build/kvserve
[[ -x "$K" ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "error: jq is needed (apt-get install jq)" >&2; exit 1; }
mkdir -p build/bench-models
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(map(float, sys.argv[1:])):.1f}")' "$@"; }

model() {  # preset -> path of its Q4_0 file (made once)
  bench_model "$K" "$1" q4_0
}

# A schema with the usual mix: keys, enums, numbers, bounded and free strings, an array of
# objects. The random model fills the strings with noise until the bounds or the closing quote.
SCHEMA='{"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 40},
  "age": {"type": "integer"},
  "role": {"enum": ["admin", "user", "guest"]},
  "email": {"type": "string", "format": "email"},
  "notes": {"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
     "title": {"type": "string"}, "score": {"type": "number"}, "done": {"type": "boolean"}},
     "required": ["title", "score", "done"]}}},
  "required": ["name", "age", "role", "email", "notes"]}'

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
  "$(grep -o -w 'avx512_vnni\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo
echo "| model (vocab) | run | decode ms/token | grammar tokens | grammar µs/token | grammar / decode step |"
echo "|---|---|---|---|---|---|"
declare -A DECODE_MS
declare -A VOCAB=([smollm2-135m]="49,152 tokens" [llama-3.2-1b]="128,256 tokens")
for preset in smollm2-135m llama-3.2-1b; do
  m=$(model "$preset")
  vocab=${VOCAB[$preset]}
  plain=(); constrained=(); per_tok=(); tokens=()
  for r in $(seq 1 "$RUNS"); do
    echo "$preset run $r/$RUNS ..." >&2
    # Alternating: the plain decode, then the same prompt under the schema.
    j=$("$K" generate -m "$m" -t "$THREADS" -p "Describe a user." -n "$GEN" --ignore-eos \
          --temperature 1 --seed "$r" --output-format json 2>/dev/null)
    plain+=("$(jq -r '1000 / .decode_tokens_per_s' <<<"$j")")
    j=$("$K" generate -m "$m" -t "$THREADS" -p "Describe a user." -n "$GEN" --temperature 1 \
          --seed "$r" --json-schema "$SCHEMA" --output-format json 2>/dev/null)
    constrained+=("$(jq -r '1000 / .decode_tokens_per_s' <<<"$j")")
    tokens+=("$(jq -r '.grammar_tokens' <<<"$j")")
    per_tok+=("$(jq -r '1e6 * .grammar_seconds / .grammar_tokens' <<<"$j")")
  done
  DECODE_MS[$preset]=$(median "${plain[@]}")
  echo "| $preset${vocab:+ ($vocab)} | plain | $(median "${plain[@]}") | | | |"
  g=$(median "${per_tok[@]}")
  echo "| $preset${vocab:+ ($vocab)} | --json-schema | $(median "${constrained[@]}") | $(median "${tokens[@]}") | $g | $(python3 -c "print(f'{$g / 1000 / ${DECODE_MS[$preset]}:.1%}')") |"
done
echo
g1b=$(median "${per_tok[@]}")
echo "Grammar cost per token at the 128K vocabulary (llama-3.2-1b's): $g1b µs, " \
  "$(python3 -c "print(f'{$g1b / 1000 / ${DECODE_MS[smollm2-135m]}:.1%}')") of a smollm2-135m" \
  "decode step at batch 1 (${DECODE_MS[smollm2-135m]} ms); medians of $RUNS runs, $THREADS threads."
