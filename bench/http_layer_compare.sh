#!/usr/bin/env bash
# The choice of HTTP library, measured: the HTTP-layer probes of bench/abuse_probe.py (slow
# connections while /health and a stub completion are timed, keep-alive, pipelining, a 300 MB
# chunked body, malformed framing, the connection cap) against the same stub routes served by
#   beast_stub  kvserve's src/http (Boost.Beast over Asio)       bench/http_layer/beast_stub.cc
#   mhd_stub    libmicrohttpd (epoll internal thread)            bench/http_layer/mhd_stub.c
# with the same limits. ROUNDS (default 2) alternating runs. Installs libmicrohttpd-dev (a
# benchmark-only dependency) when missing. Usage: bench/http_layer_compare.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! dpkg-query -W -f='${Status}' libmicrohttpd-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libmicrohttpd-dev >/dev/null
fi
ninja -C build beast_stub >/dev/null
cc -O2 -o build/bench/mhd_stub bench/http_layer/mhd_stub.c -Ibench/http_layer -lmicrohttpd
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
CAP=8000
for round in $(seq 1 "${ROUNDS:-2}"); do
  for stub in beast_stub mhd_stub; do
    PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "build/bench/$stub" "$PORT" "$CAP" 2>/dev/null &
    PID=$!
    sleep 0.5
    echo "== round $round: $stub (pid $PID)"
    python3 bench/abuse_probe.py --url "http://127.0.0.1:$PORT" --pid "$PID" --http-only \
      --max-connections "$CAP" ${ABUSE_PROBE_ARGS:-} || true
    kill -TERM $PID; wait $PID 2>/dev/null || true
  done
done
