#!/usr/bin/env bash
# kvserve against llama.cpp and ik_llama.cpp (the fastest CPU fork) on the same GGUF files, at
# each instruction-set level this CPU has (docs/benchmarks.md, "CPU speed against the peers").
#
# 1. Builds both peers' llama-bench from source at pinned commits, once per level: an AVX-512
#    build (-march=native plus GGML_AVX512, _VNNI, _BF16, which ik_llama.cpp needs with GCC per
#    its docs/build.md) where the CPU has AVX-512, and an AVX2-only build (GGML_NATIVE=OFF,
#    AVX2 + FMA + F16C). Builds are cached under --peers-dir, keyed by commit and level.
# 2. Makes the files with `kvserve mkmodel` (random weights, seed 0, cached in
#    build/bench-models).
# 3. Per file and thread count, alternating runs (--runs rounds; each round runs every engine
#    once): llama.cpp `llama-bench -p 512 -n 128`, ik_llama.cpp `llama-bench -rtr 1` (weights
#    repacked at load) and `kvserve generate --random-prompt-tokens 512 -n 128 --warmup 1
#    --kv-cache-dtype f16` under KVSERVE_SIMD=LEVEL: f16 KV everywhere (llama-bench's default
#    -ctk / -ctv), and each engine times a run after an untimed warm-up (llama-bench's own
#    warm-up run; without it kvserve's timed prefill paid the first writes to its KV pages,
#    up to 2x on these VMs). Runs before 2026-12-07 had neither (kvserve on f32 KV, cold).
#    Medians of the rounds. With --f16-as-bf16, kvserve
#    runs under KVSERVE_F16_AS_BF16=1: on a CPU with AVX512_BF16, f16 weights packed as bf16 at
#    the avx512 level, the trade ik_llama.cpp's `-rtr 1` makes on Zen 4 (its PR #174).
# 4. One table per level: pp512 / tg128 tokens/s, kvserve's ratio to each peer, and each figure
#    beside the machine's ceilings (build/bench/ceiling at that level and thread count): prefill
#    as GFLOP/s of matmul work against the f32 FMA peak, decode as weight GB/s against the read
#    bandwidth.
#
# Sources: --llama-src / --ik-src name a git repository (a clone, a bare mirror such as the tool
# library's `fetch`, or a URL to clone); the commits are pinned in bench/peers.sh (--llama-commit /
# --ik-commit override). Nothing here runs in CI: it needs the peers' sources and about
# 15 minutes of building per peer and level on 2 cores.
#
# usage: bench/compare_peers.sh [--llama-src REPO] [--ik-src REPO] [--levels "avx2 avx512"]
#          [--presets "smollm2-135m llama-3.2-1b"] [--dtypes "f16 bf16 q8_0 q4_0 q4_k_m q6_k"]
#          [--threads "1 2"] [--runs 3] [--prompt-tokens 512] [--gen-tokens 128]
#          [--peers-dir build/peers] [--out FILE.md] [--build-only] [--f16-as-bf16]
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/bench_model.sh
source bench/peers.sh  # pinned commits, checkout, build_peer

LEVELS=""
PRESETS="smollm2-135m llama-3.2-1b"
DTYPES="f16 bf16 q8_0 q4_0 q4_k_m q6_k"
THREADS="1 2"
RUNS=3
PROMPT_TOKENS=512
GEN_TOKENS=128
OUT=""
BUILD_ONLY=0
F16_AS_BF16=0
while (($#)); do
  case "$1" in
    --llama-src) LLAMA_SRC="$2"; shift ;;
    --ik-src) IK_SRC="$2"; shift ;;
    --llama-commit) LLAMA_COMMIT="$2"; shift ;;
    --ik-commit) IK_COMMIT="$2"; shift ;;
    --levels) LEVELS="$2"; shift ;;
    --presets) PRESETS="$2"; shift ;;
    --dtypes) DTYPES="$2"; shift ;;
    --threads) THREADS="$2"; shift ;;
    --runs) RUNS="$2"; shift ;;
    --prompt-tokens) PROMPT_TOKENS="$2"; shift ;;
    --gen-tokens) GEN_TOKENS="$2"; shift ;;
    --peers-dir) PEERS_DIR="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --build-only) BUILD_ONLY=1 ;;
    --f16-as-bf16) F16_AS_BF16=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
KVSERVE=build/kvserve
CEILING=build/bench/ceiling
for b in "$KVSERVE" "$CEILING"; do
  [[ -x "$b" ]] || { echo "error: $b not found; build first (scripts/build.sh)" >&2; exit 1; }
done
log() { echo "[compare-peers] $*" >&2; }

# Levels: every level this CPU has unless --levels names some.
if [[ -z "$LEVELS" ]]; then
  LEVELS="avx2"
  grep -qw avx512_vnni /proc/cpuinfo && LEVELS="avx2 avx512"
