#!/usr/bin/env bash
# End-to-end generation benchmark: prefill and decode speed of `kvserve generate` on synthetic
# models of real shapes, each stated as a fraction of this machine's measured ceiling
# (build/bench/ceiling: FMA rate for prefill, memory read bandwidth for decode).
#
# usage: bench/run_benchmarks.sh [--quick] [--runs R] [--presets "smollm2-135m llama-3.2-1b"]
#          [--dtypes "f16 bf16 q8_0"] [--threads "1 2"] [--prompt-tokens 512] [--gen-tokens 128]
#          [--build-dir build] [--cache-dir build/bench-models] [--out FILE.md]
#
# --quick: the `tiny` preset, 1 run, 32 generated tokens, a shorter ceiling measurement: a smoke
# test of the whole pipeline in seconds. Needs a built tree (scripts/build.sh) and python3.
# Synthetic GGUFs are made once (kvserve mkmodel) and cached in --cache-dir.
# The markdown table goes to stdout (and --out); progress goes to stderr.
#
# Ceilings: prefill tok/s <= fma_gflops * 1e9 / (2 * weights multiplied per prompt token) (the
# layers' matrices for every token, the output matrix once per prompt; matmul flops only:
# attention adds a little at 512 tokens); decode tok/s <= read_bandwidth / weight bytes read per
# token (all weights except the embedding table, which counts when it is also the output matrix).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh

RUNS=3
PRESETS="smollm2-135m llama-3.2-1b"
DTYPES="f16 bf16 q8_0"
THREADS="1 2"
PROMPT_TOKENS=512
GEN_TOKENS=128
BUILD_DIR=build
CACHE_DIR=""
OUT=""
CEILING_ARGS=()
while (($#)); do
  case "$1" in
    --quick) PRESETS="tiny"; RUNS=1; GEN_TOKENS=32; CEILING_ARGS=(--buffer_mib 256 --repetitions 3) ;;
    --runs) RUNS="$2"; shift ;;
    --presets) PRESETS="$2"; shift ;;
    --dtypes) DTYPES="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --prompt-tokens) PROMPT_TOKENS="$2"; shift ;;
    --gen-tokens) GEN_TOKENS="$2"; shift ;;
    --build-dir) BUILD_DIR="$2"; shift ;;
    --cache-dir) CACHE_DIR="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
CACHE_DIR="${CACHE_DIR:-$BUILD_DIR/bench-models}"
KVSERVE="$BUILD_DIR/kvserve"
CEILING="$BUILD_DIR/bench/ceiling"
if [[ ! -x "$KVSERVE" ]]; then
  echo "error: $KVSERVE not found; build first (scripts/build.sh)" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "error: python3 is needed (scripts/bootstrap.sh)" >&2; exit 1; }

RESULTS="$(mktemp -d /tmp/kvserve-bench.XXXXXX)"
trap 'rm -rf "$RESULTS"' EXIT
log() { echo "[bench] $*" >&2; }

# 1. Machine ceilings per thread count.
for t in $THREADS; do
  if [[ -x "$CEILING" ]]; then
    log "measuring ceilings with $t thread(s)"
    "$CEILING" --threads "$t" --format json "${CEILING_ARGS[@]}" >"$RESULTS/ceiling-$t.json"
  else
    log "warning: $CEILING not built: ceilings and fractions will be n/a"
    echo '{}' >"$RESULTS/ceiling-$t.json"
  fi
done

# 2. Synthetic models (cached).
for p in $PRESETS; do
  for d in $DTYPES; do bench_model "$KVSERVE" "$p" "$d" "$CACHE_DIR" >/dev/null; done
done

# 3. Generation runs: a fixed pseudo-random prompt of exactly PROMPT_TOKENS ids, greedy, exactly
# GEN_TOKENS outputs (EOS ignored).
for p in $PRESETS; do
  for d in $DTYPES; do
    for t in $THREADS; do
      for ((r = 1; r <= RUNS; r++)); do
        log "generate $p $d threads=$t run $r/$RUNS"
        "$KVSERVE" generate --model "$CACHE_DIR/$p-$d.gguf" --output-format json --threads "$t" \
          -n "$GEN_TOKENS" --random-prompt-tokens "$PROMPT_TOKENS" --ignore-eos \
          --temperature 0 --seed 0 >"$RESULTS/run-$p-$d-$t-$r.json" 2>"$RESULTS/run.err" || {
          cat "$RESULTS/run.err" >&2
          exit 1
        }
      done
    done
  done
done

# 4. Medians and the table.
python3 - "$RESULTS" "$PRESETS" "$DTYPES" "$THREADS" "$RUNS" "$PROMPT_TOKENS" "$GEN_TOKENS" \
  >"$RESULTS/table.md" <<'EOF'
import json, os, statistics, sys
results, presets, dtypes, threads, runs, prompt_tokens, gen_tokens = sys.argv[1:]
runs = int(runs)

def load(path):
    with open(path) as f:
        return json.load(f)

def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:,.{digits}f}"

def human_bytes(n):
    for unit in ["B", "KB", "MB", "GB"]:
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024

print(f"Prompt {prompt_tokens} tokens, {gen_tokens} generated tokens, greedy; median of {runs} "
      "run(s). Ceilings from build/bench/ceiling (best of its passes):")
print()
for t in threads.split():
    c = load(os.path.join(results, f"ceiling-{t}.json"))
    print(f"- {t} thread(s): read bandwidth {fmt(c.get('read_bandwidth_gbs'), 2)} GB/s, "
          f"FMA {fmt(c.get('fma_gflops'), 1)} GFLOP/s")
print()
print("| model | dtype | threads | weight bytes | prefill tok/s | prefill ceiling tok/s | fraction "
      "| decode tok/s | decode ceiling tok/s | fraction |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in presets.split():
    for d in dtypes.split():
        for t in threads.split():
            js = [load(os.path.join(results, f"run-{p}-{d}-{t}-{r}.json")) for r in range(1, runs + 1)]
            for j in js:
                assert j["num_prompt_tokens"] == int(prompt_tokens), j["num_prompt_tokens"]
            prefill = statistics.median(j["prefill_tokens_per_s"] for j in js)
            decode = statistics.median(j["decode_tokens_per_s"] for j in js)
            c = load(os.path.join(results, f"ceiling-{t}.json"))
            fma, bw = c.get("fma_gflops"), c.get("read_bandwidth_gbs")
            # A prefill multiplies every prompt token by the layer weights and only the last one
            # by the output matrix.
            out_params = js[0]["output_parameters"]
            prefill_params = (js[0]["parameters_per_token"] - out_params
                              + out_params / int(prompt_tokens))
            prefill_ceiling = fma * 1e9 / (2 * prefill_params) if fma else None
            decode_ceiling = bw * 1e9 / js[0]["weight_bytes_per_token"] if bw else None
            pf = prefill / prefill_ceiling if prefill_ceiling else None
            df = decode / decode_ceiling if decode_ceiling else None
            print(f"| {p} | {d} | {t} | {human_bytes(js[0]['weight_bytes'])} | {fmt(prefill)} | "
                  f"{fmt(prefill_ceiling)} | {fmt(pf, 2)} | {fmt(decode)} | {fmt(decode_ceiling)} | "
                  f"{fmt(df, 2)} |")
EOF
cat "$RESULTS/table.md"
if [[ -n "$OUT" ]]; then
  cp "$RESULTS/table.md" "$OUT"
  log "wrote $OUT"
fi
