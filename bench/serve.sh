#!/usr/bin/env bash
# graft serve against llama-server on the same 1B-shaped Q4_0 model, the same
# threads and the same concurrent streaming client with the same fixed prompts
# (bench/serve_client.mjs); prints a side-by-side table. Each server runs
# alone; every round starts both afresh, odd rounds graft first, even rounds
# llama-server first. TTFT and latency percentiles are over every request of
# every round; tok/s is the median round (decode: the median run).
# Env: GRAFT, LLAMA_BIN, MODEL, THREADS (see bench/common.sh), PARALLEL
# (default 8), CTX (per request, default 2048), ROUNDS (default 2),
# SCENARIOS (default: all), GEN_TOKENS (tokens every request generates,
# default: the scenario's, see bench/serve_client.mjs), OUT (result folder),
# GRAFT_ARGS (more options for graft serve, e.g. "--compute-nice idle").
set -euo pipefail
source "$(dirname "$0")/common.sh"

PARALLEL=${PARALLEL:-8}
CTX=${CTX:-2048}
ROUNDS=${ROUNDS:-2}
SCENARIOS=${SCENARIOS:-single short4 long4 shared4 health8}
OUT=${OUT:-$(mktemp -d /tmp/graft-serve-bench.XXXXXX)}
PORT=${PORT:-18231}
mkdir -p "$OUT"

echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, parallel: $PARALLEL, ctx per request: $CTX," \
  "rounds: $ROUNDS, generated tokens: ${GEN_TOKENS:-per scenario}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "graft: $(git -C "$ROOT" rev-parse --short HEAD), GRAFT_ARGS: '${GRAFT_ARGS:-}';" \
  "llama-server: $("$LLAMA_BIN/llama-server" --version 2>&1 | grep -m1 version || echo '?')"

run_scenarios() {  # NAME ROUND STATS_PATH
  for s in $SCENARIOS; do
    echo "  round $2: $1: $s" >&2
    node bench/serve_client.mjs --url "http://127.0.0.1:$PORT" --scenario "$s" --round "$2" --stats-path "$3" \
      ${GEN_TOKENS:+--gen-tokens "$GEN_TOKENS"} >"$OUT/$1-$s.$2.json"
  done
}

run_graft() {
  # shellcheck disable=SC2086  # GRAFT_ARGS is a list of options
  "$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" --alias bench \
    ${GRAFT_ARGS:-} >"$OUT/graft.$1.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "$OUT/graft.$1.log"
  run_scenarios graft "$1" /stats
  stop_server
}

# llama-server has no /stats; /slots (the state of every slot) is its nearest.
run_llama() {
  "$LLAMA_BIN/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CTX * PARALLEL)) -np "$PARALLEL" \
    --alias bench >"$OUT/llama.$1.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "$OUT/llama.$1.log"
  run_scenarios llama "$1" /slots
  stop_server
}

for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then run_graft "$round"; run_llama "$round"; else run_llama "$round"; run_graft "$round"; fi
done

OUT="$OUT" node bench/serve_report.mjs
