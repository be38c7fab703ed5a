#!/usr/bin/env bash
# graft against llama.cpp over the weight types people download, in one run:
# the 1B-shaped llama model (16 layers, 2048 wide, 8192 FFN, llama-3
# vocabulary) made in F16 by graft's test model tool, then quantized by
# llama.cpp's own llama-quantize into Q4_0, Q4_K_M, Q5_K_M, Q6_K and Q8_0
# (its mixes: the files people download), so both sides read the same file.
# For each type:
#   prefill pp512 and decode tg128: llama-bench against graft bench;
#   8- and 16-row decode after a 128-token prompt each: llama-batched-bench's
#   aggregate S_TG against graft bench's batched rows;
#   the decode roofline: file bytes x decode tok/s against this machine's
#   read bandwidth (measured here by a 2-thread streaming read), i.e. the
#   share of the memory limit a one-row decode reaches.
# Each side runs ROUNDS times, odd rounds llama.cpp first, even rounds graft
# first; the table shows the best of each (p50 and p95 over the rounds and
# repetitions are in the raw files under $KEEP when set).
# Targets (issue 20): K-quants and Q8_0 prefill, 8- and 16-row decode >= 1.3x,
# decode >= 1.0x; Q4_0 16-row decode >= 1.5x.
# Env: GRAFT, LLAMA_BIN, THREADS, ROUNDS (default 2), REPS (default 3),
# TYPES (default "q4_0 q4_k_m q5_k_m q6_k q8_0 f16"), KV_TYPE (f16; q8_0 or
# q4_0 run both sides with that KV cache), KEEP (a folder to keep the raw output).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
TYPES=${TYPES:-q4_0 q4_k_m q5_k_m q6_k q8_0 f16}
KV_TYPE=${KV_TYPE:-f16}
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$OUT"' EXIT
CACHE=$ROOT/.cache/bench
mkdir -p "$CACHE"

fail() {
  echo "matrix.sh: $1 failed; the end of its output ($2):" >&2
  tail -n 25 "$2" >&2
  exit 1
}

[ -x "$LLAMA_BIN/llama-quantize" ] || {
  echo "matrix.sh: $LLAMA_BIN/llama-quantize is missing (scripts/build-llama-cpp.sh builds it)" >&2
  exit 1
}
F16=$CACHE/llama-1b-f16.gguf
if [ ! -f "$F16" ]; then
  echo "making the 1B-shaped F16 model $F16 ..." >&2
  "$GRAFT" make-test-model "$F16.tmp" --arch llama --embd 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
    --ctx 8192 --type f16 --name "graft-bench-1b" >/dev/null
  mv "$F16.tmp" "$F16"
fi
model_of() {
  local type=$1 file=$CACHE/llama-1b-$1.gguf
  if [ "$type" = f16 ]; then echo "$F16"; return; fi
  if [ ! -f "$file" ]; then
    echo "quantizing $file ..." >&2
    "$LLAMA_BIN/llama-quantize" "$F16" "$file.tmp" "${type^^}" "$THREADS" >"$OUT/quantize.$type.log" 2>&1 ||
      fail "llama-quantize $type" "$OUT/quantize.$type.log"
    mv "$file.tmp" "$file"
  fi
  echo "$file"
}

# Read bandwidth: THREADS threads summing a 1 GiB buffer, best of 5 passes.
cat >"$OUT/bandwidth.c" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
int main(void) {
  const size_t n = (size_t)1 << 27;  // 1 GiB of uint64
  uint64_t* a = malloc(n * sizeof *a);
  memset(a, 1, n * sizeof *a);
  double best = 0;
  uint64_t sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i += 4) s += a[i] ^ a[i + 1] ^ a[i + 2] ^ a[i + 3];
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sink += s;
    const double sec = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    if (n * sizeof *a / sec > best) best = n * sizeof *a / sec;
  }
  printf("%.0f %llu\n", best, (unsigned long long)(sink & 1));
  return 0;
}
C
gcc -O2 -fopenmp "$OUT/bandwidth.c" -o "$OUT/bandwidth" 2>"$OUT/bandwidth.log" || fail "gcc (bandwidth probe)" "$OUT/bandwidth.log"
BANDWIDTH=$(OMP_NUM_THREADS=$THREADS "$OUT/bandwidth" | cut -d' ' -f1)

