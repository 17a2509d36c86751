#!/usr/bin/env bash
# KV tiers beyond one process, end to end with the real binary (docs/kv-tiers.md):
#  1. restart: serve with --kv-offload-dir, send a long shared-prefix request, SIGTERM, start
#     again, send it again: cached_tokens covers the prefix, served from disk, same text;
#  2. the model file changed (one weight byte): no hit, no error;
#  3. corrupted block files: detected, recomputed, same text;
#  4. a full disk (every write fails: a 1 KB file size limit): serving goes on, same text;
#  5. two replicas sharing Redis (Debian's redis-server, started here): a prefix computed on A
#     is a hit on B, from Redis; Redis killed in the middle of a burst loses no request.
#
# Usage: kv_tiers_serve_test.sh KVSERVE_BINARY ASSETS_DIR WORK_DIR
# Needs the llama-2-tiny-random asset and redis-server: absent, the test skips (77) or, under
# KVSERVE_REQUIRE_ASSETS=1 (CI), fails.
set -uo pipefail
BIN="$1"
ASSETS="$2"
WORK="$3"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../test_dependency.sh"
MODEL="$ASSETS/models/llama-2-tiny-random/llama-2-tiny-random.gguf"
REDIS="$(command -v redis-server || echo /usr/bin/redis-server)"
[[ -f "$MODEL" ]] || missing_dependency "$MODEL (../shared/assets)"
[[ -x "$REDIS" ]] || missing_dependency "redis-server (scripts/bootstrap.sh installs it)"
rm -rf "$WORK" && mkdir -p "$WORK"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$WORK"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

wait_healthy() {  # port pid log
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || fail "$3: the server exited at start-up"
    sleep 0.1
  done
  fail "$3: not healthy in 30 s"
}

