#!/usr/bin/env bash
# KV cache quantization quality: `kvserve eval perplexity --kl-divergence` for each KV dtype
# against an f32-KV run of the same model, as markdown tables for docs/kv-quantization.md.
#
# usage: bench/kv_quant_eval.sh KVSERVE_BINARY OUT_DIR [ASSETS_DIR]
#   env: THREADS (default 2), DTYPES (default "f16 bf16 fp8_e4m3 fp8_e5m2 int8"),
#        STORIES_CTX (default 512), SMOL_CTX (default 512), SMOL_WINDOWS (default 16)
#
# Builds nothing. Two models:
#  1. stories260K (real trained weights, f32; its context is 512 tokens) over the whole of
#     ASSETS_DIR/text/tinystories_validation_head.txt in windows of STORIES_CTX tokens
#     (~393K tokens: 767 windows of 512, ~196K scored tokens; ~30 s per dtype at 2 threads).
#  2. a synthetic smollm2-135m (`kvserve mkmodel --preset smollm2-135m --dtype q8_0`: Q8_0
#     weights, RANDOM but deterministic (seed 0), its synthetic byte-level BPE vocabulary) over
#     the first SMOL_WINDOWS windows of SMOL_CTX tokens of the same text (~40 s per dtype at 2
#     threads). Its perplexity is meaningless (random weights); its KLD shows how each KV dtype
#     perturbs a model of a real shape (30 layers, 3 KV heads of 64).
#  3. the synthetic DeepSeek presets deepseek-v2-tiny and deepseek-v3-tiny (f32 weights, MLA:
#     one latent row of 64 + 16 values per token and layer) over the same SMOL_WINDOWS windows:
#     what each dtype does to a latent cache (int8: one scale per token and layer).
# Each window is one forward pass (--batch-size = --ctx); K/V are written to the cache before
# attention reads them, so every attention read sees the quantized values. fp8 scales are
# calibrated at start-up on kvserve's built-in text (the models carry none).
# Writes OUT_DIR/<model>_<dtype>.json (the eval output), .log (its stderr), and
# OUT_DIR/kv_quant_eval.md (the tables, also printed on stdout). Progress goes to stderr.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,5p' "$0" >&2
  exit 2
fi
KVSERVE=$(realpath "$1")
OUT_DIR=$2
ASSETS=${3:-"$(dirname "${BASH_SOURCE[0]}")/../../shared/assets"}
THREADS=${THREADS:-2}
DTYPES=${DTYPES:-"f16 bf16 fp8_e4m3 fp8_e5m2 int8"}
STORIES_CTX=${STORIES_CTX:-512}
SMOL_CTX=${SMOL_CTX:-512}
SMOL_WINDOWS=${SMOL_WINDOWS:-16}

STORIES="$ASSETS/models/stories260K/stories260K.bin"
TEXT="$ASSETS/text/tinystories_validation_head.txt"
for f in "$KVSERVE" "$STORIES" "$TEXT"; do
  [[ -e "$f" ]] || { echo "error: $f not found" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "error: python3 is needed for the tables" >&2; exit 1; }
mkdir -p "$OUT_DIR"

SMOL="$OUT_DIR/smollm2-135m-q8_0.gguf"
if [[ ! -f "$SMOL" ]]; then
  echo "== making $SMOL" >&2
  "$KVSERVE" mkmodel --preset smollm2-135m --dtype q8_0 --seed 0 -o "$SMOL" >&2
fi

# run NAME MODEL DTYPE ARGS...
run() {
  local name=$1 model=$2 dtype=$3
  shift 3
  local out="$OUT_DIR/${name}_${dtype}"
  echo "== $name, KV $dtype" >&2
  local start=$SECONDS
  "$KVSERVE" eval perplexity --model "$model" --text-file "$TEXT" --kv-cache-dtype "$dtype" \
    --kl-divergence --threads "$THREADS" --format json "$@" >"$out.json" 2>"$out.log" || {
    echo "error: eval failed, see $out.log:" >&2
    tail -5 "$out.log" >&2
    exit 1
  }
  echo "   $((SECONDS - start)) s: $(tail -1 "$out.log")" >&2
}