KV_LLAMA=() KV_BATCHED=()  # llama-bench takes -fa 0|1, the other tools on|off|auto
[ "$KV_TYPE" = f16 ] || KV_LLAMA=(-ctk "$KV_TYPE" -ctv "$KV_TYPE" -fa 1) KV_BATCHED=(-ctk "$KV_TYPE" -ctv "$KV_TYPE" -fa on)
run_llama() {  # type model round
  "$LLAMA_BIN/llama-bench" -m "$2" -p 512 -n 128 -t "$THREADS" -r "$REPS" "${KV_LLAMA[@]}" -o jsonl \
    >"$OUT/llama-bench.$1.$3.jsonl" 2>"$OUT/llama-bench.$1.$3.log" || fail "llama-bench $1" "$OUT/llama-bench.$1.$3.log"
  "$LLAMA_BIN/llama-batched-bench" -m "$2" -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 8,16 \
    -t "$THREADS" "${KV_BATCHED[@]}" --output-format jsonl >"$OUT/llama-batched.$1.$3.out" \
    2>"$OUT/llama-batched.$1.$3.log" || fail "llama-batched-bench $1" "$OUT/llama-batched.$1.$3.log"
  grep '^{' "$OUT/llama-batched.$1.$3.out" >"$OUT/llama-batched.$1.$3.jsonl" ||
    fail "llama-batched-bench $1 (no JSON lines)" "$OUT/llama-batched.$1.$3.out"
}
run_graft() {  # type model round
  "$GRAFT" bench "$2" -t "$THREADS" -p 512 -n 128 -r "$REPS" --rows 8,16 --batched-prompt 128 \
    --batched-gen 128 --kv-type "$KV_TYPE" >"$OUT/graft.$1.$3.txt" 2>"$OUT/graft.$1.$3.log" ||
    fail "graft bench $1" "$OUT/graft.$1.$3.log"
}

echo "threads: $THREADS, rounds: $ROUNDS, KV: $KV_TYPE, read bandwidth: $(awk "BEGIN {printf \"%.1f\", $BANDWIDTH / 1e9}") GB/s," \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "graft: $(git -C "$ROOT" rev-parse --short HEAD); llama.cpp: $("$LLAMA_BIN/llama-cli" --version 2>&1 | grep -m1 version || echo '?')"
SIZES=()
for type in $TYPES; do
  model=$(model_of "$type")
  SIZES+=("$type=$(stat -c %s "$model")")
  for round in $(seq 1 "$ROUNDS"); do
    echo "$type: round $round/$ROUNDS ..." >&2
    if [ $((round % 2)) -eq 1 ]; then
      run_llama "$type" "$model" "$round"; run_graft "$type" "$model" "$round"
    else
      run_graft "$type" "$model" "$round"; run_llama "$type" "$model" "$round"
    fi
  done
done

python3 - "$OUT" "$BANDWIDTH" "$TYPES" "${SIZES[@]}" <<'PY'
import glob, json, re, sys
out, bandwidth, types = sys.argv[1], float(sys.argv[2]), sys.argv[3].split()
sizes = dict(s.split("=") for s in sys.argv[4:])
best = {}
def keep(key, value):
    if value: best[key] = max(best.get(key, 0.0), value)
for t in types:
    for path in glob.glob(f"{out}/llama-bench.{t}.*.jsonl"):
        for line in open(path):
            if not line.startswith("{"): continue
            r = json.loads(line)
            keep((t, "llama", "pp" if r["n_gen"] == 0 else "tg"), r["avg_ts"])
    for path in glob.glob(f"{out}/llama-batched.{t}.*.jsonl"):
        for line in open(path):
            r = json.loads(line)
            keep((t, "llama", f"b{r['pl']}"), r["speed_tg"])
    for path in glob.glob(f"{out}/graft.{t}.*.txt"):
        for line in open(path):
            m = re.match(r"^(pp512|tg128|batched8|batched16)\s+([\d.]+)", line)
            if m:
                name = {"pp512": "pp", "tg128": "tg", "batched8": "b8", "batched16": "b16"}[m.group(1)]
                keep((t, "graft", name), float(m.group(2)))
cols = [("pp", "prefill pp512"), ("tg", "decode tg128"), ("b8", "8-row decode"), ("b16", "16-row decode")]
missing = [f"{t} {side} {c}" for t in types for side in ("llama", "graft") for c, _ in cols if (t, side, c) not in best]
if missing: sys.exit("matrix.sh: no figure for " + ", ".join(missing))
targets = {"pp": 1.3, "tg": 1.0, "b8": 1.3, "b16": 1.3}
print("\nEach cell: llama.cpp tok/s / graft tok/s (graft / llama.cpp). Roofline: file bytes x decode tok/s as a "
      "share of the measured read bandwidth, llama.cpp / graft.\n")
print("| type | file MiB | " + " | ".join(name for _, name in cols) + " | decode roofline share |")
print("| --- | ---: | " + " | ".join("---" for _ in cols) + " | ---: |")
for t in types:
    cells = []
    for c, _ in cols:
        l, g = best[(t, "llama", c)], best[(t, "graft", c)]
        target = targets[c] if t not in ("q4_0", "f16") else (1.5 if (t, c) == ("q4_0", "b16") else None)
        mark = "" if target is None else (" ok" if g / l >= target else f" < {target}")
        cells.append(f"{l:.1f} / {g:.1f} ({g / l:.2f}{mark})")
    size = int(sizes[t])
    roof = [size * best[(t, side, "tg")] / bandwidth for side in ("llama", "graft")]
    print(f"| {t} | {size / 2**20:.0f} | " + " | ".join(cells) + f" | {roof[0]:.2f} / {roof[1]:.2f} |")
PY
