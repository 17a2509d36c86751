#!/usr/bin/env bash
# What H2O's attention statistics cost: decode time per output token (TPOT) at about 8K
# context with `--kv-eviction h2o` (every row's attention mass accumulated, budget above the
# context so nothing is evicted and every step records) against no eviction, alternating runs,
# medians (docs/benchmarks.md). Also the prefill time of the same prompt (H2O records every
# prompt row's scores too).
#
# usage: bench/h2o_overhead.sh [KVSERVE_BINARY] [ASSETS_DIR]
#   env: THREADS (2), RUNS (3), PROMPT_BYTES (14200: about 7,800 tokens), OUTPUT_TOKENS (128)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-build/kvserve}")
ASSETS=${2:-../shared/assets}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
PROMPT_BYTES=${PROMPT_BYTES:-14200}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-128}
source bench/bench_model.sh
MODEL=$(smollm2_q8_model "$BIN")
WORK=$(mktemp -d -t kvserve-h2o.XXXXXX)
python3 - "$ASSETS/text/tinystories_validation_head.txt" "$PROMPT_BYTES" >"$WORK/prompt.txt" <<'PY'
import sys
print(open(sys.argv[1]).read().replace("\n", " ")[: int(sys.argv[2])])
PY
TOKENS=$("$BIN" tokenize -m "$MODEL" --text "$(cat "$WORK/prompt.txt")" 2>/dev/null | wc -w)
echo "h2o_overhead.sh: a prompt of $TOKENS tokens, $OUTPUT_TOKENS output tokens, $THREADS threads" >&2
for ((i = 1; i <= RUNS; ++i)); do
  for m in none h2o; do
    flags=()
    [[ $m == h2o ]] && flags=(--kv-eviction h2o --kv-budget 8150)
    "$BIN" generate -m "$MODEL" --prompts-file "$WORK/prompt.txt" -n "$OUTPUT_TOKENS" \
      --ignore-eos --threads "$THREADS" --output-format json "${flags[@]}" 2>/dev/null |
      tail -n 1 >>"$WORK/$m.jsonl"
    echo "h2o_overhead.sh: run $i $m done" >&2
  done
done
python3 - "$WORK" "$TOKENS" <<'PY'
import json, os, statistics, sys
work, tokens = sys.argv[1], sys.argv[2]
rows = {}
for m in ("none", "h2o"):
    runs = [json.loads(l) for l in open(os.path.join(work, m + ".jsonl"))]
    rows[m] = (statistics.median(r["mean_tpot_ms"] for r in runs),
               statistics.median(r["mean_ttft_ms"] for r in runs), len(runs))
print(f"| --kv-eviction | TPOT ms (median) | prefill (TTFT) ms (median) | runs |")
print("|---|---|---|---|")
for m, (tpot, ttft, n) in rows.items():
    print(f"| {m} | {tpot:.2f} | {ttft:.0f} | {n} |")
print(f"\nH2O decode: {100 * (rows['h2o'][0] / rows['none'][0] - 1):+.1f}% per token; "
      f"prefill: {100 * (rows['h2o'][1] / rows['none'][1] - 1):+.1f}% ({tokens}-token prompt)")
PY
rm -rf "$WORK"
