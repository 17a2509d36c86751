#!/usr/bin/env bash
# The continuous-batching and prefix-caching figures of docs/benchmarks.md, through
# `kvserve generate --prompts-file` (the engine, no HTTP), on synthetic SmolLM2-135M Q8_0 at 2
# threads, f32 KV, each repeated and reported as medians:
#   1. 32 requests of ~256 prompt + 128 output tokens: all together vs one after another
#      (the two run back to back in each of PAIR_ROUNDS rounds, default 5: these shared
#      machines drift by tens of percent within minutes, so the ratio is taken per round),
#      and the same with one output token, which splits each time into prefill and decode;
#   2. TTFT of a ~2,177-token prompt whose first 2,176 tokens are cached vs cold;
#   3. shared prefixes: 8 groups x 8 requests (~1,020-token system prompt + ~128-token question,
#      64 output tokens) with prefix caching on and off: hit rate and throughput;
# items 2 and 3 ROUNDS times (default 3).
# Usage: bench/engine_bench.sh [--rounds N] [--pair-rounds N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=3
PAIR_ROUNDS=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --pair-rounds) PAIR_ROUNDS="$2"; shift 2 ;;
    *) echo "usage: bench/engine_bench.sh [--rounds N] [--pair-rounds N]" >&2; exit 2 ;;
  esac
done
BIN=build/kvserve
source bench/bench_model.sh
MODEL="$(smollm2_q8_model "$BIN")"
W="$(mktemp -d -t kvserve-engine-bench.XXXXXX)"
log() { echo "[engine-bench] $*" >&2; }

python3 - "$W" <<'EOF'
import random, sys
w = sys.argv[1]
random.seed(32)
words = 'alpha beta gamma delta river stone cloud paper music light tree house water fire earth wind green blue'.split()
open(f'{w}/p32.txt', 'w').write(''.join(' '.join(random.choice(words) for _ in range(85)) + '\n' for _ in range(32)))
random.seed(1)
words2 = 'alpha beta gamma delta river stone cloud paper music light tree house'.split()
p = ' '.join(random.choice(words2) for _ in range(720))
open(f'{w}/ttft.txt', 'w').write((p + '\n') * 4)
random.seed(7)
lines = []
for g in range(8):
    system = ' '.join(random.choice(words) for _ in range(340))
    for q in range(8):
        lines.append(system + ' ' + ' '.join(random.choice(words) for _ in range(43)))
open(f'{w}/shared.txt', 'w').write('\n'.join(lines) + '\n')
EOF

gen() {  # gen FILE OUT [flags...]: the summary line (last JSON line) into OUT
  local file="$1" out="$2"; shift 2
  "$BIN" generate --model "$MODEL" --prompts-file "$file" --temperature 0 --threads 2 \
    --output-format json "$@" 2>/dev/null >"$out.all"
  tail -n 1 "$out.all" >"$out"
}

for ((r = 1; r <= PAIR_ROUNDS; r++)); do
  log "round $r/$PAIR_ROUNDS: 32 requests together, then one after another"
  gen "$W/p32.txt" "$W/c32-$r.json" -n 128 --ignore-eos --max-num-seqs 32
  gen "$W/p32.txt" "$W/c1-$r.json" -n 128 --ignore-eos --max-num-seqs 1
  log "round $r/$PAIR_ROUNDS: the same prompts with one output token (prefill time)"
  gen "$W/p32.txt" "$W/p32-$r.json" -n 1 --ignore-eos --max-num-seqs 32
  gen "$W/p32.txt" "$W/p1-$r.json" -n 1 --ignore-eos --max-num-seqs 1
done

