#!/usr/bin/env bash
# Installs the test-only llama.cpp reference (node-llama-cpp, pinned in tests/llamacpp/package.json
# and package-lock.json, with only its prebuilt linux-x64 CPU binaries: ~85 MB, ~10-20 s) into
# tests/llamacpp/node_modules for tests/llamacpp_compat_test.sh.
# Idempotent: does nothing when node_modules already matches package-lock.json.
# Outside CI it never fails the build: without node/npm, on another platform, or when the
# registry is unreachable it prints why and exits 0, and the compat test then reports SKIP.
# In CI (CI=true, or KVSERVE_REQUIRE_ASSETS=1 as .ci/run sets), where the cross-check must run,
# each of those is an error: it prints why and exits 1.
# Set KVSERVE_SKIP_LLAMACPP=1 to skip the install (outside CI).
set -uo pipefail

say() { echo "setup_llamacpp: $*"; }
required=0
if [[ -n "${KVSERVE_REQUIRE_ASSETS:-}" && "${KVSERVE_REQUIRE_ASSETS}" != 0 ]] ||
   [[ -n "${CI:-}" && "${CI}" != false && "${CI}" != 0 ]]; then
  required=1
fi
# give_up WHY: the llama.cpp reference cannot be installed.
give_up() {
  if ((required)); then
    say "error: $* (CI / KVSERVE_REQUIRE_ASSETS: the llama.cpp cross-check must run)" >&2; exit 1
  fi
  say "$*; the llama.cpp compat test will skip"; exit 0
}
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/llamacpp" || give_up "no tests/llamacpp folder"

if [[ "${KVSERVE_SKIP_LLAMACPP:-0}" == 1 ]]; then
  give_up "KVSERVE_SKIP_LLAMACPP=1: not installing"
fi
if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
  give_up "only linux-x64 is wired up (this is $(uname -s)/$(uname -m))"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  give_up "node/npm not found"
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
  say "npm install failed (registry unreachable?). Last lines:"
  tail -n 5 npm-install.log | sed 's/^/  /'
  rm -rf node_modules
  give_up "npm install failed"
fi
rm -f npm-install.log
echo "$want" >"$stamp"
say "installed in $((SECONDS - start)) s ($(du -sh node_modules | cut -f1))"
