#!/usr/bin/env bash
# kvserve serve against llama.cpp's llama-server on the same GGUF file, under the shared-prefix
# load of docs/benchmarks.md (issue 23: the serving benchmark re-measured at each level).
#
# 1. Builds llama-server from llama.cpp at the pinned commit (bench/peers.sh), once, at
#    --peer-level (default: avx512 where the CPU has AVX-512 VNNI, else avx2).
# 2. Makes the file with `kvserve mkmodel` (bench/bench_model.sh).
# 3. Alternating rounds (--runs); each round starts every engine fresh in turn and runs
#    `kvserve bench serve --dataset-name shared-prefix` against it (8 groups x 8 prompts,
#    1,024-token system prompt, 128-token question, 64 output tokens, token-id prompts,
#    greedy, ignore_eos; all sent at once under --concurrency):
#      llama-server -t T -c C*2048 -np C --metrics (f16 KV, prompt caching per slot, on by
#        default; a slot is given to the request whose prompt shares the most with its cache)
#      kvserve serve --threads T --max-num-seqs 32 --max-model-len 2048 --kv-cache-dtype f16
#        --kv-cache-memory 2GiB, under KVSERVE_SIMD=LEVEL for each of --levels
# 4. A table of medians: request and output throughput, TTFT and TPOT (median / p99), the
#    server's prefix-cache hit rate (kvserve's /metrics; llama-server has no such counter) and
#    each kvserve row's ratio to llama-server.
#
# usage: bench/serve_peers.sh [--llama-src REPO] [--peer-level avx512|avx2]
#          [--levels "avx2 avx512"] [--preset smollm2-135m] [--dtype q8_0] [--threads 2]
#          [--concurrency 8] [--runs 3] [--peers-dir build/peers] [--out FILE.md]
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh
source bench/peers.sh

PEER_LEVEL=""
LEVELS=""
PRESET=smollm2-135m
DTYPE=q8_0
THREADS=2
CONCURRENCY=8
RUNS=3
OUT=""
while (($#)); do
  case "$1" in
    --llama-src) LLAMA_SRC="$2"; shift ;;
    --llama-commit) LLAMA_COMMIT="$2"; shift ;;
    --peer-level) PEER_LEVEL="$2"; shift ;;
    --levels) LEVELS="$2"; shift ;;
    --preset) PRESET="$2"; shift ;;
    --dtype) DTYPE="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --concurrency) CONCURRENCY="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --peers-dir) PEERS_DIR="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
KVSERVE=build/kvserve
[[ -x "$KVSERVE" ]] || { echo "error: $KVSERVE not found; build first (scripts/build.sh)" >&2; exit 1; }
log() { echo "[serve-peers] $*" >&2; }
has_vnni=0
grep -qw avx512_vnni /proc/cpuinfo && has_vnni=1
if [[ -z "$LEVELS" ]]; then
  LEVELS="avx2"
  ((has_vnni)) && LEVELS="avx2 avx512"
fi
[[ -n "$PEER_LEVEL" ]] || { PEER_LEVEL=avx2; ((has_vnni)) && PEER_LEVEL=avx512; }
for level in $LEVELS $PEER_LEVEL; do
  case "$level" in
    avx2) ;;
    avx512) ((has_vnni)) || { echo "error: this CPU lacks AVX-512 VNNI" >&2; exit 1; } ;;
    *) echo "error: levels are avx2 and avx512, got $level" >&2; exit 2 ;;
  esac
done

mkdir -p "$PEERS_DIR/src"
LLAMA_TREE="$(checkout llama.cpp "$LLAMA_SRC" "$LLAMA_COMMIT")"
LLAMA_SERVER="$(build_peer llama.cpp "$LLAMA_TREE" "$PEER_LEVEL" llama-server)"
MODEL="$(bench_model "$KVSERVE" "$PRESET" "$DTYPE")"
RESULTS="$(mktemp -d /tmp/kvserve-serve-peers.XXXXXX)"
log "results in $RESULTS"
# A fresh port for every server start: the sockets a stopped server leaves behind (llama-server
# aborts on SIGTERM with its connections open) can hold its port for a while.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=""
{ lscpu | grep -E '^(Model name|Flags)'
  grep -m2 -E '^(cpu family|model)[[:space:]]' /proc/cpuinfo || true; } >"$RESULTS/machine.txt"

