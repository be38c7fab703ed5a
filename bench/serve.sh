#!/usr/bin/env bash
# graft serve against llama-server on the same 1B-shaped Q4_0 model, the same
# threads and the same concurrent streaming client (bench/serve_client.mjs);
# prints a side-by-side table. Each server runs alone (one after the other).
# Env: GRAFT, LLAMA_BIN, MODEL, THREADS (see bench/common.sh), PARALLEL
# (default 8), CTX (per request, default 2048), ROUNDS (default 2),
# SCENARIOS (default: all), OUT (result folder), GRAFT_ARGS (more options for
# graft serve, e.g. "--compute-nice idle").
set -euo pipefail
source "$(dirname "$0")/common.sh"

PARALLEL=${PARALLEL:-8}
CTX=${CTX:-2048}
ROUNDS=${ROUNDS:-2}
SCENARIOS=${SCENARIOS:-single short4 long4 shared4 health8}
OUT=${OUT:-$(mktemp -d /tmp/graft-serve-bench.XXXXXX)}
PORT=${PORT:-18231}
mkdir -p "$OUT"

run_scenarios() {
  local name=$1
  for s in $SCENARIOS; do
    echo "  $name: $s" >&2
    node bench/serve_client.mjs --url "http://127.0.0.1:$PORT" --scenario "$s" --rounds "$ROUNDS" > "$OUT/$name-$s.json"
  done
}

echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, parallel: $PARALLEL, ctx per request: $CTX" >&2

# shellcheck disable=SC2086  # GRAFT_ARGS is a list of options
"$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" --alias bench \
  ${GRAFT_ARGS:-} > "$OUT/graft.log" 2>&1 &
SERVER_PID=$!
wait_ready "$OUT/graft.log"
run_scenarios graft
stop_server

"$LLAMA_BIN/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CTX * PARALLEL)) -np "$PARALLEL" \
  --alias bench > "$OUT/llama.log" 2>&1 &
SERVER_PID=$!
wait_ready "$OUT/llama.log"
run_scenarios llama
stop_server

OUT="$OUT" ROUNDS="$ROUNDS" node --input-type=module - <<'EOF'
import { readFileSync, existsSync } from 'node:fs';
const out = process.env.OUT;
const load = (who, s) => {
  const f = `${out}/${who}-${s}.json`;
  return existsSync(f) ? JSON.parse(readFileSync(f, 'utf8')) : null;
};
const rows = [
  ['1 client: decode tok/s', 'single', 'decode_tps', 'higher', 0.97],
  ['4 clients, short prompts: aggregate tok/s', 'short4', 'aggregate_tps', 'higher', 1.0],
  ['4 clients, short prompts: TTFT p50 ms', 'short4', 'ttft_p50_ms', 'lower', 1.0],
  ['4 clients, ~300-token prompts: TTFT p50 ms', 'long4', 'ttft_p50_ms', 'lower', 0.5],
  ['4 clients, ~300-token prompts sharing 250: TTFT p50 ms', 'shared4', 'ttft_p50_ms', 'lower', null],
  ['/health p99 ms while 8 streams generate', 'health8', 'health_p99_ms', 'abs', 20],
  ['8 streams: aggregate tok/s', 'health8', 'aggregate_tps', 'higher', null],
];
const fmt = (x) => (x === null || x === undefined ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));
const lines = [
  '| metric | graft | llama-server | graft / llama | target | met |',
  '| --- | ---: | ---: | ---: | --- | --- |',
];
for (const [label, s, key, dir, target] of rows) {
  const g = load('graft', s)?.[key];
  const l = load('llama', s)?.[key];
  if (g === undefined && l === undefined) continue;
  const ratio = g && l ? g / l : null;
  let goal = '';
  let met = '';
  if (target !== null && dir === 'abs') {
    goal = `graft <= ${target} ms`;
    met = g <= target ? 'yes' : 'NO';
  } else if (target !== null) {
    goal = dir === 'higher' ? `>= ${target}x` : `<= ${target}x`;
    met = ratio === null ? '?' : (dir === 'higher' ? ratio >= target : ratio <= target) ? 'yes' : 'NO';
  }
  lines.push(`| ${label} | ${fmt(g)} | ${fmt(l)} | ${ratio === null ? '-' : ratio.toFixed(2)} | ${goal} | ${met} |`);
}
console.log(lines.join('\n'));
for (const s of ['long4', 'shared4', 'short4']) {
  const g = load('graft', s), l = load('llama', s);
  if (g && l) console.log(`\n${s} TTFTs ms (all requests): graft ${g.ttft_ms.join(' ')} | llama-server ${l.ttft_ms.join(' ')}` +
    (g.prompt_tokens?.length ? ` | prompt tokens ${Math.min(...g.prompt_tokens)}-${Math.max(...g.prompt_tokens)}` : ''));
}
console.log(`\nTTFT p50: nearest-rank median over ${process.env.ROUNDS ?? 2} rounds of 4 simultaneous requests. Results: ${out}`);
EOF
