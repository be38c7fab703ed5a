#!/usr/bin/env bash
# Sets up everything graft needs on Debian 12 (run as root, idempotent):
# Debian packages, npm packages (the web page's build, the end-to-end and
# browser tests), and the ggml source.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake git ccache pkg-config
  libboost-dev libboost-system-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libpcre2-dev libsqlite3-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev nodejs npm
  clang-format
  chromium  # the browser tests of the web page drive it headless
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

# npm packages, exactly as each lockfile pins them; installed again when the
# lockfile changed since the last install (a copy of it is kept beside them).
npm_install() {
  local dir=$1 what=$2
  [ -f "$dir/package-lock.json" ] || return 0
  if [ -d "$dir/node_modules" ] && cmp -s "$dir/package-lock.json" "$dir/node_modules/.graft-installed-lock.json"; then
    return 0
  fi
  echo "setup: installing npm packages for $what"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$dir/package-lock.json" "$dir/node_modules/.graft-installed-lock.json"
}
npm_install web "the web page"
npm_install tests/e2e "the end-to-end and browser tests"
