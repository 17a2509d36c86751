#!/usr/bin/env bash
# Token eviction quality: `kvserve eval perplexity --kl-divergence --kv-eviction M --kv-budget N`
# for every method and budget against the full f32 cache, as markdown for docs/kv-eviction.md.
#
# usage: bench/kv_eviction_eval.sh KVSERVE_BINARY OUT_DIR [ASSETS_DIR]
#   env: THREADS (default 2), METHODS (default "streaming h2o snapkv pyramidkv"),
#        BUDGETS (default "32 64 128 256"), CTX (default 512), WINDOWS (default 0: all)
#
# Builds nothing. stories260K (real trained weights; trained context 512) over
# ASSETS_DIR/text/tinystories_validation_head.txt (~393K tokens, 767 windows of 512). Each
# window is one scoring request: its first CTX/2 tokens are the context, compressed at the
# compression point, then the second half is computed and scored with what is kept (SnapKV and
# PyramidKV compress once; StreamingLLM and H2O keep evicting while scoring). About 40 s per
# run at 2 threads. Also: int8 KV at budget 128 for each method, and StreamingLLM at --ctx
# 2048 (4x the trained context) with a budget of 256 against the full cache at --ctx 512.
# SnapKV/PyramidKV observation window: 32, or budget / 4 below a budget of 128.
# Writes OUT_DIR/<method>_<budget>[_int8].json and .log, and OUT_DIR/kv_eviction_eval.md; a
# rerun keeps the runs whose JSON is there (delete OUT_DIR to start over).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,5p' "$0" >&2
  exit 2
fi
KVSERVE=$(realpath "$1")
OUT_DIR=$2
ASSETS=${3:-"$(dirname "${BASH_SOURCE[0]}")/../../shared/assets"}
THREADS=${THREADS:-2}
METHODS=${METHODS:-"streaming h2o snapkv pyramidkv"}
BUDGETS=${BUDGETS:-"32 64 128 256"}
CTX=${CTX:-512}
WINDOWS=${WINDOWS:-0}
STORIES="$ASSETS/models/stories260K/stories260K.bin"
TEXT="$ASSETS/text/tinystories_validation_head.txt"
for f in "$KVSERVE" "$STORIES" "$TEXT"; do
  [[ -e "$f" ]] || { echo "kv_eviction_eval.sh: missing $f" >&2; exit 1; }
done
mkdir -p "$OUT_DIR"

run() {  # name, extra flags... (a run whose JSON is already there is kept: reruns resume)
  local name=$1
  shift
  if python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$OUT_DIR/$name.json" 2>/dev/null; then
    echo "kv_eviction_eval.sh: $name (kept from an earlier run)" >&2
    return
  fi
  echo "kv_eviction_eval.sh: $name" >&2
  "$KVSERVE" eval perplexity -m "$STORIES" -f "$TEXT" --ctx "$CTX" --max-windows "$WINDOWS" \
    --threads "$THREADS" --format json "$@" >"$OUT_DIR/$name.json" 2>"$OUT_DIR/$name.log"
}

run full --kl-divergence
# SnapKV and PyramidKV keep their whole observation window inside the budget: it is 32 tokens
# (the papers' default), or a quarter of the budget below 128.
obs() { if (($1 < 128)); then echo $(($1 / 4)); else echo 32; fi; }
for m in $METHODS; do
  for b in $BUDGETS 128_int8; do
    budget=${b%_int8}
    flags=(--kl-divergence --kv-eviction "$m" --kv-budget "$budget")
    [[ $m == snapkv || $m == pyramidkv ]] && flags+=(--kv-observation-window "$(obs "$budget")")
    [[ $b == *_int8 ]] && flags+=(--kv-cache-dtype int8)
    run "${m}_$b" "${flags[@]}"
  done
done
CTX=2048 run streaming_256_ctx2048 --kv-eviction streaming --kv-budget 256

python3 - "$OUT_DIR" "$METHODS" "$BUDGETS" <<'PY' | tee "$OUT_DIR/kv_eviction_eval.md"
import json, os, sys
out, methods, budgets = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
full = load("full")
print(f"Full cache (f32): perplexity {full['perplexity']:.4f} +/- {full['perplexity_stderr']:.4f}, "
      f"{full['mean_kv_tokens_kept']:.0f} KV tokens attended per scored token, "
      f"{full['num_scored_tokens']} scored tokens in {full['num_windows']} windows of {full['ctx']}.")
print()
print("| method | budget | obs. window | KV | perplexity | vs full | mean KLD | top-1 agreement | KV tokens attended |")
print("|---|---|---|---|---|---|---|---|---|")
for m in methods:
    for b, kv in [(b, "f32") for b in budgets] + [("128", "int8")]:
        j = load(f"{m}_{b}" + ("_int8" if kv == "int8" else ""))
        ratio = j["perplexity"] / full["perplexity"] - 1
        obs = (str(min(32, int(b) // 4)) if int(b) < 128 else "32") if m in ("snapkv", "pyramidkv") else "-"
        print(f"| {m} | {b} | {obs} | {kv} | {j['perplexity']:.4f} | {100*ratio:+.2f}% | {j['mean_kld']:.4f} | "
              f"{100*j['top1_agreement']:.2f}% | {j['mean_kv_tokens_kept']:.0f} |")
s = load("streaming_256_ctx2048")
print()
print(f"StreamingLLM, --ctx {s['ctx']} (4x the trained context), budget 256: perplexity "
      f"{s['perplexity']:.4f} +/- {s['perplexity_stderr']:.4f} ({100*(s['perplexity']/full['perplexity']-1):+.2f}% "
      f"against the full cache at --ctx {full['ctx']}), {s['mean_kv_tokens_kept']:.0f} KV tokens attended.")
PY
