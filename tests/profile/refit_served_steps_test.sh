#!/usr/bin/env bash
# A profile calibrated to the engine as it serves, end to end with the real binary
# (docs/cost.md, "Calibrating to served steps"):
#  1. `kvserve profile` on a tiny synthetic model;
#  2. `kvserve serve --step-log` under `kvserve bench serve`: one header line, then one line
#     per engine step;
#  3. `kvserve profile --refit` fits the profile to those steps: the file carries
#     served_step_fit, and `kvserve sim` takes it;
#  4. what it cannot use is refused with the reason: --refit without --step-log, a step log
#     from another thread count, a file that is not a step log.
# No assets needed. Usage: refit_served_steps_test.sh KVSERVE_BINARY WORK_DIR
set -uo pipefail
BIN="$1"
WORK="$2"
rm -rf "$WORK" && mkdir -p "$WORK"
PID=""
cleanup() { [[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$WORK"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
MODEL="$WORK/tiny.gguf"

"$BIN" mkmodel --preset tiny --dtype q8_0 --seed 0 -o "$MODEL" >"$WORK/mkmodel.log" 2>&1 || fail "mkmodel"
"$BIN" profile --model "$MODEL" -t 1 --repetitions 1 -o "$WORK/profile.json" 2>"$WORK/profile.log" ||
  fail "profile"

"$BIN" serve --model "$MODEL" --port "$PORT" --threads 1 --max-num-seqs 4 \
  --kv-cache-memory 16MiB --step-log "$WORK/steps.jsonl" >"$WORK/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || fail "the server exited at start-up"
  sleep 0.1
done
grep -q "step log: $WORK/steps.jsonl" "$WORK/serve.log" || fail "no step log line in the banner"
"$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name random --num-prompts 12 \
  --random-input-len 48 --random-output-len 12 --max-concurrency 4 --seed 3 --vocab-range 10 500 --no-progress \
  >"$WORK/bench.log" 2>&1 || fail "bench serve"
kill -TERM "$PID"; wait "$PID"; PID=""

python3 - "$WORK/steps.jsonl" <<'PY' || fail "step log content"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
header, steps = lines[0], lines[1:]
assert header["kvserve_step_log"] == 1 and header["threads"] == 1, header
assert header["kv_cache_dtype"] and header["block_size"] >= 1, header
assert len(steps) >= 12, len(steps)
new = sum(s[1] for st in steps for s in st["seqs"])
sampled = sum(s[2] for st in steps for s in st["seqs"])
assert sampled == 12 * 12, sampled            # every output token sampled once
assert new >= 12 * 11, new                     # prompts (maybe cached) + 11 decodes each
assert all(st["seconds"] > 0 for st in steps)
PY

"$BIN" profile --model "$MODEL" --refit "$WORK/profile.json" --step-log "$WORK/steps.jsonl" \
  -o "$WORK/refit.json" 2>"$WORK/refit.log" || fail "refit"
grep -q "refitted to [0-9]* served steps" "$WORK/refit.log" || fail "no refit summary"
python3 - "$WORK/refit.json" <<'PY' || fail "refit content"
import json, sys
p = json.load(open(sys.argv[1]))
f = p["measurements"]["served_step_fit"]
assert f["num_steps"] >= 12 and 0.5 <= f["engine_scale"] <= 2.0, f
assert "matmul" in p["measurements"], "the kernel measurements are kept"
assert "served steps" in p["description"], p["description"]
PY
"$BIN" sim --model "$MODEL" --hardware "$WORK/refit.json" --max-num-seqs 4 \
  --kv-cache-memory 16MiB --dataset-name random --num-prompts 12 --random-input-len 48 \
  --random-output-len 12 --max-concurrency 4 --seed 3 >"$WORK/sim.log" 2>&1 || fail "sim with the refit"
grep -q "Median TTFT" "$WORK/sim.log" || fail "sim printed no TTFT"

# Refusals.
expect_error() {  # substring, args...
  local want="$1"; shift
  if "$BIN" "$@" >"$WORK/err.out" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$want" "$WORK/err.out" || fail "'$*' did not say '$want': $(cat "$WORK/err.out")"
}
expect_error "needs --step-log" profile --model "$MODEL" --refit "$WORK/profile.json"
expect_error "goes with --refit" profile --model "$MODEL" --step-log "$WORK/steps.jsonl"
sed '1s/"threads":1/"threads":2/' "$WORK/steps.jsonl" >"$WORK/steps-2.jsonl"
expect_error "same --threads" profile --model "$MODEL" --refit "$WORK/profile.json" \
  --step-log "$WORK/steps-2.jsonl"
echo '{"seconds": 1}' >"$WORK/not-a-log.jsonl"
expect_error "not a step log" profile --model "$MODEL" --refit "$WORK/profile.json" \
  --step-log "$WORK/not-a-log.jsonl"
expect_error "cannot open" profile --model "$MODEL" --refit "$WORK/none.json" \
  --step-log "$WORK/steps.jsonl"
echo "PASS"
