#!/usr/bin/env bash
# Scale-out recipe of docs/scale-out.md, tested: two `kvserve serve` replicas behind nginx,
# first with nginx's default round robin, then with prefix affinity (`hash
# $http_x_prefix_key consistent`, the client sending a key of its shared prefix). A workload of
# 5 long system prompts x 12 questions (chat, greedy, 2 tokens) runs through each; the fleet
# prefix-cache hit rate (sum of usage.prompt_tokens_details.cached_tokens over prompt tokens)
# must be higher with affinity, and with affinity every system prompt must be computed on one
# replica only (its first request misses, the others hit), where round robin computes each on
# both.
#
# Usage: nginx_affinity_test.sh KVSERVE_BINARY WORK_DIR
# Needs nginx (scripts/bootstrap.sh installs nginx-light): absent, the test skips (77) or, under
# KVSERVE_REQUIRE_ASSETS=1 (CI), fails.
set -uo pipefail
BIN="$1"
WORK="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../test_dependency.sh"
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
[[ -x "$NGINX" ]] || missing_dependency "nginx (scripts/bootstrap.sh installs nginx-light)"
rm -rf "$WORK" && mkdir -p "$WORK"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
P1=$(free_port); P2=$(free_port); PN=$(free_port)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -f "$WORK/nginx.pid" ]] && kill -9 "$(cat "$WORK/nginx.pid")" 2>/dev/null
}
trap cleanup EXIT

wait_healthy() {  # url pid log
  for _ in $(seq 1 300); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "FAIL: $3 exited at start-up"; cat "$3"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: $1 not healthy in 30 s"; cat "$3"; exit 1
}

start_replicas() {
  for i in 1 2; do
    port=$([[ $i == 1 ]] && echo "$P1" || echo "$P2")
    "$BIN" serve --port "$port" --threads 1 --served-model-name m >"$WORK/replica$i.log" 2>&1 &
    PIDS+=($!)
    wait_healthy "http://127.0.0.1:$port" "$!" "$WORK/replica$i.log"
  done
}
stop_replicas() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  PIDS=()
}

# nginx in the foreground of a background job, everything under $WORK (no root paths).
start_nginx() {  # upstream-directive
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  upstream kvserve {
    $1
    server 127.0.0.1:$P1;
    server 127.0.0.1:$P2;
    keepalive 16;
  }
  server {
    listen 127.0.0.1:$PN;
    location / {
      proxy_pass http://kvserve;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
EOF
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx.conf" -g 'daemon off;' &
  PIDS+=($!)
  for _ in $(seq 1 100); do curl -s "http://127.0.0.1:$PN/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "FAIL: nginx did not start"; cat "$WORK/nginx/error.log"; exit 1
}

# The workload through nginx; prints "prompt_tokens cached_tokens repeat_misses" where
# repeat_misses counts requests after the first of their system prompt that found less than
# half of their prompt cached (the system prompt computed again on another replica).
run_workload() {
  python3 - "http://127.0.0.1:$PN" <<'PY'
import hashlib, json, sys, urllib.request
base = sys.argv[1]
words = "cache block token prefix replica router tenant session model request answer".split()
prompts = []
for s in range(5):
    text = " ".join(words[(s * 7 + i * 3) % len(words)] + str((s * 31 + i) % 97) for i in range(150))
    prompts.append(f"You are assistant number {s}. Policies: {text}")
total = cached = repeat_misses = 0
for q in range(12):
    for s, system in enumerate(prompts):
        body = {"model": "m", "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": f"Question {q} for assistant {s}?"}]}
        key = hashlib.sha1(system.encode()).hexdigest()[:16]
        req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "X-Prefix-Key": key})
        usage = json.load(urllib.request.urlopen(req, timeout=120))["usage"]
        total += usage["prompt_tokens"]
        c = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        cached += c
        if q > 0 and c < usage["prompt_tokens"] // 2:
            repeat_misses += 1
print(total, cached, repeat_misses)
PY
}

echo "== round robin (nginx's default)"
start_replicas
start_nginx ""
read -r rr_total rr_cached rr_misses < <(run_workload)
kill -TERM "$(cat "$WORK/nginx.pid")"; stop_replicas
echo "ok: $rr_cached of $rr_total prompt tokens cached; $rr_misses repeat requests computed their system prompt again"

echo "== prefix affinity (hash \$http_x_prefix_key consistent)"
start_replicas
start_nginx 'hash $http_x_prefix_key consistent;'
read -r af_total af_cached af_misses < <(run_workload)
kill -TERM "$(cat "$WORK/nginx.pid")"; stop_replicas
echo "ok: $af_cached of $af_total prompt tokens cached; $af_misses repeat requests computed their system prompt again"

python3 - "$rr_total" "$rr_cached" "$af_total" "$af_cached" <<'PY'
import sys
rt, rc, at, ac = map(int, sys.argv[1:])
print(f"fleet hit rate: round robin {rc / rt:.1%}, prefix affinity {ac / at:.1%}")
PY
if [[ "$af_misses" != 0 ]]; then
  echo "FAIL: with affinity, $af_misses repeat requests missed their system prompt"; exit 1
fi
if [[ "$rr_misses" == 0 ]]; then
  echo "FAIL: round robin never sent a system prompt to a second replica: the workload shows nothing"; exit 1
fi
if (( af_cached <= rr_cached )); then
  echo "FAIL: affinity ($af_cached cached tokens) is not above round robin ($rr_cached)"; exit 1
fi
echo "PASS"
