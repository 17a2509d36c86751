#!/usr/bin/env bash
# Token eviction capacity: how many 4,096-token requests run at once in a fixed KV budget, and
# their output tokens/s, with and without eviction (docs/benchmarks.md).
#
# usage: bench/kv_eviction_capacity.sh [KVSERVE_BINARY] [ASSETS_DIR]
#   env: THREADS (2), NUM_PROMPTS (20), KV_MEMORY (400MB), BUDGET (512), OUTPUT_TOKENS (128),
#        METHODS ("none streaming snapkv")
#
# The synthetic smollm2-135m Q8_0 model (`kvserve mkmodel`, random weights, seed 0), bf16 KV;
# NUM_PROMPTS prompts of about 4,096 tokens cut from ASSETS_DIR/text/tinystories_validation_head.txt
# (different offsets: no shared prefix), each generating OUTPUT_TOKENS tokens (--ignore-eos),
# all submitted at once through `kvserve generate --prompts-file` (the engine's continuous
# batching). Reports, per method, the most requests running at once (the engine's own count),
# preemptions, output tokens/s over the whole run, mean time to first token and per output
# token, and the wall time. One run each (these runs take minutes; on 2 cores the run is
# prefill-bound, so the capacity shows in the concurrency, TTFT and TPOT more than in the
# whole run's output rate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-build/kvserve}")
ASSETS=${2:-../shared/assets}
THREADS=${THREADS:-2}
NUM_PROMPTS=${NUM_PROMPTS:-20}
KV_MEMORY=${KV_MEMORY:-400MB}
BUDGET=${BUDGET:-512}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-128}
METHODS=${METHODS:-"none streaming snapkv"}
source bench/bench_model.sh
MODEL=$(smollm2_q8_model "$BIN")
WORK=$(mktemp -d -t kvserve-capacity.XXXXXX)
# About 4,096 tokens each: the synthetic vocabulary takes ~1.83 bytes per token of this text.
python3 - "$ASSETS/text/tinystories_validation_head.txt" "$NUM_PROMPTS" >"$WORK/prompts.txt" <<'PY'
import sys
text = open(sys.argv[1]).read().replace("\n", " ")
for i in range(int(sys.argv[2])):
    print(text[i * 20000: i * 20000 + 7450])
PY
TOKENS=$("$BIN" tokenize -m "$MODEL" --text "$(head -n 1 "$WORK/prompts.txt")" 2>/dev/null | wc -w)
echo "kv_eviction_capacity.sh: $NUM_PROMPTS prompts of about $TOKENS tokens, KV budget $KV_MEMORY" >&2
echo "| method | KV tokens kept | most running at once | preemptions | output tok/s (whole run) | mean TTFT s | mean TPOT ms | wall s |"
echo "|---|---|---|---|---|---|---|---|"
for m in $METHODS; do
  flags=()
  [[ $m != none ]] && flags=(--kv-eviction "$m" --kv-budget "$BUDGET")
  "$BIN" generate -m "$MODEL" --prompts-file "$WORK/prompts.txt" -n "$OUTPUT_TOKENS" --ignore-eos \
    --kv-cache-memory "$KV_MEMORY" --kv-cache-dtype bf16 --threads "$THREADS" \
    --output-format json "${flags[@]}" >"$WORK/$m.jsonl" 2>"$WORK/$m.log" || {
      echo "kv_eviction_capacity.sh: $m failed, see $WORK/$m.log" >&2; exit 1; }
  python3 - "$WORK/$m.jsonl" "$m" "$BUDGET" <<'PY'
import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
kept = "all" if sys.argv[2] == "none" else sys.argv[3]
print(f"| {sys.argv[2]} | {kept} | {s['max_num_running']} | {s['num_preemptions']} | "
      f"{s['output_tokens_per_s']:.1f} | {s['mean_ttft_ms'] / 1000:.0f} | {s['mean_tpot_ms']:.0f} | "
      f"{s['elapsed_s']:.0f} |")
PY
done
grep -h "KV cache:" "$WORK/none.log" | head -2 >&2
rm -rf "$WORK"
