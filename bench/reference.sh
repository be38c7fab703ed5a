#!/usr/bin/env bash
# llama.cpp's own speed on the 1B-shaped Q4_0 benchmark model (the reference
# graft is held to): llama-bench pp512 and tg128 on all cores.
# Env: GRAFT, LLAMA_BIN, MODEL, THREADS, REPS (default 3).
set -euo pipefail
source "$(dirname "$0")/common.sh"
echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS"
"$LLAMA_BIN/llama-bench" -m "$MODEL" -p 512 -n 128 -t "$THREADS" -r "${REPS:-3}" -o md 2>/dev/null
