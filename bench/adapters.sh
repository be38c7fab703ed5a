#!/usr/bin/env bash
# Adapters under load: graft serve against llama-server on the 1B-shaped Q4_0
# model, the same threads, the same STREAMS concurrent streamed completions of
# TOKENS tokens each, the same fixed prompts (bench/adapters_client.mjs):
#   base       no adapter. graft: before any adapter is loaded; llama-server:
#              started without --lora (a request that does not name its lora
#              scales gets every --lora adapter at scale 1, so a server with
#              adapters has no "no lora field" base)
#   shared     every stream on one rank-RANK F16 adapter (all 7 projections)
#   different  stream i on adapter i, STREAMS different F16 adapters; and, for
#              graft, the same with F32 and with BF16 adapters. llama-server
#              batches only requests with the same adapters and scales, so its
#              different-adapter figure is serialized by design.
# Also: the time to load each adapter into graft (POST /v1/adapters, the whole
# HTTP call as the client sees it; llama-server loads its adapters at start-up
# only) and the memory the adapters cost: resident memory after the adapter
# runs minus after the base run (graft: the same process, before and after
# loading them; llama-server: the server with --lora minus the one without).
# Each round starts every server afresh (graft once per dtype); odd rounds run
# graft first, even rounds llama-server. tok/s is the best round; TTFT p50 and
# p95 are over every request of every round.
# Targets (issue 7): graft's different F16 adapters >= 0.8x its base, and above
# llama-server's different adapters; loading an F16 adapter < 100 ms.
# Auto-loading (issue 16), graft only: STREAMS streams, each making PER_STREAM
# requests one after the other, rotating over ROTATE_ADAPTERS F16 adapters
# named as the request's "model": once with every adapter resident (loaded
# first, no limit) and once with --auto-load-adapters --max-loaded-adapters
# ROTATE_MAX (requests load what they name; idle adapters make room). Every
# request must succeed; reports tok/s, TTFT, loads, unloads and the most
# adapters loaded at once.
# Env: GRAFT, LLAMA_BIN, MODEL, THREADS (see bench/common.sh), STREAMS
# (default 8), TOKENS (per stream, default 64), ROUNDS (default 2), RANK
# (default 16), DTYPES (graft's adapter dtypes, default "f16 f32 bf16"; f16
# first), GRAFT_ARGS (more options for graft serve), OUT (result folder),
# CASES ("compare autoload" by default; "autoload" runs only the auto-loading
# case), ROTATE_ADAPTERS (12), ROTATE_MAX (4), PER_STREAM (3).
set -euo pipefail
source "$(dirname "$0")/common.sh"

STREAMS=${STREAMS:-8}
TOKENS=${TOKENS:-64}
ROUNDS=${ROUNDS:-2}
RANK=${RANK:-16}
DTYPES=${DTYPES:-f16 f32 bf16}
CASES=${CASES:-compare autoload}
ROTATE_ADAPTERS=${ROTATE_ADAPTERS:-12}
ROTATE_MAX=${ROTATE_MAX:-4}
PER_STREAM=${PER_STREAM:-3}
CTX=${CTX:-512}
PORT=${PORT:-18241}
OUT=${OUT:-$(mktemp -d /tmp/graft-adapters-bench.XXXXXX)}
mkdir -p "$OUT"
read -r -a dtypes <<<"$DTYPES"
[ "${dtypes[0]}" = f16 ] || { echo "DTYPES must start with f16 (got '$DTYPES')" >&2; exit 1; }


echo "graft: $(git -C "$ROOT" rev-parse --short HEAD), GRAFT_ARGS: '${GRAFT_ARGS:-}';" \
  "llama-server: $("$LLAMA_BIN/llama-server" --version 2>&1 | grep -m1 version || echo '?')"

# The adapters: STREAMS per dtype, adapter i of every dtype from the same
# seed (so the dtypes differ only in storage), in one folder per dtype.
ids=()
for i in $(seq 1 "$STREAMS"); do ids+=("a$i"); done
rotate_ids=()
for i in $(seq 1 "$ROTATE_ADAPTERS"); do rotate_ids+=("a$i"); done
case " $CASES " in *" autoload "*) [ "$ROTATE_ADAPTERS" -gt "$STREAMS" ] && ids=("${rotate_ids[@]}") ;; esac
case " $CASES " in *" compare "*) ;; *) dtypes=(f16) ;; esac  # the auto-loading case uses F16 adapters only
for dtype in "${dtypes[@]}"; do
  mkdir -p "$OUT/adapters-$dtype"
  for id in "${ids[@]}"; do
    [ -f "$OUT/adapters-$dtype/$id.gguf" ] ||
      "$GRAFT" make-test-adapter --base "$MODEL" --gguf "$OUT/adapters-$dtype/$id.gguf" --rank "$RANK" \
        --alpha $((2 * RANK)) --seed "${id#a}" --dtype "$dtype" >/dev/null
  done
done
echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, $STREAMS streams x $TOKENS tokens," \
  "rank $RANK, dtypes: ${dtypes[*]}, rounds: $ROUNDS, cases: $CASES, load: $(cut -d' ' -f1-3 /proc/loadavg)"
