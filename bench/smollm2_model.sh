# Sourced by the benchmark scripts: smollm2_q8_model KVSERVE_BINARY prints the path of the
# synthetic smollm2-135m Q8_0 GGUF (random weights, seed 0), making it once into
# build/bench-models (run from the repository root).
smollm2_q8_model() {
  local model=build/bench-models/smollm2-135m-q8_0.gguf
  mkdir -p build/bench-models
  if [[ ! -s "$model" ]]; then
    "$1" mkmodel --preset smollm2-135m --dtype q8_0 --seed 0 -o "$model.tmp" >&2 &&
      mv "$model.tmp" "$model"
  fi
  echo "$model"
}
