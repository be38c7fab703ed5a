#!/usr/bin/env bash
# graft fit's predictions against what graft does on this machine, for the
# 1B-shaped model (llama-bpe vocab) in F16, Q8_0 and Q4_0:
#   memory: predicted peak RSS (graft fit --json, memory.total) against the
#     peak RSS (VmHWM) of graft serve under full load, at two context sizes:
#     PARALLEL requests at once, each filling its context (a prompt of
#     ctx - GEN token ids, then GEN generated tokens); the prompts stride
#     through the vocabulary so that together they read every 64 KiB of the
#     token embedding (the model counts the embedding whole). Target: within 10 %.
#   speed: predicted decode tok/s at 1 and 8 rows against graft bench's
#     batched1 and batched8 (1 or 8 requests, each generating 128 tokens
#     after a 128-token prompt: the shape graft fit predicts), and prefill
#     against pp512. Target: decode within 15 %. ROUNDS rounds per type, each
#     a probe (graft fit --probe) and a graft bench side by side, the probe
#     first in odd rounds and second in even ones; the table gives the
#     medians of the rounds and each round's error. The load average is
#     printed with each measurement.
# A shared VM's memory bandwidth drifts 20-40 % within seconds to minutes,
# so a prediction is compared with a measurement taken next to its probe
# (PROBE=each, the default; PROBE=1 probes once at the start, PROBE=0 uses
# the cached probe). Run it without nice and without chrt: under SCHED_FIFO
# the kernel's real-time throttling stalls graft bench for 50 ms every
# second (5 %), which the probe's medians do not see.
# MEMORY=0 runs the speed half only.
# Env: GRAFT, THREADS (see bench/common.sh), TYPES (default "f16 q8_0 q4_0"),
# CTXS (default "1024 4096"), PARALLEL (default 2), GEN (default 16), ROUNDS (3).
set -euo pipefail
source "$(dirname "$0")/common.sh"
TYPES=${TYPES:-f16 q8_0 q4_0}
CTXS=${CTXS:-1024 4096}
PARALLEL=${PARALLEL:-2}
GEN=${GEN:-16}
ROUNDS=${ROUNDS:-3}
PROBE=${PROBE:-each}
PORT=${PORT:-18241}
OUT=$(mktemp -d /tmp/graft-fit-bench.XXXXXX)
trap 'stop_server; rm -rf "$OUT"' EXIT

echo "threads: $THREADS, parallel: $PARALLEL, contexts: $CTXS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$PROBE" = 1 ]; then "$GRAFT" fit --probe --threads "$THREADS"; fi
echo "load after the probe: $(cut -d' ' -f1-3 /proc/loadavg)"

model_for() {
  local type=$1 file=$ROOT/.cache/bench/llama-1b-$1.gguf
  if [ ! -f "$file" ]; then
    echo "making the 1B-shaped $type model $file ..." >&2
    "$GRAFT" make-test-model "$file" --arch llama --embd 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
      --ctx 8192 --type "$type" --name "graft-bench-1b" >/dev/null
  fi
  echo "$file"
}

for type in $TYPES; do
  model=$(model_for "$type")
  for ctx in $CTXS; do
    [ "${MEMORY:-1}" = 0 ] && continue
    echo "$type, ctx $ctx: predicting, then serving under full load ..." >&2
    "$GRAFT" fit "$model" --ctx "$ctx" --parallel "$PARALLEL" --threads "$THREADS" --json --no-machines \
      >"$OUT/fit-$type-$ctx.json"
    "$GRAFT" serve "$model" --port "$PORT" --threads "$THREADS" --ctx "$ctx" --parallel "$PARALLEL" \
      >"$OUT/serve-$type-$ctx.log" 2>&1 &
    SERVER_PID=$!
    wait_ready "$OUT/serve-$type-$ctx.log"
    node --input-type=module - "$PORT" "$ctx" "$PARALLEL" "$GEN" "$model" <<'JS'
