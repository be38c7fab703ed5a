#!/usr/bin/env bash
# Saves screenshots of graft's web page after a scripted session (chat with
# adapters selected, the adapters page, a training job mid-run and done, the
# status page, the chat on a narrow window), on a tiny test model, using the
# same headless chromium as the browser tests.
#
#   scripts/screenshots.sh [OUT_DIR]     (default: build/screenshots)
#
# Needs `./scripts/setup.sh` and a built graft (make build); BUILD=dir picks
# another build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=$(realpath -m "${1:-$BUILD/screenshots}")
if [ ! -x "$BUILD/bin/graft" ]; then
  echo "screenshots: $BUILD/bin/graft is missing: run make build first" >&2
  exit 1
fi
cd tests/e2e
GRAFT_BIN=$(realpath "../../$BUILD/bin/graft") \
GRAFT_BUNDLE_DIR=$(realpath ../../.deps/llama.cpp) \
GRAFT_E2E_DIR=$(realpath -m "../../$BUILD/test-models/screenshots") \
  node screenshots.mjs "$OUT"