for ((r = 1; r <= ROUNDS; r++)); do
  log "round $r/$ROUNDS: TTFT cached vs cold"
  gen "$W/ttft.txt" "$W/ttft-$r.json" -n 1 --max-num-seqs 1 --max-model-len 4096
  log "round $r/$ROUNDS: shared prefixes, caching on and off"
  gen "$W/shared.txt" "$W/sp-on-$r.json" -n 64 --ignore-eos --kv-cache-memory 2GiB --max-model-len 2048
  gen "$W/shared.txt" "$W/sp-off-$r.json" -n 64 --ignore-eos --kv-cache-memory 2GiB --max-model-len 2048 \
    --no-enable-prefix-caching
done

python3 - "$W" "$ROUNDS" "$PAIR_ROUNDS" <<'EOF'
import json, statistics, sys
w, rounds, pair_rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median
load = lambda f: json.load(open(f'{w}/{f}'))
c32 = [load(f'c32-{r}.json')['elapsed_s'] for r in range(1, pair_rounds + 1)]
c1 = [load(f'c1-{r}.json')['elapsed_s'] for r in range(1, pair_rounds + 1)]
ratios = [b / a for a, b in zip(c32, c1)]
print(f"32 requests: together {med(c32):.1f} s {c32}, one after another {med(c1):.1f} s {c1}; "
      f"ratio per round {[round(x, 2) for x in ratios]}, median {med(ratios):.2f}x")
p32 = [load(f'p32-{r}.json')['elapsed_s'] for r in range(1, pair_rounds + 1)]
p1 = [load(f'p1-{r}.json')['elapsed_s'] for r in range(1, pair_rounds + 1)]
print(f"  of which prefill (1 output token): together {med(p32):.2f} s, one after another "
      f"{med(p1):.2f} s; so decode of 127 more tokens: together {med([a - b for a, b in zip(c32, p32)]):.2f} s, "
      f"one after another {med([a - b for a, b in zip(c1, p1)]):.2f} s")
# TTFT: each request's TTFT minus the previous one's is its own prefill (max-num-seqs 1).
cold, cached = [], []
for r in range(1, rounds + 1):
    rows = [json.loads(l) for l in open(f'{w}/ttft-{r}.json.all') if l.startswith('{')][:-1]
    t = [x['ttft_ms'] for x in rows]
    cold.append(t[0])
    cached += [t[i] - t[i - 1] for i in range(1, len(t))]
    hits = [x['cached_tokens'] for x in rows]
print(f"TTFT: cold {med(cold):.1f} ms {cold}, cached {med(cached):.1f} ms (median of {len(cached)}), "
      f"{100 * (1 - med(cached) / med(cold)):.1f}% lower; cached tokens {hits}")
on = [load(f'sp-on-{r}.json') for r in range(1, rounds + 1)]
off = [load(f'sp-off-{r}.json') for r in range(1, rounds + 1)]
prompt = on[0]['total_prompt_tokens']
# Ideal: every request after its group's first reuses the group's block-aligned common prefix
# (the most any request of the group got from the cache).
rows = [json.loads(l) for l in open(f'{w}/sp-on-1.json.all') if l.startswith('{')][:-1]
ideal = sum(7 * max(x['cached_tokens'] for x in rows[g * 8:(g + 1) * 8]) for g in range(8)) / prompt
print(f"shared prefix ideal hit rate {100 * ideal:.1f}%; measured / ideal "
      f"{[round(x['prefix_cache_hit_rate'] / ideal, 3) for x in on]}")
print(f"shared prefix: {prompt} prompt tokens; hit rate {[round(100 * x['prefix_cache_hit_rate'], 1) for x in on]}%; "
      f"on {med([x['elapsed_s'] for x in on]):.1f} s vs off {med([x['elapsed_s'] for x in off]):.1f} s "
      f"({med([b['elapsed_s'] / a['elapsed_s'] for a, b in zip(on, off)]):.2f}x); output tok/s "
      f"{med([x['output_tokens_per_s'] for x in on]):.1f} vs {med([x['output_tokens_per_s'] for x in off]):.1f}; "
      f"mean TTFT {med([x['mean_ttft_ms'] for x in on]):.0f} vs {med([x['mean_ttft_ms'] for x in off]):.0f} ms")
EOF
log "raw results in $W"
