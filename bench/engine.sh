#!/usr/bin/env bash
# graft's engine against llama.cpp, side by side on the same 1B-shaped Q4_0
# file, the same threads, in the same run:
#   prefill pp512 and decode tg128 (llama-bench vs graft bench),
#   batched decode at 1/2/4/8/16 rows after a 128-token prompt each
#   (llama-batched-bench's aggregate S_TG vs graft bench's),
#   resident memory while generating (graft run) against file + KV + 150 MiB.
# Each side runs ROUNDS times, odd rounds llama.cpp first, even rounds graft
# first; the table shows the best of each. A tool that fails, or prints no
# figure for a test, stops the script with its output.
# Targets (issue 4): decode >= 0.97x, prefill >= 0.95x, 8 rows >= 1.0x; for the qwen35,
# gemma3, gemma4 and minicpm models (BENCH_ARCH=..., issues 17 and 18) all three >= 1.0x.
# Env: GRAFT, LLAMA_BIN, MODEL (or BENCH_ARCH=qwen35|gemma3|gemma4|minicpm for a ~1B model of
# that family, see common.sh), THREADS, ROUNDS (default 2),
# REPS (default 3), ROWS (batched decode rows, default 1,2,4,8,16).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
ROWS=${ROWS:-1,2,4,8,16}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# fail WHAT LOG: says what failed, shows the end of its output, stops.
fail() {
  echo "engine.sh: $1 failed; the end of its output ($2):" >&2
  tail -n 25 "$2" >&2
  exit 1
}

run_llama() {
  "$LLAMA_BIN/llama-bench" -m "$MODEL" -p 512 -n 128 -t "$THREADS" -r "$REPS" -o jsonl \
    >"$OUT/llama-bench.$1.jsonl" 2>"$OUT/llama-bench.$1.log" || fail llama-bench "$OUT/llama-bench.$1.log"
  "$LLAMA_BIN/llama-batched-bench" -m "$MODEL" -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 -npl $ROWS \
    -t "$THREADS" --output-format jsonl >"$OUT/llama-batched.$1.out" 2>"$OUT/llama-batched.$1.log" ||
    fail llama-batched-bench "$OUT/llama-batched.$1.log"
  grep '^{' "$OUT/llama-batched.$1.out" >"$OUT/llama-batched.$1.jsonl" ||
    fail "llama-batched-bench (no JSON lines)" "$OUT/llama-batched.$1.out"
}

run_graft() {
  "$GRAFT" bench "$MODEL" -t "$THREADS" -p 512 -n 128 -r "$REPS" --rows $ROWS --batched-prompt 128 \
    --batched-gen 128 >"$OUT/graft.$1.txt" 2>"$OUT/graft.$1.log" || fail "graft bench" "$OUT/graft.$1.log"
}

echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), threads: $THREADS, rounds: $ROUNDS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "graft: $(git -C "$ROOT" rev-parse --short HEAD); llama.cpp: $("$LLAMA_BIN/llama-cli" --version 2>&1 | grep -m1 version || echo '?')"
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round/$ROUNDS ..." >&2
  if [ $((round % 2)) -eq 1 ]; then run_llama "$round"; run_graft "$round"; else run_graft "$round"; run_llama "$round"; fi
done

# Memory: graft run generating 128 tokens with a 4096-token cache, RSS polled.
"$GRAFT" run "$MODEL" -p "The quick brown fox jumps over the lazy dog" -n 128 --temp 0 -c 4096 \
  -t "$THREADS" >/dev/null 2>"$OUT/run.err" &
pid=$!
peak=0
while kill -0 $pid 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
  [ "${rss:-0}" -gt "$peak" ] && peak=$rss
  sleep 0.1
done
wait $pid || fail "graft run" "$OUT/run.err"

python3 - "$OUT" "$ROUNDS" "$MODEL" "$peak" "$BENCH_ARCH" "$ROWS" <<'PY'
import glob, json, os, re, sys
out, rounds, model, peak_kib, arch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
rows = [int(n) for n in sys.argv[6].split(",") if n.strip()]
best = {}
def keep(side, test, value):
    if value is None: return
    key = (side, test)
    best[key] = max(best.get(key, 0.0), value)
for path in glob.glob(f"{out}/llama-bench.*.jsonl"):
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"): continue
        r = json.loads(line)
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        keep("llama", test, r["avg_ts"])
for path in glob.glob(f"{out}/llama-batched.*.jsonl"):
    for line in open(path):
        r = json.loads(line)
        keep("llama", f"batched{r['pl']}", r["speed_tg"])
for path in glob.glob(f"{out}/graft.*.txt"):
    for line in open(path):
        m = re.match(r"^(pp\d+|tg\d+|batched\d+)\s+([\d.]+)", line)
        if m: keep("graft", m.group(1), float(m.group(2)))
targets = {"pp512": 0.95, "tg128": 0.97, "batched8": 1.0}
if arch in ("qwen35", "gemma3", "gemma4", "minicpm"):  # issues 17 and 18
    targets = {"pp512": 1.0, "tg128": 1.0, "batched8": 1.0}
tests = ["pp512", "tg128"] + [f"batched{n}" for n in rows]  # the ROWS measured
missing = [f"{side} {t}" for t in tests for side in ("llama", "graft") if not best.get((side, t))]
if missing:
    for name in sorted(os.listdir(out)):
        if name.split(".")[0] in ("llama-bench", "llama-batched", "graft") and os.path.getsize(f"{out}/{name}"):
            print(f"--- {name}:\n" + "".join(open(f"{out}/{name}").readlines()[-15:]), file=sys.stderr)
    sys.exit(f"engine.sh: no figure for {', '.join(missing)}; the tools' output is above")
print(f"\n| test | llama.cpp tok/s | graft tok/s | graft / llama.cpp | target |")
print(f"| --- | ---: | ---: | ---: | --- |")
for t in tests:
    l, g = best.get(("llama", t)), best.get(("graft", t))
    ratio = f"{g / l:.3f}"
    target = f">= {targets[t]:.2f}" if t in targets else ""
    if t in targets: target += " ok" if g / l >= targets[t] else " MISSED"
    name = {"pp512": "prefill pp512", "tg128": "decode tg128"}.get(t, t.replace("batched", "batched decode x"))
    print(f"| {name} | {l:.2f} | {g:.2f} | {ratio} | {target} |")
err = open(f"{out}/run.err").read()
m = re.search(r"kv ([\d.]+) MiB", err)
if not m:
    sys.exit(f"engine.sh: graft run printed no KV size:\n{err[-2000:]}")
kv_mib = float(m.group(1))
file_mib = os.path.getsize(model) / 2**20
limit = file_mib + kv_mib + 150
peak_mib = peak_kib / 1024
print(f"\nmemory while generating (graft run, 4096-token cache): peak RSS {peak_mib:.0f} MiB; "
      f"file {file_mib:.0f} + KV {kv_mib:.0f} + 150 = {limit:.0f} MiB -> {'ok' if peak_mib <= limit else 'OVER'}")
summary = [l for l in err.splitlines() if l.startswith("graft: prompt")]
if summary: print(summary[-1])
PY
