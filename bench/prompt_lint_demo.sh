#!/usr/bin/env bash
# prompt-lint demo (issue 24 item 6): N completions requests that put a timestamp line before a
# ~2,000-token shared system prompt (real text: War and Peace) and end with a short question of
# their own. `kvserve prompt-lint` finds the timestamp and predicts the prefix-cache hit rate
# before and after moving it; `kvserve serve` + `kvserve bench serve` measure both: once with
# the requests as generated ("before") and once with the timestamp line after the system
# prompt ("after", what the application would change).
#
# Model: shared/assets' llama-2-tiny-random.gguf (the Llama 2 vocabulary with random weights,
# dim 8, one layer, 4,096-token context: the text is noise, the cache is real and the prefill
# is cheap), so prompt-lint and the server tokenize alike.
# bench serve sends each prompt as text (its sharegpt dataset: the first human turn of each
# conversation), one request at a time (--max-concurrency 1: every request sees the cache its
# predecessors left, as prompt-lint's replay does), max_tokens 1; the server starts afresh for
# each run. Takes under a minute on 2 cores.
#
# usage: bench/prompt_lint_demo.sh   (env: KVSERVE, ASSETS, OUT, N, PORT)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVSERVE=${KVSERVE:-$ROOT/build/kvserve}
ASSETS=${ASSETS:-$ROOT/../shared/assets}
OUT=${OUT:-/tmp/kvserve-prompt-lint-demo}
N=${N:-64}
PORT=${PORT:-18473}
MODEL=${MODEL:-$ASSETS/models/llama-2-tiny-random/llama-2-tiny-random.gguf}
TEXT=$ASSETS/text/war-and-peace.txt

for f in "$KVSERVE" "$MODEL" "$TEXT"; do
  [ -e "$f" ] || { echo "missing $f" >&2; exit 1; }
done
mkdir -p "$OUT"

# 1. The requests. The system prompt grows by paragraphs until it is at least 2,000 tokens.
python3 - "$KVSERVE" "$MODEL" "$TEXT" "$OUT" "$N" <<'EOF'
import json, random, subprocess, sys
kvserve, model, text_path, out, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
book = open(text_path, encoding="utf-8", errors="replace").read().replace("\r\n", "\n")
start = book.index("CHAPTER I")
def count(text):
    ids = subprocess.run([kvserve, "tokenize", "--model", model, "--no-bos", "--text", text],
                         check=True, capture_output=True, text=True).stdout.split()
    return len(ids)
end = start + 7000
while True:
    system = ("You answer questions about the following passage of War and Peace. Quote it where "
              "you can.\n\n" + book[start:end].strip())
    if count(system) >= 2000:
        break
    end = book.index("\n", end + 300)
rng = random.Random(24)
names = ["Anna Pavlovna", "Prince Vasili", "Pierre", "Prince Andrew", "Helene", "Anatole",
         "Princess Mary", "the old prince", "Natasha", "Nicholas", "Sonya", "Boris"]
