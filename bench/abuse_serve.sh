#!/usr/bin/env bash
# Hostile HTTP clients against `kvserve serve` on loopback (bench/abuse_probe.py): thousands of
# slow connections in the header and body phases while /health and a one-token completion
# are timed, keep-alive against fresh connections, pipelining, a 300 MB chunked body, a
# 15-million-deep JSON body (the server's RSS sampled throughout), malformed framing, the
# connection cap and the smaller items of issue 19. One line per probe with its verdict.
# Usage: bench/abuse_serve.sh [--short] [extra `kvserve serve` flags]
#   --short: the CI form (500 + 100 slow connections, fewer samples, a 60 MB body).
# Environment: KVSERVE_BIN (default build/kvserve), ABUSE_MAX_CONNECTIONS (default 8000),
# ABUSE_PROBE_ARGS (more bench/abuse_probe.py flags, e.g. "--slow 300,300 --samples 20"),
# ABUSE_NO_CAP=1 (a server without --max-connections: an older kvserve, for before/after).
# Needs build/kvserve (and python3). Exit status 1 when a probe failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="${KVSERVE_BIN:-build/kvserve}"
SHORT=()
if [[ "${1:-}" == --short ]]; then SHORT=(--short); shift; fi
# The probes themselves hold thousands of sockets.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FDS="$(ulimit -n)"
CAP="${ABUSE_MAX_CONNECTIONS:-8000}"
if [[ -n "${SHORT[*]}" ]]; then CAP=1000; fi
if [[ "$FDS" != unlimited ]] && (( CAP > FDS - 300 )); then CAP=$((FDS - 300)); fi
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
KEY=abuse-key
LOG="$(mktemp -t kvserve-abuse.XXXXXX.log)"
CAP_FLAG=(--max-connections "$CAP")
if [[ -n "${ABUSE_NO_CAP:-}" ]]; then CAP_FLAG=(); fi
"$BIN" serve --port "$PORT" --api-key "$KEY" "${CAP_FLAG[@]}" --served-model-name abuse \
  --max-num-seqs 8 --max-queue-len 64 "$@" >"$LOG" 2>&1 &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true' EXIT
health() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$PORT/health" 2>/dev/null
}
for _ in $(seq 1 600); do
  health && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; echo "abuse: the server did not start"; exit 1; }
  sleep 0.1
done
echo "abuse: $(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2}'), $(nproc) CPUs;" \
     "server pid $PID, RSS $(awk '/VmRSS/ {print $2 " " $3}' /proc/$PID/status)"
grep '^serve: HTTP' "$LOG" || true
# The cap in force (the server lowers it to fit its file-descriptor limit).
CAP="$(sed -n 's/^serve: HTTP: --max-connections \([0-9]*\),.*/\1/p' "$LOG")"
CAP="${CAP:-0}"
rc=0
python3 bench/abuse_probe.py --url "http://127.0.0.1:$PORT" --pid "$PID" --api-key "$KEY" \
  --max-connections "$CAP" "${SHORT[@]}" ${ABUSE_PROBE_ARGS:-} || rc=$?
kill -0 $PID 2>/dev/null || { echo "abuse: FAIL: the server died"; tail -20 "$LOG"; exit 1; }
echo "abuse: server RSS after the probes $(awk '/VmRSS/ {print $2 " " $3}' /proc/$PID/status)"
kill -TERM $PID
wait $PID || { echo "abuse: FAIL: exit status $? after SIGTERM"; exit 1; }
trap - EXIT
rm -f "$LOG"
exit $rc
