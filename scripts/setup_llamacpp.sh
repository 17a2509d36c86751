#!/usr/bin/env bash
# Installs the test-only llama.cpp reference (node-llama-cpp, pinned in tests/llamacpp/package.json
# and package-lock.json, with only its prebuilt linux-x64 CPU binaries: ~85 MB, ~10-20 s) into
# tests/llamacpp/node_modules for tests/llamacpp_compat_test.sh.
# Idempotent: does nothing when node_modules already matches package-lock.json.
# Never fails the build: without node/npm, on another platform, or when the registry is
# unreachable it prints why and exits 0, and the compat test then reports SKIP.
# Set KVSERVE_SKIP_LLAMACPP=1 to skip the install.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/llamacpp" || exit 0

say() { echo "setup_llamacpp: $*"; }

if [[ "${KVSERVE_SKIP_LLAMACPP:-0}" == 1 ]]; then
  say "KVSERVE_SKIP_LLAMACPP=1: not installing; the llama.cpp compat test will skip"; exit 0
fi
if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
  say "only linux-x64 is wired up (this is $(uname -s)/$(uname -m)); the llama.cpp compat test will skip"
  exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  say "node/npm not found; the llama.cpp compat test will skip"; exit 0
fi
stamp=node_modules/.kvserve-lock.sha256
want="$(sha256sum package.json package-lock.json | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d node_modules/@node-llama-cpp/linux-x64 ]]; then
  say "up to date ($(du -sh node_modules | cut -f1))"; exit 0
fi
say "installing node-llama-cpp (llama.cpp prebuilt CPU binaries for linux-x64) ..."
start=$SECONDS
# --omit=optional drops the other platforms' binaries (~640 MB); the linux-x64 package is a
# direct dependency. --ignore-scripts: never download or compile llama.cpp at install time.
# npm ci refuses this lock (the registry lacks some other-platform optional packages, so they
# are not in the lock); npm install follows the lock just the same.
if ! npm install --omit=optional --ignore-scripts --no-audit --no-fund --no-save \
    --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 --fetch-timeout=30000 >npm-install.log 2>&1; then
  say "npm install failed (registry unreachable?); the llama.cpp compat test will skip. Last lines:"
  tail -n 5 npm-install.log | sed 's/^/  /'
  rm -rf node_modules
  exit 0
fi
rm -f npm-install.log
echo "$want" >"$stamp"
say "installed in $((SECONDS - start)) s ($(du -sh node_modules | cut -f1))"