t = 1741944000  # 2025-03-14 09:20:00 UTC
before, after = [], []
for i in range(n):
    t += rng.randint(1, 90)
    h, m, s = (t // 3600) % 24, (t // 60) % 60, t % 60
    stamp = f"Current time: 2025-03-14 {h:02d}:{m:02d}:{s:02d} UTC"
    question = f"Question {i + 1}: what does {rng.choice(names)} say about {rng.choice(names)}?"
    before.append(f"{stamp}\n\n{system}\n\n{question}\nAnswer:")
    after.append(f"{system}\n\n{stamp}\n\n{question}\nAnswer:")
for name, prompts in (("before", before), ("after", after)):
    with open(f"{out}/{name}.jsonl", "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p, "max_tokens": 1}) + "\n")
    # bench serve's sharegpt dataset: the first human turn of each conversation, as text.
    with open(f"{out}/{name}.sharegpt.json", "w") as f:
        json.dump([{"id": str(i), "conversations": [{"from": "human", "value": p}]}
                   for i, p in enumerate(prompts)], f)
print(f"system prompt: {count(system)} tokens; {n} requests in {out}/before.jsonl, {out}/after.jsonl")
EOF

# 2. Predicted: prompt-lint on both files.
for name in before after; do
  echo "== kvserve prompt-lint $OUT/$name.jsonl --model $MODEL"
  "$KVSERVE" prompt-lint "$OUT/$name.jsonl" --model "$MODEL" 2>/dev/null | tee "$OUT/$name.lint.txt"
  "$KVSERVE" prompt-lint "$OUT/$name.jsonl" --model "$MODEL" --format json 2>/dev/null >"$OUT/$name.lint.json"
done

# 3. Measured: a fresh server per run, bench serve replaying the same prompts one at a time.
SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
trap stop_server EXIT
for name in before after; do
  "$KVSERVE" serve --model "$MODEL" --port "$PORT" --kv-cache-memory 64MiB \
    >"$OUT/$name.serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  echo "== kvserve bench serve --dataset-name sharegpt --dataset-path $OUT/$name.sharegpt.json"
  "$KVSERVE" bench serve --base-url "http://127.0.0.1:$PORT" --endpoint /v1/completions \
    --dataset-name sharegpt --dataset-path "$OUT/$name.sharegpt.json" --num-prompts "$N" \
    --sharegpt-output-len 1 --max-concurrency 1 --no-progress \
    --result-file "$OUT/$name.bench.json" >"$OUT/$name.bench.txt" 2>&1
  grep -i -E "prefix|hit" "$OUT/$name.bench.txt" || true
  curl -sf "http://127.0.0.1:$PORT/metrics" | grep -E "^kvserve:prompt_divergence_tokens_(sum|count)" \
    >"$OUT/$name.divergence.txt" || true
  stop_server
done

# 4. The table.
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
def load(p): return json.load(open(p))
b, a = load(f"{out}/before.lint.json"), load(f"{out}/after.lint.json")
mb, ma = load(f"{out}/before.bench.json"), load(f"{out}/after.bench.json")
def divergence(name):
    d = {}
    for line in open(f"{out}/{name}.divergence.txt"):
        k, v = line.split()
        d[k.split("{")[0].rsplit("_", 1)[1]] = float(v)
    return d["sum"] / d["count"] if d.get("count") else float("nan")
def pred(rate, tokens, total): return f"{100 * rate:.1f}% ({tokens:,}/{total:,})"
def meas(m):
    p = m["prefix_cache"]
    return f"{100 * p['server_hit_rate']:.1f}% ({int(p['delta_hits_tokens']):,}/{int(p['delta_queries_tokens']):,})"
print()
if b["spans"]:
    s = b["spans"][0]
    print(f"span found in before.jsonl: tokens [{s['begin_tokens']}, {s['end_tokens_min']}..{s['end_tokens_max']}) "
          f"of {s['requests']} of {b['requests']} requests, after {json.dumps(s['context_before'])}, "
          f"before {s['shared_tokens']} shared tokens; values "
          f"{', '.join(json.dumps(x['text']) for x in s['examples'])}")
    after_pred = pred(s["hit_rate_after"], s["cached_tokens_after"], b["prompt_tokens"])
else:
    print("span found in before.jsonl: none")
    after_pred = "-"
print(f"spans found in after.jsonl: {a['spans_found']}")
print()
print(f"| requests | prefix-cache hit rate, predicted (prompt-lint) | measured (bench serve, /metrics) "
      f"| mean prompt_divergence_tokens | median TTFT |")
print("|---|---|---|---|---|")
print(f"| before: timestamp first | {pred(b['hit_rate'], b['cached_tokens'], b['prompt_tokens'])} | {meas(mb)} "
      f"| {divergence('before'):.0f} | {mb['ttft']['median_ms']:.1f} ms |")
print(f"| before, span moved by prompt-lint's replay | {after_pred} | - | - | - |")
print(f"| after: timestamp after the system prompt | {pred(a['hit_rate'], a['cached_tokens'], a['prompt_tokens'])} "
      f"| {meas(ma)} | {divergence('after'):.0f} | {ma['ttft']['median_ms']:.1f} ms |")
EOF
