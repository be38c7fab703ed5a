# Shared by the bench scripts: the graft binary, llama.cpp's tools and the
# 1B-shaped Q4_0 benchmark model (random weights, llama-bpe vocab).
# BENCH_ARCH=qwen35 picks a ~1B Qwen3.5-shaped hybrid instead (12 gated
# delta-net layers, 4 of gated attention; 1.07B parameters besides the tied
# embedding), in Qwen3.5-4B's proportions.
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
  if [ "$BENCH_ARCH" = qwen35 ]; then
    "$GRAFT" make-test-model "$MODEL" --arch qwen35 --embd 2048 --layers 16 --heads 8 --kv-heads 2 \
      --head-dim 256 --ffn 6144 --ssm-head-dim 128 --ssm-k-heads 16 --ssm-v-heads 32 --tied \
      --ctx 8192 --type q4_0 --name "graft-bench-qwen35-1b" >/dev/null
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
