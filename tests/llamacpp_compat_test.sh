#!/usr/bin/env bash
# Cross-check against the real llama.cpp (tests/llamacpp/compat_check.mjs): GGUF files written by
# `kvserve convert` / `kvserve mkmodel` must load in llama.cpp with the right metadata, tokenize
# the same, and give the same greedy tokens as kvserve (and as greedy_reference.json); embedding
# models (bert) the same embeddings as `kvserve embed`.
# Usage: llamacpp_compat_test.sh KVSERVE_BINARY ASSETS_DIR WORK_DIR [LLAMACPP_QUANTIZE_BINARY]
# (the last runs llama.cpp's own quantizer, tests/llamacpp/llamacpp_quantize.c; without it the
# files made by llama.cpp's quantizer are not checked).
# Exit: 0 pass, 1 fail, 77 skip (llama.cpp not installed: run scripts/setup_llamacpp.sh; or
# ../shared/assets absent); under KVSERVE_REQUIRE_ASSETS=1 (CI) a missing dependency is a
# failure (1) instead (tests/test_dependency.sh). KVSERVE_LLAMACPP_QWEN=1 adds qwen2.5-0.5b q8_0
# (~25 s, ~550 MB).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kvserve="${1:?kvserve binary}"; assets="${2:?assets dir}"; work="${3:?work dir}"
quantize="${4:-}"

source "$here/test_dependency.sh"
[[ -x "$kvserve" ]] || { echo "FAIL: kvserve binary not found: $kvserve"; exit 1; }
[[ -f "$assets/models/stories260K/stories260K.bin" &&
   -f "$assets/models/stories260K/greedy_reference.json" &&
   -f "$assets/tokenizers/ggml-vocab-llama-spm.gguf" ]] ||
  missing_dependency "the shared assets (stories260K and ggml-vocab-llama-spm.gguf under $assets)"
command -v node >/dev/null || missing_dependency "node (Debian package nodejs)"
[[ -d "$here/llamacpp/node_modules/node-llama-cpp" &&
   -d "$here/llamacpp/node_modules/@node-llama-cpp/linux-x64" ]] ||
  missing_dependency "the llama.cpp reference in $here/llamacpp/node_modules (run scripts/setup_llamacpp.sh)"

rm -rf "$work" && mkdir -p "$work"
extra=()
[[ "${KVSERVE_LLAMACPP_QWEN:-0}" == 1 ]] && extra+=(--qwen)
[[ -n "$quantize" ]] && extra+=(--quantize "$quantize")
node "$here/llamacpp/compat_check.mjs" --kvserve "$kvserve" --assets "$assets" \
  --workdir "$work" "${extra[@]}"
rc=$?
rm -rf "$work"
exit $rc
