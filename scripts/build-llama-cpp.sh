#!/usr/bin/env bash
# Builds llama.cpp's reference tools (llama-cli, llama-bench, llama-batched-bench,
# llama-server, llama-tokenize, llama-quantize, ...) from the same source tree graft's ggml
# comes from, into .llama-cpp/. Used by the parity and benchmark scripts;
# never by the tests. Prints the folder holding the binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-ggml.sh >&2
SRC=.deps/llama.cpp
OUT=.llama-cpp
TOOLS=(llama-cli llama-completion llama-bench llama-batched-bench llama-server llama-tokenize llama-simple
  llama-quantize)
if [ ! -f "$OUT/CMakeCache.txt" ]; then
  cmake -S "$SRC" -B "$OUT" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DGGML_NATIVE=ON -DGGML_CCACHE=ON >&2
fi
cmake --build "$OUT" -j "$(nproc)" --target "${TOOLS[@]}" >&2
echo "$PWD/$OUT/bin"