for d in $DTYPES; do run stories260K "$STORIES" "$d" --ctx "$STORIES_CTX"; done
for d in $DTYPES; do
  run smollm2-135m "$SMOL" "$d" --ctx "$SMOL_CTX" --max-windows "$SMOL_WINDOWS"
done
for p in deepseek-v2-tiny deepseek-v3-tiny; do
  [[ -f "$OUT_DIR/$p.gguf" ]] || "$KVSERVE" mkmodel --preset "$p" --seed 0 -o "$OUT_DIR/$p.gguf" >&2
  for d in $DTYPES; do
    run "$p" "$OUT_DIR/$p.gguf" "$d" --ctx "$SMOL_CTX" --max-windows "$SMOL_WINDOWS"
  done
done

python3 - "$OUT_DIR" "$DTYPES" "$THREADS" >"$OUT_DIR/kv_quant_eval.md" <<'EOF'
import json, sys
out_dir, dtypes, threads = sys.argv[1], sys.argv[2].split(), sys.argv[3]

def load(name, dtype):
    with open(f"{out_dir}/{name}_{dtype}.json") as f:
        return json.load(f)

def pm(value, err, fmt):
    return f"{format(value, fmt)} ± {format(err, fmt)}"

def table(name, title, with_ppl):
    rows = [load(name, d) for d in dtypes]
    r0 = rows[0]
    print(f"### {title}\n")
    print(f"`{r0['model'].split('/')[-1]}`, text `{r0['text_file'].split('/')[-1]}`: "
          f"{r0['num_windows']} windows of {r0['ctx']} tokens, {r0['num_scored_tokens']} "
          f"scored tokens (second half of each window); {threads} threads.\n")
    if with_ppl:
        print("| KV dtype | bytes/token | perplexity | ln(PPL/PPL_f32) | mean KLD | median KLD "
              "| p99 KLD | max KLD | top-1 agreement |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        print(f"| f32 (base) | {r0['base_kv_bytes_per_token']} | {r0['base_perplexity']:.4f} "
              f"| 0 | 0 | 0 | 0 | 0 | 100 % |")
    else:
        print("| KV dtype | bytes/token | mean KLD | median KLD | p99 KLD | max KLD "
              "| top-1 agreement |")
        print("|---|--:|--:|--:|--:|--:|--:|")
    for d, r in zip(dtypes, rows):
        top1 = pm(100 * r['top1_agreement'], 100 * r['top1_agreement_stderr'], ".3f") + " %"
        kld = pm(r['mean_kld'], r['kld_stderr'], ".3g")
        tail = f"{r['median_kld']:.3g} | {r['p99_kld']:.3g} | {r['max_kld']:.3g} | {top1} |"
        if with_ppl:
            print(f"| {d} | {r['kv_bytes_per_token']} "
                  f"| {pm(r['perplexity'], r['perplexity_stderr'], '.4f')} "
                  f"| {pm(r['ln_ppl_ratio'], r['ln_ppl_ratio_stderr'], '.2e')} | {kld} | {tail}")
        else:
            print(f"| {d} | {r['kv_bytes_per_token']} | {kld} | {tail}")
    clipped = {d: r['kv_clipped_values'] for d, r in zip(dtypes, rows) if r['kv_clipped_values']}
    if clipped:
        print("\nfp8 values clipped at the format's maximum: " +
              ", ".join(f"{d} {n}" for d, n in clipped.items()))
    print()

table("stories260K", "stories260K (trained, f32 weights)", True)
table("smollm2-135m", "synthetic smollm2-135m (random Q8_0 weights)", False)
table("deepseek-v2-tiny", "synthetic deepseek-v2-tiny (MLA latent cache, random f32 weights)", False)
table("deepseek-v3-tiny", "synthetic deepseek-v3-tiny (MLA latent cache, random f32 weights)", False)
EOF
cat "$OUT_DIR/kv_quant_eval.md"
