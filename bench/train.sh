#!/usr/bin/env bash
# LoRA training speed and memory: `graft train` against the PyTorch reference
# trainer (bench/train_reference.py), side by side on the same CPU and
# threads, on the 1B-shaped test model: graft on its Q4_0 and F16 files,
# PyTorch on the F16 file dequantized to F32. Rank 16 on all seven
# projections of every layer, batch 1, sequences of SEQS tokens (random
# words, cut to exactly that length).
#
# Columns:
#   tok/s p50, p95   train tokens per second of one optimizer step (forward,
#                    backward, AdamW), over steps 2..STEPS (the first warms up);
#                    p95 is the slow end (the 5th percentile of tok/s)
#   peak RSS         the process's maximum resident set (MiB), model included
#   model file       the GGUF's size (MiB)
# Each sequence length runs the three sides in turn, the order alternating.
#
# Usage: bench/train.sh   (SEQS="256 512" STEPS=4 THREADS=n GRAFT=... PYTHON=/usr/bin/python3
#                         SIDES="graft-q4_0 graft-q4_0-ckpt graft-f16 pytorch": the sides to run)
# Targets (issue 13): graft Q4_0 >= 2x PyTorch tok/s at seq 256; graft's
# peak RSS at seq 512 with --grad-checkpoint <= model file + 2 GiB.
source "$(dirname "$0")/common.sh"
SEQS=${SEQS:-256 512}
STEPS=${STEPS:-4}
SIDES=${SIDES:-graft-q4_0 graft-q4_0-ckpt graft-f16 pytorch}
PYTHON=${PYTHON:-/usr/bin/python3}
F16=${F16:-$ROOT/.cache/bench/llama-1b-f16.gguf}
if [ ! -f "$F16" ]; then
  echo "making the 1B-shaped F16 model $F16 ..." >&2
  "$GRAFT" make-test-model "$F16" --arch llama --embd 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
    --ctx 8192 --type f16 --name "graft-bench-1b" >/dev/null
fi
WORK=$(mktemp -d)
trap 'stop_server; rm -rf "$WORK"' EXIT
HAVE_TORCH=1
"$PYTHON" -c "import torch" 2>/dev/null || HAVE_TORCH=0

# Random-word texts, long enough for the longest sequence (fixed seed).
"$PYTHON" - "$WORK/data.jsonl" <<'EOF'
import json, random, sys
rng = random.Random(7)
words = "the of and to in is was for on with as by at from that this are be it an".split() + \
        ["w%d" % i for i in range(400)]
with open(sys.argv[1], "w") as f:
    for _ in range(8):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(1500))}) + "\n")
EOF

# graft: step times from the arrival of each step event; peak RSS from the OS.
graft_side() {  # model seq extra-args...
  local model=$1 seq=$2
  shift 2
  rm -rf "$WORK/run" "$WORK/store"
  "$PYTHON" - "$seq" "$@" -- "$GRAFT" train "$model" --data "$WORK/data.jsonl" --max-seq-length "$seq" \
    --batch-size 1 --rank 16 --targets all --num-layers -1 --iters "$STEPS" --save-every 0 --threads "$THREADS" \
    --json --store "$WORK/store" --job-dir "$WORK/run" --id bench <<'EOF'
import json, resource, subprocess, sys, time
seq = int(sys.argv[1])
split = sys.argv.index("--")
extra, cmd = sys.argv[2:split], sys.argv[split + 1:]
proc = subprocess.Popen(cmd + extra, stdout=subprocess.PIPE, text=True)
times, last, tokens = [], None, []
for line in proc.stdout:
    e = json.loads(line)
    if e["type"] == "start":
        last = time.perf_counter()
    elif e["type"] == "step":
        now = time.perf_counter()
        times.append(now - last)
        tokens.append(e["tokens"])  # cumulative
        last = now
    elif e["type"] == "error":
        sys.exit("graft: " + e["message"])
proc.wait()
per_step = [tokens[0]] + [b - a for a, b in zip(tokens, tokens[1:])]
rates = sorted(n / t for n, t in zip(per_step[1:], times[1:])) or [per_step[0] / times[0]]
print(json.dumps({"p50": rates[len(rates) // 2], "p95": rates[0] if len(rates) < 20 else rates[len(rates) // 20],
                  "rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}))
EOF
}

torch_side() {  # seq
  "$PYTHON" bench/train_reference.py bench --model "$F16" --seq "$1" --steps "$STEPS" --rank 16 \
    --threads "$THREADS" 2>/dev/null |
    "$PYTHON" -c 'import json,sys; r=json.load(sys.stdin); s=sorted(int(sys.argv[1])/t for t in r["step_s"]); print(json.dumps({"p50": s[len(s)//2], "p95": s[0], "rss": r["peak_rss_mib"]}))' "$1"
}

mib() { echo $(($(stat -c %s "$1") / 1048576)); }
row() {  # label seq model-file json
  "$PYTHON" -c 'import json,sys; r=json.loads(sys.argv[4]); print("| %-30s | %4s | %8.1f | %8.1f | %8.0f | %6s |" % (sys.argv[1], sys.argv[2], r["p50"], r["p95"], r["rss"], sys.argv[3]))' \
    "$1" "$2" "$3" "$4"
}

# Debian's python3-torch multiplies through whichever libblas.so.3 is chosen:
# the reference BLAS (package libblas3) is single-threaded and unblocked, about
# 20x slower than OpenBLAS here, which would make PyTorch a straw man.
BLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo '?')
case $BLAS in
  */blas/libblas.so*)
    echo "warning: PyTorch would run on the reference BLAS ($BLAS), single-threaded and slow;" \
      "apt-get install libopenblas0-pthread for a fair comparison" >&2 ;;
esac
echo "graft train vs PyTorch $( [ $HAVE_TORCH = 1 ] && "$PYTHON" -c 'import torch; print(torch.__version__)' || echo '(not installed: apt-get install python3-torch)') (BLAS: $BLAS), threads $THREADS, $STEPS steps, rank 16, batch 1, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| side                           |  seq | tok/s p50 | tok/s p95 | peak RSS MiB | model MiB |"
echo "| --- | --- | --- | --- | --- | --- |"
i=0
for seq in $SEQS; do
  sides=("graft-q4_0" "graft-q4_0-ckpt" "graft-f16" "pytorch")
  if [ $((i % 2)) = 1 ]; then sides=("pytorch" "graft-f16" "graft-q4_0-ckpt" "graft-q4_0"); fi
  for side in "${sides[@]}"; do
    case " $SIDES " in *" $side "*) ;; *) continue ;; esac
    case $side in
      graft-q4_0) row "graft Q4_0" "$seq" "$(mib "$MODEL")" "$(graft_side "$MODEL" "$seq")" ;;
      graft-q4_0-ckpt) row "graft Q4_0 --grad-checkpoint" "$seq" "$(mib "$MODEL")" "$(graft_side "$MODEL" "$seq" --grad-checkpoint)" ;;
      graft-f16) row "graft F16" "$seq" "$(mib "$F16")" "$(graft_side "$F16" "$seq")" ;;
      pytorch) [ $HAVE_TORCH = 1 ] && row "PyTorch (F16 file, F32 compute)" "$seq" "$(mib "$F16")" "$(torch_side "$seq")" ;;
    esac
  done
  i=$((i + 1))
done
