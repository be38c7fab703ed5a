#!/usr/bin/env bash
# Sets up everything graft needs on Debian 12 (run as root, idempotent):
# Debian packages, npm packages for the end-to-end tests, and the ggml source.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake git ccache pkg-config
  libboost-dev libboost-system-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libpcre2-dev libsqlite3-dev
  libgtest-dev libgmock-dev nodejs npm
  clang-format
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from outside Debian's archive on some machines: accept any working node.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

scripts/fetch-ggml.sh

if [ -f tests/e2e/package.json ] && [ ! -d tests/e2e/node_modules ]; then
  echo "setup: installing npm packages for the end-to-end tests"
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
