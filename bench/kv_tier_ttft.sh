#!/usr/bin/env bash
# TTFT of a 4,096-token prompt on the synthetic SmolLM2-135M Q8_0 (bench/bench_model.sh),
# per KV dtype (f32, int8): recomputed (a cold server), a memory hit (the same prompt again)
# and a disk hit (the server restarted with the same --kv-offload-dir: the prefix is read back
# from the disk tier). TTFT = the time of a non-streaming request for max_tokens 1 (prefill
# plus one sampled token), client side. Medians of RUNS runs, each on fresh servers and an
# empty tier folder. The disk hit reads files the page cache holds (just written); with
# --drop-caches (root) the page cache is dropped before it, so the blocks come off the device.
#
# usage: bench/kv_tier_ttft.sh [--runs 5] [--threads 2] [--drop-caches]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=5; THREADS=2; DROP=0
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --drop-caches) DROP=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
BIN=build/kvserve
[[ -x "$BIN" ]] || { echo "error: build first (scripts/build.sh)" >&2; exit 1; }
source bench/bench_model.sh
MODEL="$(smollm2_q8_model "$BIN")"
WORK="$(mktemp -d -t kvserve-tier-ttft.XXXXXX)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
PID=""
trap '[[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
log() { echo "[kv-tier-ttft] $*" >&2; }

start() {  # dtype
  "$BIN" serve --model "$MODEL" --port "$PORT" --threads "$THREADS" --kv-cache-dtype "$1" \
    --kv-cache-memory 1G --max-model-len 8192 --kv-offload-dir "$WORK/tier" \
    --kv-offload-bytes 8G --served-model-name x >"$WORK/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  cat "$WORK/serve.log" >&2; exit 1
}
stop() { kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
# ttft SEED: seconds for a max_tokens 1 request on a 4,096-token prompt of random ids; prints
# "seconds cached_tokens disk_tokens".
ttft() {
  python3 - "$PORT" "$1" <<'PY'
import json, random, sys, time, urllib.request
port, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
prompt = [rng.randrange(300, 40000) for _ in range(4096)]
body = json.dumps({"model": "x", "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                             {"Content-Type": "application/json"})
t = time.perf_counter()
r = json.load(urllib.request.urlopen(req))
dt = time.perf_counter() - t
d = r["usage"]["prompt_tokens_details"]
print(f'{dt:.4f} {d["cached_tokens"]} {d.get("cached_tokens_by_tier", {}).get("disk", 0)}')
PY
}
wait_flushed() {
  for _ in $(seq 1 600); do
    q=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '$1 == "kvserve:kv_tier_queued_write_bytes{tier=\"disk\"}" {print $2}')
    [[ "$q" == 0 ]] && return 0
    sleep 0.1
  done
}

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $THREADS threads;" \
  "synthetic SmolLM2-135M Q8_0; 4,096-token prompt; $RUNS runs (medians)"
printf '\n| KV dtype | recompute (ms) | memory hit (ms) | disk hit (ms) | disk / recompute | blocks read (MB) | read rate (GB/s) |\n|---|---:|---:|---:|---:|---:|---:|\n'
for dtype in f32 int8; do
  cold=(); mem=(); disk=(); mb=(); rate=()
  for run in $(seq 1 "$RUNS"); do
    rm -rf "$WORK/tier"
    start "$dtype"
    read -r c _ _ < <(ttft "$run")
    read -r m _ _ < <(ttft "$run")
    wait_flushed
    stop
    [[ $DROP == 1 ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
    start "$dtype"
    read -r d cached from_disk < <(ttft "$run")
    [[ "$from_disk" -gt 4000 ]] || { echo "run $run: only $from_disk of $cached tokens from disk" >&2; exit 1; }
    metrics=$(curl -s "http://127.0.0.1:$PORT/metrics")
    bytes=$(awk '$1 == "kvserve:kv_tier_read_bytes_total{tier=\"disk\"}" {print $2}' <<<"$metrics")
    secs=$(awk '$1 == "kvserve:kv_tier_load_seconds_total" {print $2}' <<<"$metrics")
    stop
    cold+=("$c"); mem+=("$m"); disk+=("$d")
    mb+=("$(python3 -c "print($bytes / 1e6)")"); rate+=("$(python3 -c "print($bytes / 1e9 / $secs)")")
    log "$dtype run $run: recompute $c s, memory $m s, disk $d s ($from_disk tokens from disk)"
  done
  python3 - "$dtype" "${cold[*]}" "${mem[*]}" "${disk[*]}" "${mb[*]}" "${rate[*]}" <<'PY'
import statistics as st, sys
d = sys.argv[1]
c, m, k, mb, r = (st.median(map(float, a.split())) for a in sys.argv[2:])
print(f"| {d} | {c*1e3:,.0f} | {m*1e3:,.0f} | {k*1e3:,.0f} | {k/c:.3f} | {mb:,.1f} | {r:.2f} |")
PY
done