IDS=$(IFS=,; echo "${ids[@]:0:$STREAMS}" | tr ' ' ,)
ROTATE_IDS=$(IFS=,; echo "${rotate_ids[*]}")

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status"; }
client() {  # SERVER MODE ROUND [more options]
  node bench/adapters_client.mjs --url "http://127.0.0.1:$PORT" --server "$1" --mode "$2" --round "$3" \
    --streams "$STREAMS" --tokens "$TOKENS" "${@:4}"
}

# graft, once per dtype: base (before any adapter is loaded), loading,
# shared (f16 only), different. The table's base is the f16 server's (one run
# a round, as llama-server's); the others show the noise. Resident memory is
# read after the base run and after the adapter runs.
run_graft() {
  local round=$1 before
  for dtype in "${dtypes[@]}"; do
    echo "  round $round: graft, $dtype adapters" >&2
    # shellcheck disable=SC2086  # GRAFT_ARGS is a list of options
    "$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx "$CTX" --parallel "$STREAMS" \
      --alias bench --adapter-dir "$OUT/adapters-$dtype" ${GRAFT_ARGS:-} >"$OUT/graft-$dtype.$round.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$OUT/graft-$dtype.$round.log"
    client graft base "$round" >"$OUT/graft-base-$dtype.$round.json"
    before=$(rss_kib)
    client graft load "$round" --adapters "$IDS" >"$OUT/graft-load-$dtype.$round.json"
    if [ "$dtype" = f16 ]; then client graft shared "$round" --adapters "$IDS" >"$OUT/graft-shared.$round.json"; fi
    client graft different "$round" --adapters "$IDS" >"$OUT/graft-different-$dtype.$round.json"
    echo "{\"before_kib\": $before, \"after_kib\": $(rss_kib)}" >"$OUT/graft-rss-$dtype.$round.json"
    stop_server
  done
}

# llama-server: base on a server without --lora, then shared and different
# on one with the F16 adapters (--lora in the order of IDS). Resident memory
# is read after the base run and after the adapter runs.
run_llama() {
  local round=$1 lora=()
  for id in "${ids[@]}"; do lora+=(--lora "$OUT/adapters-f16/$id.gguf"); done
  echo "  round $round: llama-server, base" >&2
  "$LLAMA_BIN/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CTX * STREAMS)) -np "$STREAMS" \
    --alias bench >"$OUT/llama-base.$round.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "$OUT/llama-base.$round.log"
  client llama base "$round" >"$OUT/llama-base.$round.json"
  local without
  without=$(rss_kib)
  stop_server
  echo "  round $round: llama-server, f16 adapters" >&2
  "$LLAMA_BIN/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CTX * STREAMS)) -np "$STREAMS" \
    --alias bench "${lora[@]}" >"$OUT/llama-f16.$round.log" 2>&1 &
  SERVER_PID=$!
  wait_ready "$OUT/llama-f16.$round.log"
  client llama shared "$round" --adapters "$IDS" >"$OUT/llama-shared.$round.json"
  client llama different "$round" --adapters "$IDS" >"$OUT/llama-different-f16.$round.json"
  echo "{\"before_kib\": $without, \"after_kib\": $(rss_kib)}" >"$OUT/llama-rss-f16.$round.json"
  stop_server
}

# Auto-loading: the rotation with every adapter resident, then with
# --auto-load-adapters --max-loaded-adapters ROTATE_MAX.
run_autoload() {
  local round=$1 setup
  for setup in resident limited; do
    echo "  round $round: graft, rotating over $ROTATE_ADAPTERS adapters, $setup" >&2
    local extra=(--auto-load-adapters)
    [ "$setup" = limited ] && extra+=(--max-loaded-adapters "$ROTATE_MAX")
    # shellcheck disable=SC2086  # GRAFT_ARGS is a list of options
    "$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx "$CTX" --parallel "$STREAMS" \
      --alias bench --adapter-dir "$OUT/adapters-f16" "${extra[@]}" ${GRAFT_ARGS:-} \
      >"$OUT/graft-rotate-$setup.$round.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$OUT/graft-rotate-$setup.$round.log"
    if [ "$setup" = resident ]; then client graft load "$round" --adapters "$ROTATE_IDS" >/dev/null; fi
    client graft rotate "$round" --adapters "$ROTATE_IDS" --per-stream "$PER_STREAM" \
      >"$OUT/graft-rotate-$setup.$round.json"
    stop_server
  done
}

for round in $(seq 1 "$ROUNDS"); do
  case " $CASES " in *" compare "*)
    if [ $((round % 2)) -eq 1 ]; then run_graft "$round"; run_llama "$round"; else run_llama "$round"; run_graft "$round"; fi ;;
  esac
  case " $CASES " in *" autoload "*) run_autoload "$round" ;; esac
done

export OUT RANK STREAMS TOKENS DTYPES ROTATE_ADAPTERS ROTATE_MAX PER_STREAM
case " $CASES " in *" compare "*) node bench/adapters_report.mjs ;; esac
case " $CASES " in *" autoload "*) node bench/adapters_autoload_report.mjs ;; esac