# start NAME PORT [serve flags...]: a server in the background; SERVER_PID is its pid.
start() {
  local name="$1" port="$2"
  shift 2
  "$BIN" serve --model "${SERVE_MODEL:-$MODEL}" --port "$port" --threads 1 --served-model-name m \
    --kv-cache-memory 8M --kv-tier-load-timeout-ms 30000 "$@" >"$WORK/$name.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  wait_healthy "$port" "$SERVER_PID" "$WORK/$name.log"
}
stop() {  # pid: SIGTERM and wait (a graceful stop, as an operator's restart)
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# A long shared prefix (a system prompt of about 1,500 tokens) and a question.
PREFIX="$(python3 -c 'print(" ".join(f"Rule {i}: answer politely and cite section {i * 7 % 31}." for i in range(120)))')"
# complete PORT QUESTION OUT: a greedy completion; prints "cached disk redis memory text".
complete() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"model": "m", "prompt": sys.argv[1] + " Question: " + sys.argv[2], "max_tokens": 8, "temperature": 0}))' "$PREFIX" "$2")
  local code
  code=$(curl -s -o "$3" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" \
    "http://127.0.0.1:$1/v1/completions")
  [[ "$code" == 200 ]] || { cat "$3"; echo; return 1; }
  python3 - "$3" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["usage"]["prompt_tokens_details"]
t = d.get("cached_tokens_by_tier", {})
print(d["cached_tokens"], t.get("disk", -1), t.get("redis", -1), t.get("memory", -1), json.dumps(r["choices"][0]["text"]))
PY
}
metric() {  # port name-with-labels: the value (0 when absent)
  curl -s "http://127.0.0.1:$1/metrics" | awk -v n="kvserve:$2" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
wait_written() {  # port tier: until the tier's write queue is empty and something was written
  for _ in $(seq 1 100); do
    [[ "$(metric "$1" "kv_tier_queued_write_bytes{tier=\"$2\"}")" == 0 &&
       "$(metric "$1" "kv_tier_blocks_written_total{tier=\"$2\"}")" != 0 ]] && return 0
    sleep 0.1
  done
  fail "nothing written to the $2 tier"
}

P=$(free_port)
DISK=(--kv-offload-dir "$WORK/kv" --kv-offload-bytes 256M)

echo "== 0. inconsistent tier flags are errors at start-up"
touch "$WORK/a-file"
for flags in "--kv-offload-dir $WORK/x" "--kv-offload-bytes 1G" "--kv-offload-dir $WORK/x --kv-offload-bytes lots" \
             "--kv-offload-dir $WORK/a-file --kv-offload-bytes 1G" "--kv-redis http://h:1" \
             "--kv-redis redis://h:99999" "--kv-redis redis://127.0.0.1:1 --kv-redis-timeout-ms 0"; do
  # shellcheck disable=SC2086
  timeout 20 "$BIN" serve --model "$MODEL" --port "$P" --threads 1 $flags >"$WORK/bad.log" 2>&1
  rc=$?
  [[ $rc != 0 && $rc -lt 128 ]] || fail "serve $flags: exit status $rc"
  grep -q "^error: " "$WORK/bad.log" || { cat "$WORK/bad.log"; fail "serve $flags: no error line"; }
done

echo "== 1. restart: the prefix comes back from disk"
start a "$P" "${DISK[@]}"
grep -q "KV tiers: disk $WORK/kv/kvserve-" "$WORK/a.log" || fail "no disk tier in the banner"
read -r cached1 disk1 _ _ text1 < <(complete "$P" "What is rule 3?" "$WORK/r1.json") || fail "request 1"
[[ "$cached1" == 0 ]] || fail "a cold server served $cached1 cached tokens"
wait_written "$P" disk
stop "$SERVER_PID"
start a2 "$P" "${DISK[@]}"
grep -q "blocks," "$WORK/a2.log" || fail "no recovered blocks in the banner"
read -r cached2 disk2 redis2 memory2 text2 < <(complete "$P" "What is rule 3?" "$WORK/r2.json") || fail "request 2"
echo "   after restart: cached_tokens $cached2 (disk $disk2, memory $memory2)"
(( cached2 >= 1400 )) || fail "after restart only $cached2 tokens cached"
[[ "$disk2" == "$cached2" ]] || fail "cached tokens not from disk: $disk2 of $cached2"
[[ "$text2" == "$text1" ]] || fail "text differs after restart: $text2 vs $text1"
# Another question under the same prefix: memory now.
read -r cached3 disk3 _ memory3 _ < <(complete "$P" "What is rule 9?" "$WORK/r3.json") || fail "request 3"
[[ "$memory3" == "$cached3" && "$disk3" == 0 ]] || fail "a repeat was not a memory hit ($memory3 of $cached3)"
# promtool validates the format; exit status 3 means lint findings, of which the only one
# allowed is the ':' of the "kvserve:" prefix (vLLM's "vllm:" convention).
if command -v promtool >/dev/null; then
  curl -s "http://127.0.0.1:$P/metrics" | promtool check metrics >"$WORK/promtool.txt" 2>&1
  rc=$?
  [[ $rc == 0 || $rc == 3 ]] || { cat "$WORK/promtool.txt"; fail "promtool rejects /metrics"; }
  ! grep -v "metric names should not contain ':'" "$WORK/promtool.txt" | grep -q . ||
    { cat "$WORK/promtool.txt"; fail "promtool findings on /metrics"; }
fi
stop "$SERVER_PID"

echo "== 2. the model file changed: no hit, no error"
cp "$MODEL" "$WORK/changed.gguf"
size=$(stat -c %s "$WORK/changed.gguf")
printf '\x5a' | dd of="$WORK/changed.gguf" bs=1 seek=$((size - 4096)) conv=notrunc status=none
SERVE_MODEL="$WORK/changed.gguf" start b "$P" "${DISK[@]}"
read -r cached4 _ _ _ _ < <(complete "$P" "What is rule 3?" "$WORK/r4.json") || fail "changed model request"
[[ "$cached4" == 0 ]] || fail "a changed model read $cached4 cached tokens of the old one"
stop "$SERVER_PID"
(( $(ls -d "$WORK"/kv/kvserve-* | wc -l) == 2 )) || fail "expected one tier folder per model fingerprint"

echo "== 3. corrupted block files are detected, dropped and recomputed"
python3 - "$WORK/kv" <<'PY'
import glob, os, sys
n = 0
for f in sorted(glob.glob(sys.argv[1] + "/kvserve-*/*/*.kvb")):
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) // 2)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    n += 1
print("   corrupted", n, "files")
PY
start c "$P" "${DISK[@]}"
read -r cached5 _ _ _ text5 < <(complete "$P" "What is rule 3?" "$WORK/r5.json") || fail "request after corruption"
[[ "$cached5" == 0 ]] || fail "$cached5 tokens served from corrupted blocks"
[[ "$text5" == "$text1" ]] || fail "text differs after corruption: $text5 vs $text1"
(( $(metric "$P" "kv_tier_corrupt_blocks_total{tier=\"disk\"}") >= 1 )) || fail "corruption not counted"
stop "$SERVER_PID"

echo "== 4. a full disk: every write fails, serving goes on"
mkfifo "$WORK/full.fifo"
cat "$WORK/full.fifo" >"$WORK/full.log" &
( ulimit -f 1; exec "$BIN" serve --model "$MODEL" --port "$P" --threads 1 --served-model-name m \
    --kv-cache-memory 8M --kv-offload-dir "$WORK/kv-full" --kv-offload-bytes 256M >"$WORK/full.fifo" 2>&1 ) &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
wait_healthy "$P" "$SERVER_PID" "$WORK/full.log"
for q in 3 4; do
  read -r _ _ _ _ text6 < <(complete "$P" "What is rule $q?" "$WORK/r6.json") || fail "request on a full disk"
  [[ $q != 3 || "$text6" == "$text1" ]] || fail "text differs on a full disk"
done
sleep 0.5
(( $(metric "$P" "kv_tier_write_errors_total{tier=\"disk\"}") >= 1 )) || fail "failed writes not counted"
[[ "$(metric "$P" "kv_tier_blocks_written_total{tier=\"disk\"}")" == 0 ]] || fail "writes succeeded under a 1 KB limit"
stop "$SERVER_PID"

echo "== 5. two replicas sharing Redis"
PR=$(free_port)
"$REDIS" --port "$PR" --bind 127.0.0.1 --save '' --appendonly no --maxmemory 256mb \
  --maxmemory-policy allkeys-lru --dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PR") 2>/dev/null && break; sleep 0.1; done
PA=$(free_port); PB=$(free_port)
start ra "$PA" --kv-redis "redis://127.0.0.1:$PR" --kv-redis-ttl 600
A_PID=$SERVER_PID
start rb "$PB" --kv-redis "redis://127.0.0.1:$PR" --kv-redis-ttl 600
B_PID=$SERVER_PID
read -r cached7 _ _ _ text7 < <(complete "$PA" "What is rule 5?" "$WORK/r7.json") || fail "replica A"
[[ "$cached7" == 0 ]] || fail "replica A was not cold"
wait_written "$PA" redis
read -r cached8 disk8 redis8 _ text8 < <(complete "$PB" "What is rule 5?" "$WORK/r8.json") || fail "replica B"
echo "   replica B: cached_tokens $cached8 (redis $redis8)"
(( cached8 >= 1400 )) || fail "replica B found only $cached8 tokens of A's prefix"
[[ "$redis8" == "$cached8" ]] || fail "B's cached tokens not from Redis: $redis8 of $cached8"
[[ "$text8" == "$text7" ]] || fail "replicas disagree: $text8 vs $text7"
[[ "$(metric "$PB" 'prefix_cache_tier_hit_tokens_total{tier="redis"}')" == "$cached8" ]] ||
  fail "B's /metrics does not count its Redis hit"
(( $(metric "$PB" 'kv_tier_blocks_imported_total{tier="redis"}') > 0 )) || fail "no Redis import counted"
# A burst on both replicas, Redis killed in the middle: every request answers.
BURST=()
for i in $(seq 1 12); do
  port=$([[ $((i % 2)) == 0 ]] && echo "$PA" || echo "$PB")
  ( complete "$port" "Burst question $i about rule $i?" "$WORK/burst$i.json" >"$WORK/burst$i.out" 2>&1; echo $? >"$WORK/burst$i.rc" ) &
  BURST+=($!)
  [[ $i == 4 ]] && { sleep 0.2; kill -9 "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null; }
done
wait "${BURST[@]}"
for i in $(seq 1 12); do
  [[ "$(cat "$WORK/burst$i.rc" 2>/dev/null)" == 0 ]] || { cat "$WORK/burst$i.out"; fail "burst request $i lost"; }
done
read -r _ _ _ _ text9 < <(complete "$PB" "What is rule 5?" "$WORK/r9.json") || fail "after Redis died"
[[ "$text9" == "$text7" ]] || fail "text differs without Redis"
[[ "$(metric "$PA" "kv_tier_available{tier=\"redis\"}")" == 0 || "$(metric "$PB" "kv_tier_available{tier=\"redis\"}")" == 0 ]] ||
  fail "no replica noticed Redis is down"
stop "$A_PID"
stop "$B_PID"
echo "PASS: kv tiers (restart from disk, changed model, corruption, full disk, shared Redis, Redis outage)"