fi
for level in $LEVELS; do
  case "$level" in
    avx2) grep -qw avx2 /proc/cpuinfo || { echo "error: this CPU lacks AVX2" >&2; exit 1; } ;;
    avx512) grep -qw avx512_vnni /proc/cpuinfo || { echo "error: this CPU lacks AVX-512 VNNI" >&2; exit 1; } ;;
    *) echo "error: --levels takes avx2 and avx512, got $level" >&2; exit 2 ;;
  esac
done

# ---- 1. Peers (bench/peers.sh) ----
mkdir -p "$PEERS_DIR/src"
LLAMA_TREE="$(checkout llama.cpp "$LLAMA_SRC" "$LLAMA_COMMIT")"
IK_TREE="$(checkout ik_llama.cpp "$IK_SRC" "$IK_COMMIT")"
declare -A BENCH
for level in $LEVELS; do
  BENCH[llama-$level]="$(build_peer llama.cpp "$LLAMA_TREE" "$level" llama-bench)"
  BENCH[ik-$level]="$(build_peer ik_llama.cpp "$IK_TREE" "$level" llama-bench)"
done
((BUILD_ONLY)) && { log "peers built"; exit 0; }

# ---- 2. Files ----
for p in $PRESETS; do
  for d in $DTYPES; do bench_model "$KVSERVE" "$p" "$d" >/dev/null; done
done

# ---- 3. Ceilings and alternating runs ----
RESULTS="$(mktemp -d /tmp/kvserve-peers.XXXXXX)"
log "results in $RESULTS"
for level in $LEVELS; do
  for t in $THREADS; do
    log "ceilings at $level, $t thread(s)"
    KVSERVE_SIMD=$level "$CEILING" --threads "$t" --format json >"$RESULTS/ceiling-$level-$t.json"
  done
done
{ lscpu | grep -E '^(Model name|Flags)'
  grep -m2 -E '^(cpu family|model)[[:space:]]' /proc/cpuinfo || true; } >"$RESULTS/machine.txt"
run_peer() {  # bench file threads out [extra flags]
  local bench=$1 file=$2 t=$3 out=$4
  shift 4
  "$bench" -m "$file" -p "$PROMPT_TOKENS" -n "$GEN_TOKENS" -t "$t" -r 1 -o json "$@" \
    >"$out" 2>"$out.err" || { echo "error: $bench on $file failed:" >&2; tail -5 "$out.err" >&2; exit 1; }
}
for p in $PRESETS; do
  for d in $DTYPES; do
    f="build/bench-models/$p-$d.gguf"
    for t in $THREADS; do
      for ((r = 1; r <= RUNS; r++)); do
        for level in $LEVELS; do
          log "$p $d threads=$t level=$level round $r/$RUNS"
          run_peer "${BENCH[llama-$level]}" "$f" "$t" "$RESULTS/llama-$level-$p-$d-$t-$r.json"
          run_peer "${BENCH[ik-$level]}" "$f" "$t" "$RESULTS/ik-$level-$p-$d-$t-$r.json" -rtr 1
          KVSERVE_F16_AS_BF16=$F16_AS_BF16 KVSERVE_SIMD=$level "$KVSERVE" generate --model "$f" --output-format json --threads "$t" \
            -n "$GEN_TOKENS" --random-prompt-tokens "$PROMPT_TOKENS" --ignore-eos \
            --kv-cache-dtype f16 --warmup 1 --temperature 0 --seed 0 >"$RESULTS/kvserve-$level-$p-$d-$t-$r.json" 2>"$RESULTS/kv.err" ||
            { tail -5 "$RESULTS/kv.err" >&2; exit 1; }
        done
      done
    done
  done
done

# ---- 4. Tables ----
python3 - "$RESULTS" "$LEVELS" "$PRESETS" "$DTYPES" "$THREADS" "$RUNS" "$PROMPT_TOKENS" \
  "$GEN_TOKENS" "$LLAMA_COMMIT" "$IK_COMMIT" "$F16_AS_BF16" >"$RESULTS/table.md" <<'EOF'
import json, os, statistics, sys
(results, levels, presets, dtypes, threads, runs, prompt_tokens, gen_tokens, llama_commit,
 ik_commit, f16_as_bf16) = sys.argv[1:]
runs, prompt_tokens, gen_tokens = int(runs), int(prompt_tokens), int(gen_tokens)

def load(path):
    with open(path) as f:
        return json.load(f)

def peer_speed(path, n_prompt, n_gen):
    for row in load(path):
        if row.get("n_prompt") == n_prompt and row.get("n_gen") == n_gen:
            return row["avg_ts"]
    raise SystemExit(f"{path}: no row with n_prompt={n_prompt} n_gen={n_gen}")

def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:,.{digits}f}"

machine = open(os.path.join(results, "machine.txt")).read()
model = next(l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("Model name"))
flags = next(l.split(":", 1)[1].split() for l in machine.splitlines() if l.startswith("Flags"))
simd = " ".join(f for f in flags if f.startswith(("avx", "fma", "f16c")))
family = {l.split(":", 1)[0].strip(): l.split(":", 1)[1].strip() for l in machine.splitlines()
          if l.startswith(("cpu family", "model"))}