SERVER_PID=""
stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT
wait_ready() {  # log file
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "error: the server exited:" >&2; tail -5 "$1" >&2; exit 1; }
    sleep 0.2
  done
  echo "error: the server did not answer /health in 120 s:" >&2; tail -5 "$1" >&2; exit 1
}
bench() {  # name round
  "$KVSERVE" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name shared-prefix \
    --sp-num-groups 8 --sp-prompts-per-group 8 --sp-system-prompt-len 1024 \
    --sp-question-len 128 --sp-output-len 64 --max-concurrency "$CONCURRENCY" --no-progress \
    --result-file "$RESULTS/$1-$2.json" >"$RESULTS/$1-$2.txt" 2>&1 ||
    { echo "error: bench serve against $1 failed:" >&2; tail -5 "$RESULTS/$1-$2.txt" >&2; exit 1; }
}
ENGINES="llama-server"
for level in $LEVELS; do ENGINES+=" kvserve-$level"; done
for ((r = 1; r <= RUNS; r++)); do
  for engine in $ENGINES; do
    log "$engine round $r/$RUNS"
    PORT="$(free_port)"
    if [[ $engine == llama-server ]]; then
      "$LLAMA_SERVER" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CONCURRENCY * 2048)) \
        -np "$CONCURRENCY" --metrics >"$RESULTS/server-$engine-$r.log" 2>&1 &
    else
      KVSERVE_SIMD="${engine#kvserve-}" "$KVSERVE" serve --model "$MODEL" --port "$PORT" \
        --threads "$THREADS" --max-num-seqs 32 --max-model-len 2048 --kv-cache-dtype f16 \
        --kv-cache-memory 2GiB --served-model-name "$PRESET" >"$RESULTS/server-$engine-$r.log" 2>&1 &
    fi
    SERVER_PID=$!
    wait_ready "$RESULTS/server-$engine-$r.log"
    bench "$engine" "$r"
    stop_server
  done
done

python3 - "$RESULTS" "$RUNS" "$ENGINES" "$PRESET" "$DTYPE" "$THREADS" "$CONCURRENCY" \
  "$LLAMA_COMMIT" "$PEER_LEVEL" >"$RESULTS/table.md" <<'PY'
import json, os, statistics, sys
results, runs, engines, preset, dtype, threads, conc, commit, peer_level = sys.argv[1:]
med = statistics.median
machine = open(os.path.join(results, "machine.txt")).read()
model = next(l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("Model name"))
family = {l.split(":", 1)[0].strip(): l.split(":", 1)[1].strip() for l in machine.splitlines()
          if l.startswith(("cpu family", "model"))}
if family:
    model += f" (CPU family {family.get('cpu family', '?')}, model {family.get('model', '?')})"
print(f"Machine: {model}, {os.cpu_count()} vCPUs. {preset} {dtype}, {threads} threads, shared-prefix "
      f"(8 x 8 prompts, 1,024 + 128 tokens, 64 out), max concurrency {conc}, medians of {runs} "
      f"alternating rounds; llama-server: llama.cpp {commit[:12]} built at {peer_level}.")
print()
print("| engine | req/s | output tok/s | TTFT median / p99 (ms) | TPOT median / p99 (ms) | hit rate (server) | failed | req/s / llama-server |")
print("|---|---|---|---|---|---|---|---|")
rows = {}
for e in engines.split():
    rs = [json.load(open(os.path.join(results, f"{e}-{r}.json"))) for r in range(1, int(runs) + 1)]
    rows[e] = rs
base = med(x["request_throughput_per_s"] for x in rows["llama-server"])
for e, rs in rows.items():
    m = lambda f: med([f(x) for x in rs])
    hit = [x["prefix_cache"].get("server_hit_rate") for x in rs]
    hit = [h for h in hit if h is not None]
    rps = m(lambda x: x["request_throughput_per_s"])
    print(f"| {e} | {rps:.2f} | {m(lambda x: x['output_throughput_tokens_per_s']):.1f} | "
          f"{m(lambda x: x['ttft']['median_ms']):.0f} / {m(lambda x: x['ttft']['p99_ms']):.0f} | "
          f"{m(lambda x: x['tpot']['median_ms']):.1f} / {m(lambda x: x['tpot']['p99_ms']):.1f} | "
          + (f"{100 * med(hit):.1f}% | " if hit else "n/a | ")
          + f"{sum(x['failed'] for x in rs)} | {rps / base:.2f} |")
PY
cat "$RESULTS/table.md"
if [[ -n "$OUT" ]]; then
  cp "$RESULTS/table.md" "$OUT"
  log "wrote $OUT"
fi
