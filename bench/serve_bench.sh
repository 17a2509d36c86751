#!/usr/bin/env bash
# `kvserve bench serve` against `kvserve serve` on synthetic SmolLM2-135M Q8_0 (2 threads) with
# the shared-prefix dataset (8 groups x 8 prompts, 1,024-token system prompt, 128-token
# question, 64 output tokens), at max concurrency 1, 8 and 32, with prefix caching on and off.
# Each configuration runs RUNS times (default 3) on a fresh server; the table reports medians
# (of the per-run figures) for docs/benchmarks.md.
# Usage: bench/serve_bench.sh [--runs R] [--concurrency "1 8 32"] [--out FILE.md]
# Environment: SERVE_BIN (the server binary, default build/kvserve: another build's for a
# before/after; the client is always build/kvserve), CACHING (default "on off").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=3
CONCURRENCY="1 8 32"
OUT=""
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
BIN=build/kvserve
source bench/bench_model.sh
MODEL="$(smollm2_q8_model "$BIN")"
RESULTS="$(mktemp -d -t kvserve-serve-bench.XXXXXX)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log() { echo "[serve-bench] $*" >&2; }

SERVE_BIN="${SERVE_BIN:-$BIN}"
for caching in ${CACHING:-on off}; do
  flag=--enable-prefix-caching; [[ $caching == off ]] && flag=--no-enable-prefix-caching
  for c in $CONCURRENCY; do
    for ((r = 1; r <= RUNS; r++)); do
      "$SERVE_BIN" serve --model "$MODEL" --port "$PORT" --threads 2 --max-num-seqs 32 \
        --max-model-len 2048 --kv-cache-memory 2GiB $flag --served-model-name smollm2 \
        >"$RESULTS/serve.log" 2>&1 &
      pid=$!
      for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
      log "caching=$caching concurrency=$c run $r/$RUNS"
      "$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name shared-prefix \
        --sp-num-groups 8 --sp-prompts-per-group 8 --sp-system-prompt-len 1024 \
        --sp-question-len 128 --sp-output-len 64 --max-concurrency "$c" --no-progress \
        --result-file "$RESULTS/$caching-$c-$r.json" >"$RESULTS/$caching-$c-$r.txt"
      kill -TERM $pid; wait $pid
    done
  done
done

python3 - "$RESULTS" "$RUNS" "$CONCURRENCY" >"${OUT:-/dev/stdout}" <<'EOF'
import json, statistics, sys, os
results, runs, conc = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
med = statistics.median
print("| prefix caching | max concurrency | req/s | output tok/s | total tok/s | TTFT median / p99 (ms) | TPOT median / p99 (ms) | hit rate (server) | failed |")
print("|---|---|---|---|---|---|---|---|---|")
for caching in os.environ.get("CACHING", "on off").split():
    for c in conc:
        rs = [json.load(open(os.path.join(results, f"{caching}-{c}-{r}.json"))) for r in range(1, runs + 1)]
        m = lambda f: med([f(x) for x in rs])
        hit = [x["prefix_cache"].get("server_hit_rate") for x in rs]
        hit = [h for h in hit if h is not None]
        print(f"| {caching} | {c} | {m(lambda x: x['request_throughput_per_s']):.2f} | "
              f"{m(lambda x: x['output_throughput_tokens_per_s']):.1f} | "
              f"{m(lambda x: x['total_throughput_tokens_per_s']):.0f} | "
              f"{m(lambda x: x['ttft']['median_ms']):.0f} / {m(lambda x: x['ttft']['p99_ms']):.0f} | "
              f"{m(lambda x: x['tpot']['median_ms']):.1f} / {m(lambda x: x['tpot']['p99_ms']):.1f} | "
              + (f"{100 * med(hit):.1f}% | " if hit else "n/a | ")
              + f"{sum(x['failed'] for x in rs)} |")
EOF
log "raw results in $RESULTS"
