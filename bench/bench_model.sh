# Sourced by the benchmark scripts (run from the repository root):
#   bench_model KVSERVE_BINARY PRESET DTYPE [DIR]
# prints the path of the synthetic GGUF `kvserve mkmodel --preset PRESET --dtype DTYPE --seed 0`
# (random weights), making it once into DIR (default build/bench-models); mkmodel's progress
# goes to stderr. A file cut short by an interrupted run is never left under the final name.
bench_model() {
  local kvserve=$1 preset=$2 dtype=$3 dir=${4:-build/bench-models}
  local model="$dir/$preset-$dtype.gguf"
  mkdir -p "$dir"
  if [[ ! -s "$model" ]]; then
    echo "making $model" >&2
    "$kvserve" mkmodel --preset "$preset" --dtype "$dtype" --seed 0 -o "$model.tmp" >&2 &&
      mv "$model.tmp" "$model" || return 1
  fi
  echo "$model"
}

# The synthetic smollm2-135m Q8_0 most benchmarks use.
smollm2_q8_model() { bench_model "$1" smollm2-135m q8_0; }
