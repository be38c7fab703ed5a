#!/usr/bin/env bash
# Fetches the ggml source (the llama.cpp v0.4.0 release carried by the npm
# package node-llama-cpp@3.21.1), checks its sha256, and clones it into
# .deps/llama.cpp. Idempotent: does nothing when the tree is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PKG="node-llama-cpp@3.21.1"
TARBALL="node-llama-cpp-3.21.1.tgz"
SHA256="7a231d6bafa14142a1cbed9893d4ec5bc6041b2a5f5939a623accaab4203c11f"
DEST=".deps/llama.cpp"

if [ -f "$DEST/ggml/CMakeLists.txt" ]; then
  exit 0
fi

mkdir -p .deps
work=$(mktemp -d .deps/fetch.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "setup: fetching $PKG from the npm registry"
(cd "$work" && npm pack "$PKG" --silent >/dev/null)
echo "$SHA256  $work/$TARBALL" | sha256sum -c --quiet -
tar -xzf "$work/$TARBALL" -C "$work" package/llama/gitRelease.bundle
rm -rf "$DEST"
git clone -q "$work/package/llama/gitRelease.bundle" "$DEST" 2>/dev/null
echo "setup: ggml source ready in $DEST"
