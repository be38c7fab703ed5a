#!/usr/bin/env bash
# Adapters under load: graft serve against llama-server on the 1B-shaped Q4_0
# model, the same threads, the same 8 concurrent streams, one after the other:
#   8 streams, base model only
#   8 streams, each with a different rank-16 adapter on every attention and
#     MLP projection (graft: the request field "adapter"; llama-server: all 8
#     loaded with --lora and picked per request with the "lora" field)
# and the time graft takes to load each adapter (POST /v1/adapters).
# Targets (issue 7): graft's 8 adapter streams >= 0.8x its 8 base streams, and
# above llama-server's 8 adapter streams; loading an adapter < 100 ms.
# Env: GRAFT, LLAMA_BIN, MODEL, THREADS (see bench/common.sh), TOKENS (per
# stream, default 64), ROUNDS (default 2; the table shows the best), RANK
# (default 16), OUT (result folder).
set -euo pipefail
source "$(dirname "$0")/common.sh"

TOKENS=${TOKENS:-64}
ROUNDS=${ROUNDS:-2}
RANK=${RANK:-16}
STREAMS=8
CTX=${CTX:-512}
PORT=${PORT:-18241}
OUT=${OUT:-$(mktemp -d /tmp/graft-adapters-bench.XXXXXX)}
ADAPTERS=$OUT/adapters
mkdir -p "$ADAPTERS"

echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, $STREAMS streams x $TOKENS tokens," \
  "rank $RANK, rounds: $ROUNDS, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
LORA_ARGS=()
for i in $(seq 1 $STREAMS); do
  if [ ! -f "$ADAPTERS/a$i.gguf" ]; then
    "$GRAFT" make-test-adapter --base "$MODEL" --gguf "$ADAPTERS/a$i.gguf" --rank "$RANK" --alpha $((2 * RANK)) \
      --seed "$i" --dtype f16 >/dev/null
  fi
  LORA_ARGS+=(--lora "$ADAPTERS/a$i.gguf")
done

# The load: STREAMS concurrent non-streamed completions of TOKENS tokens each
# (EOS ignored), every prompt unique; "mode" picks what each request sends.
# Prints {"tps": aggregate completion tokens per second (best round), ...}.
client() {
  URL="http://127.0.0.1:$PORT" MODE=$1 STREAMS=$STREAMS TOKENS=$TOKENS ROUNDS=$ROUNDS node --input-type=module - <<'JS'
const { URL: url, MODE: mode } = process.env;
const streams = Number(process.env.STREAMS), tokens = Number(process.env.TOKENS), rounds = Number(process.env.ROUNDS);
let serial = Math.floor(Math.random() * 1e6);
function body(i) {
  const b = { model: 'bench', prompt: `Note ${serial++}: the story of stream ${i} begins`, max_tokens: tokens,
              temperature: 0, ignore_eos: true };
  if (mode === 'graft-adapters') b.adapter = `a${i + 1}`;
  if (mode === 'llama-adapters') b.lora = Array.from({ length: streams }, (_, k) => ({ id: k, scale: k === i ? 1 : 0 }));
  return JSON.stringify(b);
}
async function one(i) {
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(i) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${JSON.stringify(json)}`);
  return json.usage.completion_tokens;
}
await one(0);  // warm-up
let best = 0;
const all = [];
for (let r = 0; r < rounds; r++) {
  const t0 = performance.now();
  const counts = await Promise.all(Array.from({ length: streams }, (_, i) => one(i)));
  const seconds = (performance.now() - t0) / 1000;
  const tps = counts.reduce((a, b) => a + b, 0) / seconds;
  all.push(tps);
  best = Math.max(best, tps);
}
console.log(JSON.stringify({ tps: best, rounds: all }));
JS
}

# graft: load the 8 adapters over HTTP (timed), then both loads.
"$GRAFT" serve "$MODEL" --port "$PORT" --threads "$THREADS" --ctx "$CTX" --parallel "$STREAMS" --alias bench \
  --adapter-dir "$ADAPTERS" > "$OUT/graft.log" 2>&1 &
SERVER_PID=$!
wait_ready "$OUT/graft.log"
: > "$OUT/graft-load.jsonl"
for i in $(seq 1 $STREAMS); do
  curl -sf -X POST "http://127.0.0.1:$PORT/v1/adapters" -H 'content-type: application/json' \
    -d "{\"id\": \"a$i\"}" >> "$OUT/graft-load.jsonl"
  echo >> "$OUT/graft-load.jsonl"
done
echo "  graft: base" >&2
client graft-base > "$OUT/graft-base.json"
echo "  graft: adapters" >&2
client graft-adapters > "$OUT/graft-adapters.json"
stop_server

"$LLAMA_BIN/llama-server" -m "$MODEL" --port "$PORT" -t "$THREADS" -c $((CTX * STREAMS)) -np "$STREAMS" \
  --alias bench "${LORA_ARGS[@]}" > "$OUT/llama.log" 2>&1 &
SERVER_PID=$!
wait_ready "$OUT/llama.log"
echo "  llama-server: base" >&2
client llama-base > "$OUT/llama-base.json"
echo "  llama-server: adapters" >&2
client llama-adapters > "$OUT/llama-adapters.json"
stop_server

OUT="$OUT" RANK="$RANK" node --input-type=module - <<'JS'
import { readFileSync } from 'node:fs';
const out = process.env.OUT;
const read = (name) => JSON.parse(readFileSync(`${out}/${name}.json`, 'utf8')).tps;
const loads = readFileSync(`${out}/graft-load.jsonl`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const loadMs = loads.map((a) => a.load_ms).sort((a, b) => a - b);
const gb = read('graft-base'), ga = read('graft-adapters'), lb = read('llama-base'), la = read('llama-adapters');
const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(2));
const lines = [
  '| metric | graft | llama-server | graft / llama | target | met |',
  '| --- | ---: | ---: | ---: | --- | --- |',
  `| 8 streams, base only: aggregate tok/s | ${f(gb)} | ${f(lb)} | ${(gb / lb).toFixed(2)} | | |`,
  `| 8 streams, 8 rank-${process.env.RANK} adapters: aggregate tok/s | ${f(ga)} | ${f(la)} | ${(ga / la).toFixed(2)} | graft > llama-server | ${ga > la ? 'yes' : 'NO'} |`,
  `| adapters / base, same server | ${(ga / gb).toFixed(2)} | ${(la / lb).toFixed(2)} | | graft >= 0.8 | ${ga / gb >= 0.8 ? 'yes' : 'NO'} |`,
  `| adapter load ms (POST /v1/adapters), median / max of ${loadMs.length} | ${f(loadMs[Math.floor(loadMs.length / 2)])} / ${f(loadMs[loadMs.length - 1])} | - | | < 100 | ${loadMs[loadMs.length - 1] < 100 ? 'yes' : 'NO'} |`,
];
console.log(lines.join('\n'));
console.log(`\nload ms each: ${loads.map((a) => `${a.id} ${a.load_ms.toFixed(0)}`).join(', ')}`);
console.log(`Results and server logs: ${out}`);
JS
