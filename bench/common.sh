# Shared by the bench scripts: the graft binary, llama.cpp's tools and the
# 1B-shaped Q4_0 benchmark model (random weights, llama-bpe vocab).
# BENCH_ARCH=qwen35 picks a ~1B Qwen3.5-shaped hybrid instead (12 gated
# delta-net layers, 4 of gated attention; 1.07B parameters besides the tied
# embedding), in Qwen3.5-4B's proportions; BENCH_ARCH=gemma3, gemma4 or
# minicpm a ~1B model of that family (shapes below).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [ -z "${GRAFT:-}" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target graft >/dev/null
  GRAFT=$ROOT/build/bin/graft
fi
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build-llama-cpp.sh)}
THREADS=${THREADS:-$(nproc)}
BENCH_ARCH=${BENCH_ARCH:-llama}
MODEL=${MODEL:-$ROOT/.cache/bench/$BENCH_ARCH-1b-q4_0.gguf}
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  echo "making the 1B-shaped Q4_0 model $MODEL ..." >&2
  GEMMA_VOCAB=$ROOT/.deps/llama.cpp/models/ggml-vocab-gemma-4.gguf
  if [ "$BENCH_ARCH" = qwen35 ]; then
    "$GRAFT" make-test-model "$MODEL" --arch qwen35 --embd 2048 --layers 16 --heads 8 --kv-heads 2 \
      --head-dim 256 --ffn 6144 --ssm-head-dim 128 --ssm-k-heads 16 --ssm-v-heads 32 --tied \
      --ctx 8192 --type q4_0 --name "graft-bench-qwen35-1b" >/dev/null
  elif [ "$BENCH_ARCH" = gemma3 ]; then
    # Gemma 3 1B: 26 layers, 5 local (512-position window) to 1 global, one
    # key/value head, 256-wide heads, the 262k vocabulary, tied.
    "$GRAFT" make-test-model "$MODEL" --arch gemma3 --vocab "$GEMMA_VOCAB" --embd 1152 --layers 26 --heads 4 \
      --kv-heads 1 --head-dim 256 --ffn 6912 --sliding-window 512 --sliding-window-pattern 6 \
      --rope-base 1000000 --tied --ctx 8192 --type q4_0 --name "graft-bench-gemma3-1b" >/dev/null
  elif [ "$BENCH_ARCH" = gemma4 ]; then
    # Gemma 4 E2B's layout at ~1B of layer weights: 1536 wide, 25 layers,
    # 4 local (512-position window, 256-wide heads) to 1 global (512-wide
    # heads, partial rope), one key/value head, the last 10 layers sharing
    # earlier layers' keys and values with a twice-as-wide FFN, 256-wide
    # per-layer inputs, the 262k vocabulary, tied, logits softcapped at 30.
    "$GRAFT" make-test-model "$MODEL" --arch gemma4 --vocab "$GEMMA_VOCAB" --embd 1536 --layers 25 --heads 8 \
      --kv-heads 1 --head-dim 512 --head-dim-local 256 --ffn 4096 --sliding-window 512 \
      --sliding-window-pattern 5 --shared-kv-layers 10 --per-layer-embd 256 --rope-base 1000000 \
      --logit-softcap 30 --tied --ctx 8192 --type q4_0 --name "graft-bench-gemma4-1b" >/dev/null
  elif [ "$BENCH_ARCH" = minicpm ]; then
    # MiniCPM 1B: 52 layers 1536 wide, 24 heads (8 of keys and values), 3840
    # FFN, tied, with its embedding, residual and logit scalings.
    "$GRAFT" make-test-model "$MODEL" --arch minicpm --embd 1536 --layers 52 --heads 24 --kv-heads 8 \
      --ffn 3840 --tied --ctx 8192 --type q4_0 --name "graft-bench-minicpm-1b" >/dev/null
  else
    "$GRAFT" make-test-model "$MODEL" --arch llama --embd 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
      --ctx 8192 --type q4_0 --name "graft-bench-1b" >/dev/null
  fi
fi

# Servers the scripts start: SERVER_PID is the one running (stopped on exit),
# wait_ready LOG waits until it answers /health on $PORT.
SERVER_PID=

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
trap stop_server EXIT

wait_ready() {
  for _ in $(seq 1 900); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server exited; see $1" >&2; return 1; fi
    sleep 0.2
  done
  echo "server did not get ready; see $1" >&2
  return 1
}