if family:  # "AMD EPYC" alone does not say Zen 4 (family 25) from Zen 5 (26)
    model += f" (CPU family {family.get('cpu family', '?')}, model {family.get('model', '?')})"
print(f"Machine: {model}, {os.cpu_count()} vCPUs; SIMD flags: {simd}. llama.cpp {llama_commit[:12]}, "
      f"ik_llama.cpp {ik_commit[:12]} (`-rtr 1`); pp{prompt_tokens} / tg{gen_tokens} tokens/s, "
      f"median of {runs} alternating rounds; f16 KV."
      + (" kvserve under KVSERVE_F16_AS_BF16=1 (f16 weights as bf16 at avx512 where the CPU "
         "has AVX512_BF16, as ik_llama.cpp's `-rtr 1` on Zen 4)." if f16_as_bf16 == "1" else ""))
for level in levels.split():
    print()
    print(f"### {level}")
    print()
    for t in threads.split():
        c = load(os.path.join(results, f"ceiling-{level}-{t}.json"))
        bf16_dot = c.get('bf16_dot_gflops') or 0
        print(f"- ceilings at {t} thread(s): read {fmt(c.get('read_bandwidth_gbs'))} GB/s, f32 FMA "
              f"{fmt(c.get('fma_gflops'))} GFLOP/s, int8 dot {fmt(c.get('int8_gops'))} GOP/s"
              + (f", bf16 dot (vdpbf16ps) {fmt(bf16_dot)} GFLOP/s" if bf16_dot else "")
              + " (each at the level's own vector width)")
    print()
    print("| model | type | threads | pp: llama.cpp / ik_llama.cpp / kvserve | kvserve / ik, / llama.cpp "
          "| kvserve GFLOP/s (of FMA peak; bf16 dot peak in brackets where it runs) "
          "| tg: llama.cpp / ik_llama.cpp / kvserve "
          "| kvserve / ik, / llama.cpp | kvserve GB/s (of read ceiling) |")
    print("|---|---|---:|---|---|---|---|---|---|")
    for p in presets.split():
        for d in dtypes.split():
            for t in threads.split():
                key = f"{level}-{p}-{d}-{t}"
                rs = range(1, runs + 1)
                lpp = statistics.median(peer_speed(f"{results}/llama-{key}-{r}.json", prompt_tokens, 0) for r in rs)
                ltg = statistics.median(peer_speed(f"{results}/llama-{key}-{r}.json", 0, gen_tokens) for r in rs)
                ipp = statistics.median(peer_speed(f"{results}/ik-{key}-{r}.json", prompt_tokens, 0) for r in rs)
                itg = statistics.median(peer_speed(f"{results}/ik-{key}-{r}.json", 0, gen_tokens) for r in rs)
                ks = [load(f"{results}/kvserve-{key}-{r}.json") for r in rs]
                kpp = statistics.median(k["prefill_tokens_per_s"] for k in ks)
                ktg = statistics.median(k["decode_tokens_per_s"] for k in ks)
                c = load(os.path.join(results, f"ceiling-{level}-{t}.json"))
                fma, bw = c.get("fma_gflops"), c.get("read_bandwidth_gbs")
                # Matmul work per prompt token: the layers' weights for every token, the output
                # matrix once per prompt (as bench/run_benchmarks.sh).
                out_params = ks[0]["output_parameters"]
                params = ks[0]["parameters_per_token"] - out_params + out_params / prompt_tokens
                gflops = kpp * 2 * params / 1e9
                gbs = ktg * ks[0]["weight_bytes_per_token"] / 1e9
                # Rows whose matmuls run vdpbf16ps: bf16, and f16 under KVSERVE_F16_AS_BF16=1.
                dot = c.get("bf16_dot_gflops") or 0
                on_dot = dot and (d == "bf16" or (d == "f16" and f16_as_bf16 == "1"))
                dot_note = f" [{fmt(gflops / dot, 2)}]" if on_dot else ""
                print(f"| {p} | {d} | {t} | {fmt(lpp)} / {fmt(ipp)} / {fmt(kpp)} | "
                      f"{fmt(kpp / ipp, 2)}, {fmt(kpp / lpp, 2)} | {fmt(gflops)} "
                      f"({fmt(gflops / fma if fma else None, 2)}){dot_note} | {fmt(ltg)} / {fmt(itg)} / "
                      f"{fmt(ktg)} | {fmt(ktg / itg, 2)}, {fmt(ktg / ltg, 2)} | {fmt(gbs)} "
                      f"({fmt(gbs / bw if bw else None, 2)}) |")
EOF
cat "$RESULTS/table.md"
if [[ -n "$OUT" ]]; then
  cp "$RESULTS/table.md" "$OUT"
  log "wrote $OUT"
fi