// Full load: rounds of PARALLEL requests, each filling its context, until the prompts have read every
// 64 KiB of the token embedding (one token id per run of rows that fit in 64 KiB).
const [port, ctx, parallel, gen, model] = process.argv.slice(2).map((v, i) => (i === 4 ? v : Number(v)));
const vocab = 128256, rowBytes = { f16: 4096, q8_0: 2176, q4_0: 1152 }[model.match(/1b-(\w+)\.gguf$/)[1]];
const stride = Math.max(1, Math.floor(65536 / rowBytes));
const promptLen = ctx - gen;
let next = 0;
do {
  await Promise.all(Array.from({ length: parallel }, () => {
    const prompt = [];
    for (let i = 0; i < promptLen; i++) { prompt.push(next % vocab); next += stride; }
    return fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: gen, temperature: 0, ignore_eos: true }),
    }).then(async (r) => { if (r.status !== 200) throw new Error(`${r.status}: ${await r.text()}`); });
  }));
} while (next < vocab);
JS
    awk '/^VmHWM/ {print $2 * 1024}' "/proc/$SERVER_PID/status" >"$OUT/peak-$type-$ctx.txt"
    # How much of the file the load made resident (the embedding is read by rows).
    awk -v f="$model" '$0 ~ f {m=1; next} /^[0-9a-f]+-[0-9a-f]+ / {m=0} m && /^Rss:/ {s += $2} END {print s * 1024}' \
      "/proc/$SERVER_PID/smaps" >"$OUT/file-$type-$ctx.txt"
    stop_server
  done
  probe() {
    [ "$PROBE" = each ] || return 0
    echo "$type, round $round: probing (load $(cut -d' ' -f1-3 /proc/loadavg)) ..." >&2
    "$GRAFT" fit --probe --threads "$THREADS" >"$OUT/probe-$type-$round.txt"
  }
  for round in $(seq "$ROUNDS"); do
    [ $((round % 2)) = 1 ] && probe
    echo "$type, round $round: graft bench (load $(cut -d' ' -f1-3 /proc/loadavg)) ..." >&2
    "$GRAFT" bench "$model" -t "$THREADS" -p 512 -n 0 -r 1 --rows 1,8 >"$OUT/bench-$type-$round.txt" 2>/dev/null
    [ $((round % 2)) = 0 ] && probe
    "$GRAFT" fit "$model" --threads "$THREADS" --json --no-machines >"$OUT/speed-$type-$round.json"
  done
done

python3 - "$OUT" "$TYPES" "$CTXS" "$PARALLEL" "$ROUNDS" <<'PY'
import json, os, re, statistics, sys
out, types, ctxs, parallel, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], int(sys.argv[5])
mib = lambda b: b / 2**20
print(f"\nmemory: predicted peak RSS (graft fit) vs measured VmHWM of graft serve, {parallel} full requests at once")
print("| type | ctx | predicted MiB | measured MiB | error | file resident MiB / file MiB | target |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
for t in types:
    for c in ctxs:
        if not os.path.exists(f"{out}/fit-{t}-{c}.json"): continue
        fit = json.load(open(f"{out}/fit-{t}-{c}.json"))
        pred = fit["memory"]["total"]
        meas = int(float(open(f"{out}/peak-{t}-{c}.txt").read().strip() or 0))
        res = int(float(open(f"{out}/file-{t}-{c}.txt").read().strip() or 0))
        err = (pred - meas) / meas if meas else float("nan")
        ok = "ok" if abs(err) <= 0.10 else "MISSED"
        print(f"| {t} | {c} | {mib(pred):.0f} | {mib(meas):.0f} | {100*err:+.1f} % | {mib(res):.0f} / {mib(fit['model']['file_bytes']):.0f} | within 10 % {ok} |")
print(f"\nspeed: predicted (graft fit, from the probe next to each bench) vs measured (graft bench), medians of {rounds} rounds")
print("| type | test | predicted tok/s | measured tok/s | error | each round's error | target |")
print("| --- | --- | ---: | ---: | ---: | --- | --- |")
tests = [("decode, 1 row (batched1)", lambda s: s.get("decode_tps", {}).get("1"), "batched1", 0.15),
         ("decode, 8 rows (batched8)", lambda s: s.get("decode_tps", {}).get("8"), "batched8", 0.15),
         ("prefill (pp512)", lambda s: s.get("prefill_tps"), "pp512", None)]
for t in types:
    for name, predicted, key, target in tests:
        pairs = []
        for r in range(1, rounds + 1):
            speed = json.load(open(f"{out}/speed-{t}-{r}.json")).get("speed") or {}
            bench = {}
            for line in open(f"{out}/bench-{t}-{r}.txt"):
                m = re.match(r"^(pp512|batched\d+)\s+([\d.]+)", line)
                if m: bench[m.group(1)] = float(m.group(2))
            if predicted(speed) and bench.get(key): pairs.append((predicted(speed), bench[key]))
        if not pairs:
            print(f"| {t} | {name} | - | - | - | | |"); continue
        p = statistics.median(x for x, _ in pairs)
        m = statistics.median(y for _, y in pairs)
        err = (p - m) / m
        each = ", ".join(f"{100 * (x - y) / y:+.0f} %" for x, y in pairs)
        tgt = "" if target is None else f"within {int(target*100)} % " + ("ok" if abs(err) <= target else "MISSED")
        print(f"| {t} | {name} | {p:.1f} | {m:.1f} | {100*err:+.1f} % | {each} | {tgt} |")
PY
