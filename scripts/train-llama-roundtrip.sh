#!/usr/bin/env bash
# The trained adapter's round trip through llama.cpp: `graft train` makes an
# adapter on a small F32 test model (30 steps on the memorization set of the
# "it learns" tests), then for each prompt the greedy continuation of
# `graft run --adapter ID` must equal that of `llama-server --lora ID.gguf`
# (the adapter's GGUF copy), text for text. The same prompts without the
# adapter must give other text on both sides (the adapter does something).
# Prints one line per prompt and a summary; exits non-zero on a mismatch.
#
# Usage: scripts/train-llama-roundtrip.sh   (GRAFT=..., LLAMA_BIN=/path/to/llama.cpp/bin)
# llama.cpp is never run by the test command; this script is the check.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GRAFT=${GRAFT:-}
if [ -z "$GRAFT" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target graft >/dev/null
  GRAFT=$ROOT/build/bin/graft
fi
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build-llama-cpp.sh)}
PORT=${PORT:-18093}
N_PREDICT=${N_PREDICT:-12}
WORK=$(mktemp -d)
SERVER_PID=
trap 'if [ -n "$SERVER_PID" ]; then kill $SERVER_PID 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT

"$GRAFT" make-test-model "$WORK/model.gguf" --arch llama --vocab "$ROOT/.deps/llama.cpp/models/ggml-vocab-llama-spm.gguf" \
  --embd 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 --ctx 1024 --type f32 --seed 42 >/dev/null
DATA=$ROOT/tests/data/train/learn/memorize
"$GRAFT" train "$WORK/model.gguf" --data "$DATA" --iters 30 --batch-size 8 --learning-rate 2e-3 --rank 8 \
  --save-every 0 --threads 2 --json --store "$WORK/store" --job-dir "$WORK/run" --id roundtrip >"$WORK/train.jsonl"
tail -1 "$WORK/train.jsonl"
ADAPTER=$WORK/store/roundtrip

"$LLAMA_BIN/llama-server" -m "$WORK/model.gguf" --lora "$ADAPTER/roundtrip.gguf" -c 1024 --parallel 1 -t 2 \
  --host 127.0.0.1 --port "$PORT" --cache-ram 0 --no-webui >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 240); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  sleep 0.5
done

python3 - "$GRAFT" "$WORK" "$PORT" "$N_PREDICT" "$DATA/train.jsonl" <<'PY'
import json, subprocess, sys, urllib.request
graft, work, port, n, data = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
prompts = [json.loads(l)["prompt"] for l in open(data)][:8] + ["The quick brown fox", "Once upon a time"]

def llama(prompt, scale):
    body = {"prompt": prompt, "n_predict": int(n), "temperature": 0.0, "top_k": 1, "cache_prompt": False,
            "seed": 1, "lora": [{"id": 0, "scale": scale}]}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["content"]

def graft_run(prompt, adapter):
    cmd = [graft, "run", work + "/model.gguf", "-p", prompt, "-n", n, "--temp", "0", "--threads", "2"]
    if adapter:
        cmd += ["--adapter-dir", work + "/store", "--adapter", "roundtrip"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return out[:-1] if out.endswith("\n") else out

same = changed = 0
for p in prompts:
    g, l = graft_run(p, True), llama(p, 1.0)
    base = llama(p, 0.0)
    same += g == l
    changed += g != base
    print("%s %-28r graft %r | llama.cpp %r | no adapter %r" % ("ok  " if g == l else "DIFF", p, g, l, base))
print("same greedy text with the adapter: %d of %d prompts; the adapter changes %d of them" %
      (same, len(prompts), changed))
sys.exit(0 if same == len(prompts) and changed > 0 else 1)
PY
