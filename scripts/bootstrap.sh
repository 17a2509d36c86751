#!/usr/bin/env bash
# Installs every Debian package that building, running and testing kvserve needs.
# Idempotent: does nothing when everything is present; runs `apt-get update` at most once.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  clang libclang-rt-14-dev            # libFuzzer target and sanitizers
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev                  # JSON
  libcli11-dev                        # command-line parsing
  libpcre2-dev                        # Unicode regexes for BPE pre-tokenizers
  libboost-dev                        # Beast + Asio: the HTTP server of `kvserve serve`
  libcpp-httplib-dev                  # HTTP client (`bench serve`, tests)
  prometheus                          # promtool validates /metrics in tests
  python3
  python3-jinja2                      # reference renderer for the chat template tests
  libhnswlib-dev                      # approximate nearest neighbours: the semantic cache
  libxxhash-dev                       # 128-bit hashes of semantic-cache scopes and keys
  libzmq3-dev libmsgpack-cxx-dev      # KV events (ZeroMQ PUB, msgpack) for cache-aware routers
  nginx-light                         # the scale-out recipe's proxy, tested (docs/scale-out.md)
  libhiredis-dev redis-server         # the shared KV tier in Redis (--kv-redis), tested
  libtinyxml2-dev                     # XML parser: the SVG plots are checked in tests
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
