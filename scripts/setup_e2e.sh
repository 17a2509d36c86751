#!/usr/bin/env bash
# Installs what the end-to-end server tests need (tests/e2e/run_e2e.sh): node + npm and curl
# (Debian packages, when missing) and the npm packages pinned in tests/e2e/package.json and
# package-lock.json (the official `openai` client, the `ajv` JSON Schema validator and
# `ajv-formats`) into tests/e2e/node_modules (~14 MB).
# Idempotent: does nothing when node_modules already matches package-lock.json.
# Exits non-zero when it cannot install (the e2e test then fails, unless KVSERVE_SKIP_E2E=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e"
say() { echo "setup_e2e: $*"; }
if [[ "${KVSERVE_SKIP_E2E:-0}" == 1 ]]; then say "KVSERVE_SKIP_E2E=1: skipping"; exit 0; fi

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v curl >/dev/null || missing+=(curl)
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=node_modules/.kvserve-lock.sha256
want="$(sha256sum package.json package-lock.json | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d node_modules/openai && -d node_modules/ajv-formats ]]; then
  say "up to date (openai $(node -p 'require("./node_modules/openai/package.json").version'))"; exit 0
fi
say "installing the npm packages (openai, ajv, ajv-formats) ..."
npm ci --no-audit --no-fund --loglevel=error
echo "$want" >"$stamp"
say "installed openai $(node -p 'require("./node_modules/openai/package.json").version')"
