#!/usr/bin/env bash
# Records the PyTorch reference trainer's loss curve (bench/train_reference.py)
# for 20 steps of LoRA training on a small F32 test model, into
# tests/data/train/reference/losses.json (committed). tests/train/parity_test.cpp
# runs the same `graft train` (the command below, kept in the JSON) and checks
# graft's loss at every step against it within 1e-3 relative.
#
# graft writes the initial A/B and every step's batches (--save-init); the
# reference reads them, the model (dequantized) and the run's AdamW settings,
# and trains the same adapter with torch.optim.AdamW.
#
# Usage: scripts/make-train-goldens.sh   (GRAFT=path/to/graft to pick the binary)
# Needs: Debian's PyTorch (apt-get install python3-torch; run with /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GRAFT=${GRAFT:-}
if [ -z "$GRAFT" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target graft >/dev/null
  GRAFT=$ROOT/build/bin/graft
fi
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=$ROOT/tests/data/train/reference
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

# The model: tiny_spec("llama", "llama-spm", "f32") with n_embd 64, n_ff 128
# (tests/train/parity_test.cpp makes the same file).
"$GRAFT" make-test-model --arch llama --vocab "$ROOT/.deps/llama.cpp/models/ggml-vocab-llama-spm.gguf" \
  --embd 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 1024 --type f32 --seed 42 "$WORK/model.gguf"

# The options graft trains with (the test passes the same ones).
OPTIONS=(--iters 20 --batch-size 4 --grad-accumulation 2 --rank 4 --scale 2 --learning-rate 1e-3
  --lr-schedule cosine --warmup 3 --min-lr 1e-4 --weight-decay 0.01 --grad-clip 1 --seed 3 --threads 1)
DATA=tests/data/train/learn/memorize/train.jsonl
"$GRAFT" train "$WORK/model.gguf" --data "$ROOT/$DATA" "${OPTIONS[@]}" --save-init --json \
  --store "$WORK/store" --job-dir "$WORK/run" --id reference >"$WORK/graft.jsonl"
"$PYTHON" bench/train_reference.py replay "$WORK/run" --out "$WORK/reference.json"

"$PYTHON" - "$WORK" "$OUT/losses.json" "$DATA" "${OPTIONS[@]}" <<'EOF'
import json, sys
work, out, data, options = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
ref = json.load(open(work + "/reference.json"))
graft = [json.loads(l) for l in open(work + "/graft.jsonl")]
graft_losses = [e["train_loss"] for e in graft if e["type"] == "step"]
worst = max(abs(a - b) / abs(b) for a, b in zip(graft_losses, ref["losses"]))
print("graft vs PyTorch: worst relative difference %.2e over %d steps" % (worst, len(graft_losses)))
json.dump({"what": "PyTorch reference loss per step (bench/train_reference.py replay), "
                   "recorded by scripts/make-train-goldens.sh",
           "model": {"arch": "llama", "vocab": "llama-spm", "type": "f32", "n_embd": 64, "n_ff": 128},
           "data": data, "options": options, "torch": ref["torch"], "losses": ref["losses"]},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
EOF
echo "wrote $OUT/losses.json"
