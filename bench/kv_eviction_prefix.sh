#!/usr/bin/env bash
# Prefix caching under token eviction, over HTTP: `kvserve serve` on the synthetic
# smollm2-135m Q8_0 model; three SnapKV requests (budget 256) sharing a prefix of ~2,070
# tokens with different questions, then one request without eviction and one H2O request on
# the same prefix, one after another. Prints each request's prompt tokens, cached tokens and
# evicted tokens (OpenAI usage), then the eviction metrics (docs/kv-eviction.md).
#
# usage: bench/kv_eviction_prefix.sh [KVSERVE_BINARY] [ASSETS_DIR]   (env: PORT, THREADS)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(realpath "${1:-build/kvserve}")
ASSETS=${2:-../shared/assets}
PORT=${PORT:-18123}
THREADS=${THREADS:-2}
source bench/bench_model.sh
MODEL=$(smollm2_q8_model "$BIN")
"$BIN" serve -m "$MODEL" --port "$PORT" --threads "$THREADS" --kv-cache-memory 500MB \
  >/dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
python3 - "$ASSETS/text/tinystories_validation_head.txt" "$PORT" <<'PY'
import json, sys, urllib.request
text = open(sys.argv[1]).read().replace("\n", " ")
prefix = text[:3760]  # about 2,070 tokens of the synthetic vocabulary
def post(question, policy):
    body = {"prompt": prefix + question, "max_tokens": 8, "temperature": 0}
    if policy:
        body["kv_policy"] = policy
    req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[2]}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    u = json.load(urllib.request.urlopen(req, timeout=600))["usage"]
    return u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], u["kv_tokens_evicted"]
print("| request | kv_policy | prompt tokens | cached tokens | KV tokens evicted |")
print("|---|---|---|---|---|")
snap = {"method": "snapkv", "budget_tokens": 256}
rows = [("1", snap, text[100000:100120]), ("2", snap, text[100500:100620]),
        ("3", snap, text[101000:101120]), ("4", None, text[200000:200120]),
        ("5", {"method": "h2o", "budget_tokens": 256}, text[101500:101620])]
for name, policy, q in rows:
    p, c, e = post(q, policy)
    label = "none" if policy is None else f"{policy['method']} {policy['budget_tokens']}"
    print(f"| {name} | {label} | {p} | {c} | {e} |")
PY
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E "^kvserve:(kv_tokens_evicted_total|request_kv_kept_fraction_count|prefix_cache_hits_total)"
