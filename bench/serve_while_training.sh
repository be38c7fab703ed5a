#!/usr/bin/env bash
# Serving while a training job runs: graft serve on the 1B-shaped Q4_0 model,
# the same 4 concurrent streaming clients with the same fixed prompts
# (bench/serve_client.mjs: short4, and health8 for /health while 8 streams
# generate), measured in three set-ups that differ only in the training job:
#   idle      no job
#   train     a LoRA job on the served model running (--train-nice, default 19)
#   train-n0  the same job with --train-nice 0 (training at serving's priority)
# Every round starts each set-up afresh with an empty data folder; the order of
# the set-ups rotates every round. The job is started and its first step
# reported before the clients start, so the clients run against a trainer
# that is computing. Percentiles are over every request of every round;
# tok/s is the median round.
# Env: GRAFT, MODEL, THREADS (see bench/common.sh), TRAIN_THREADS (default:
# THREADS), ROUNDS (default 2), GEN_TOKENS (tokens per request, default 64),
# SETUPS (default "idle train train-n0"), OUT (result folder), GRAFT_ARGS.
set -euo pipefail
LLAMA_BIN=${LLAMA_BIN:-/nonexistent}  # not used here; common.sh only needs it set
source "$(dirname "$0")/common.sh"

TRAIN_THREADS=${TRAIN_THREADS:-$THREADS}
ROUNDS=${ROUNDS:-2}
GEN_TOKENS=${GEN_TOKENS:-64}
SETUPS=${SETUPS:-idle train train-n0}
OUT=${OUT:-$(mktemp -d /tmp/graft-serve-train-bench.XXXXXX)}
PORT=${PORT:-18232}
mkdir -p "$OUT"

echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, train threads: $TRAIN_THREADS," \
  "rounds: $ROUNDS, generated tokens: $GEN_TOKENS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "graft: $(git -C "$ROOT" rev-parse --short HEAD), GRAFT_ARGS: '${GRAFT_ARGS:-}'"

# The training data: fixed chats, long enough that a step takes a while.
DATA=$OUT/train.jsonl
node -e '
  const rows = [];
  for (let i = 0; i < 64; i++) {
    const q = `Question ${i}: ` + "tell me about the river and the stone ".repeat(8);
    rows.push(JSON.stringify({ messages: [{ role: "user", content: q }, { role: "assistant", content: "An answer " + "of some length ".repeat(12) + i }] }));
  }
  require("fs").writeFileSync(process.argv[1], rows.join("\n") + "\n");
' "$DATA"

api() {  # METHOD ROUTE [curl args...]
  local method=$1 route=$2
  shift 2
  curl -sf -X "$method" "http://127.0.0.1:$PORT$route" "$@"
}

# Uploads the data, starts a long job, waits until its first step is reported.
start_job() {
  local file job
  file=$(api POST /v1/files -F purpose=fine-tune -F "file=@$DATA" | node -pe 'JSON.parse(require("fs").readFileSync(0)).id')
  job=$(api POST /v1/fine_tuning/jobs -H 'content-type: application/json' \
    -d "{\"model\":\"bench\",\"training_file\":\"$file\",\"hyperparameters\":{\"batch_size\":1},\"lora\":{\"rank\":8,\"iters\":100000,\"save_every\":0,\"val_every\":100000,\"max_seq_length\":128}}" |
    node -pe 'JSON.parse(require("fs").readFileSync(0)).id')
  for _ in $(seq 1 3000); do
    local step
    step=$(api GET "/v1/fine_tuning/jobs/$job" | node -pe 'const j = JSON.parse(require("fs").readFileSync(0)); j.status === "failed" ? "failed: " + j.error.message : (j.progress?.step ?? 0)')
    case $step in failed*) echo "the training job $step" >&2; return 1 ;; esac
    if [ "$step" -ge 1 ]; then echo "$job"; return 0; fi
    sleep 0.2
  done
  echo "the training job reported no step" >&2
  return 1
}

run_setup() {  # SETUP ROUND
  local setup=$1 round=$2 nice=19 job=""
  [ "$setup" = train-n0 ] && nice=0
  local xdg=$OUT/xdg-$setup-$round
  rm -rf "$xdg"
  mkdir -p "$xdg"
  # shellcheck disable=SC2086  # GRAFT_ARGS is a list of options
  XDG_DATA_HOME=$xdg "$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx 1024 --parallel 8 \
    --alias bench --train-nice "$nice" --train-threads "$TRAIN_THREADS" ${GRAFT_ARGS:-} >"$OUT/graft.$setup.$round.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "$OUT/graft.$setup.$round.log"
  if [ "$setup" != idle ]; then
    echo "  round $round: $setup: starting the training job" >&2
    job=$(start_job)
  fi
  for s in short4 health8; do
    echo "  round $round: $setup: $s" >&2
    node bench/serve_client.mjs --url "http://127.0.0.1:$PORT" --scenario "$s" --round "$round" \
      --gen-tokens "$GEN_TOKENS" >"$OUT/$setup-$s.$round.json"
  done
  if [ -n "$job" ]; then
    # Still training at the end: the figures were taken against a live job.
    api GET "/v1/fine_tuning/jobs/$job" | node -e '
      const j = JSON.parse(require("fs").readFileSync(0));
      if (j.status !== "running") { console.error("the training job is " + j.status); process.exit(1); }
      console.error("  the job trained " + j.progress.step + " steps meanwhile");'
    api POST "/v1/fine_tuning/jobs/$job/cancel" >/dev/null
  fi
  stop_server
}

read -r -a setups <<<"$SETUPS"
for round in $(seq 1 "$ROUNDS"); do
  n=${#setups[@]}
  for i in $(seq 0 $((n - 1))); do run_setup "${setups[$(((i + round - 1) % n))]}" "$round"; done
done

OUT="$OUT" SETUPS="$SETUPS" node bench/serve_while_training_report.mjs
