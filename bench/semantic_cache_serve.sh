#!/usr/bin/env bash
# The response cache (tier 1) end to end: `kvserve bench serve` against `kvserve serve` with and
# without --semantic-cache, on a random dataset whose requests repeat earlier ones 30% of the
# time (--repeat-fraction 0.3; greedy, so repeats are cacheable by default), on the built-in
# model and on stories260K (../shared/assets). Reports the hit rate and TTFT of hits against
# misses (from the x-kvserve-cache header), and the run's throughput with and without the cache.
# Three arms: cache off; exact (--semantic-cache alone); semantic (--semantic-cache with
# --embedding-model, an `mkmodel all-minilm-l6-v2` f16 file: every cacheable request is embedded,
# so this arm shows what the embedding costs; its weights are random, so its similarity hits
# would be meaningless, and the table counts them apart). Medians of RUNS runs (default 3), each
# on a fresh server.
#
# usage: bench/semantic_cache_serve.sh [--runs 3] [--num-prompts 300] [--concurrency 8]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=3; N=300; C=8
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --num-prompts) N="$2"; shift 2 ;;
    --concurrency) C="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
BIN=build/kvserve
[[ -x "$BIN" ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
ASSETS=../shared/assets/models/stories260K
RESULTS="$(mktemp -d -t kvserve-semcache-bench.XXXXXX)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log() { echo "[semcache-bench] $*" >&2; }

EMBEDDER="$RESULTS/all-minilm-l6-v2-f16.gguf"
"$BIN" mkmodel --preset all-minilm-l6-v2 --dtype f16 -o "$EMBEDDER" >/dev/null 2>&1

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $N requests, 30% repeats," \
  "max concurrency $C, greedy, $RUNS runs (medians)"
echo
for model in builtin stories260K; do
  if [[ $model == builtin ]]; then
    margs=(); bargs=(--random-input-len 256 --random-output-len 64 --vocab-range 100 500)
  else
    [[ -f "$ASSETS/stories260K.bin" ]] || { log "no $ASSETS: skipping stories260K"; continue; }
    margs=(--model "$ASSETS/stories260K.bin" --tokenizer "$ASSETS/tok512.bin")
    bargs=(--random-input-len 128 --random-output-len 64 --vocab-range 3 500)
  fi
  for cache in off exact semantic; do
    flag=()
    [[ $cache == exact ]] && flag=(--semantic-cache)
    [[ $cache == semantic ]] && flag=(--semantic-cache --embedding-model "$EMBEDDER")
    for ((r = 1; r <= RUNS; r++)); do
      "$BIN" serve "${margs[@]}" --port "$PORT" --threads 2 --max-num-seqs 16 "${flag[@]}" \
        --served-model-name m >"$RESULTS/serve.log" 2>&1 &
      pid=$!
      for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
      log "$model cache=$cache run $r/$RUNS"
      "$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name random \
        --num-prompts "$N" --repeat-fraction 0.3 --seed "$r" "${bargs[@]}" \
        --max-concurrency "$C" --no-progress --result-file "$RESULTS/$model-$cache-$r.json" \
        >"$RESULTS/$model-$cache-$r.txt"
      curl -s "http://127.0.0.1:$PORT/metrics" >"$RESULTS/$model-$cache-$r.metrics"
      kill -TERM $pid; wait $pid
    done
  done
done

python3 - "$RESULTS" "$RUNS" <<'EOF'
import json, statistics, sys, os, glob
results, runs = sys.argv[1], int(sys.argv[2])
med = statistics.median
def metric(path, name):
    for line in open(path):
        if line.startswith("kvserve:" + name + " "):
            return float(line.split()[1])
    return 0.0
print("| model | cache | req/s | TTFT median (ms) | hit rate (exact + semantic) | TTFT hit median / p99 (ms) | TTFT miss median / p99 (ms) | embedding per key (ms) |")
print("|---|---|---|---|---|---|---|---|")
for model in ["builtin", "stories260K"]:
    for cache in ["off", "exact", "semantic"]:
        files = sorted(glob.glob(f"{results}/{model}-{cache}-*.json"))
        if not files:
            continue
        js = [json.load(open(f)) for f in files]
        rps = med(j["request_throughput"] if "request_throughput" in j else j.get("request_throughput_per_s", 0) for j in js)
        ttft = med(j["ttft"]["median_ms"] for j in js)
        row = f"| {model} | {cache} | {rps:.2f} | {ttft:.1f} |"
        tiers = [j.get("response_cache", {}) for j in js]
        if any(tiers):
            def rate(t, kind=None):
                total = sum(v["requests"] for v in t.values())
                hits = sum(v["requests"] for k, v in t.items() if k != "miss" and kind in (None, k))
                return hits / total if total else 0.0
            hit = lambda t, q: [v["ttft"][q] for k, v in t.items() if k != "miss"]
            hm = med(x for t in tiers for x in hit(t, "median_ms"))
            hp = med(x for t in tiers for x in hit(t, "p99_ms"))
            mm = med(t["miss"]["ttft"]["median_ms"] for t in tiers if "miss" in t)
            mp = med(t["miss"]["ttft"]["p99_ms"] for t in tiers if "miss" in t)
            row += (f" {med(rate(t) for t in tiers):.1%} ({med(rate(t, 'exact') for t in tiers):.1%}"
                    f" + {med(rate(t, 'semantic') for t in tiers):.1%}) | {hm:.2f} / {hp:.2f} |"
                    f" {mm:.1f} / {mp:.1f} |")
            ms = []
            for f in files:
                m = f[:-len(".json")] + ".metrics"
                n = metric(m, "semantic_cache_embeddings_total") if os.path.exists(m) else 0
                if n:
                    ms.append(1000 * metric(m, "semantic_cache_embedding_seconds_total") / n)
            row += f" {med(ms):.2f} |" if ms else " |"
        else:
            row += " | | | |"
        print(row)
EOF
rm -rf "$RESULTS"
