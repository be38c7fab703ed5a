#!/usr/bin/env bash
# Records llama.cpp's greedy continuations on graft's test models with graft's
# test LoRA adapters applied, as token ids, into tests/data/goldens/<cpu kind>/adapters/
# (committed; tests/adapters/parity_test.cpp rebuilds the same model and
# adapters with graft's deterministic tools and checks graft's output token
# for token, for the GGUF and the PEFT form of each adapter).
#
# Each model gets one llama-server with both adapters loaded (--lora a --lora b);
# each case picks its selection with the per-request "lora" field: none, a, b,
# and a@0.5 + b (two stacked, as --lora-scaled would).
#
# The stacked case is recorded as graft's spec "b+a@0.5": llama.cpp adds the
# deltas of its adapters to each projection's output one at a time, the last
# loaded first (its adapter set is an unordered_map, which libstdc++ iterates
# in reverse insertion order), and graft adds them in the spec's order. The
# order only changes the last bits of a sum, but through q8_0 activation
# quantization that can change a token.
#
# Usage: scripts/make-adapter-goldens.sh   (GRAFT=path/to/graft to pick the binary)
# Needs: llama.cpp's tools (scripts/build-llama-cpp.sh builds them), python3, curl.
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
OUT=$ROOT/tests/data/goldens/$(scripts/goldens-cpu-kind.sh)/adapters
WORK=$(mktemp -d)
SERVER_PID=
trap 'if [ -n "$SERVER_PID" ]; then kill $SERVER_PID 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
BUNDLE=$ROOT/.deps/llama.cpp
PORT=${PORT:-18090}
N_PREDICT=16

# The shapes must match tests/adapters/parity_test.cpp (it rebuilds everything from the JSON).
EMBD=256 HEADS=4 KV_HEADS=2 FFN=512 CTX=1024 SEED=42
# Adapter a: rank 8 on every projection; b: rank 16 on attention only. f16, as graft mounts them.
A_RANK=8 A_ALPHA=16 A_SEED=1 A_TARGETS=all
B_RANK=16 B_ALPHA=8 B_SEED=2 B_TARGETS=attn
STRENGTH=1.0 DTYPE=f16

# Small vocabularies keep the test quick: its time goes into the output layer.
# qwen35 (hybrid): 3 gated delta-net layers and 1 of full attention, tied
# output; "all" and "attn" then include the linear-attention projections.
CASES=${CASES:-llama:llama-spm:f16 qwen3:phi-3:q8_0 qwen35:llama-spm:f16}
for case in $CASES; do
  IFS=: read -r arch vocab type <<<"$case"
  name=$arch-$type
  model=$WORK/$name.gguf
  LAYERS=2 TIED=0 EXTRA=()
  if [ "$arch" = qwen35 ]; then LAYERS=4 TIED=1 EXTRA=(--tied); fi
  "$GRAFT" make-test-model "$model" --arch "$arch" --vocab "$BUNDLE/models/ggml-vocab-$vocab.gguf" \
    --embd $EMBD --layers $LAYERS --heads $HEADS --kv-heads $KV_HEADS --ffn $FFN --ctx $CTX \
    --type "$type" --seed $SEED "${EXTRA[@]}" >/dev/null
  "$GRAFT" make-test-adapter --base "$model" --gguf "$WORK/a.gguf" --rank $A_RANK --alpha $A_ALPHA \
    --seed $A_SEED --targets $A_TARGETS --strength $STRENGTH --dtype $DTYPE >/dev/null
  "$GRAFT" make-test-adapter --base "$model" --gguf "$WORK/b.gguf" --rank $B_RANK --alpha $B_ALPHA \
    --seed $B_SEED --targets $B_TARGETS --strength $STRENGTH --dtype $DTYPE >/dev/null
  "$LLAMA_BIN/llama-server" -m "$model" --lora "$WORK/a.gguf" --lora "$WORK/b.gguf" -c $CTX --parallel 1 \
    -t "$(nproc)" --host 127.0.0.1 --port $PORT --cache-ram 0 --no-webui >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  python3 - "$PORT" "$OUT/$name.json" "$arch" "$vocab" "$type" $EMBD $LAYERS $HEADS $KV_HEADS $FFN $CTX $SEED \
    $N_PREDICT "$(git -C "$BUNDLE" log -1 --format=%h 2>/dev/null || echo unknown)" \
    $A_RANK $A_ALPHA $A_SEED $A_TARGETS $B_RANK $B_ALPHA $B_SEED $B_TARGETS $STRENGTH $DTYPE $TIED <<'PY'
import json, sys, urllib.request
port, path, arch, vocab, wtype = sys.argv[1:6]
embd, layers, heads, kv_heads, ffn, ctx, seed, n_predict = map(int, sys.argv[6:14])
build = sys.argv[14]
a_rank, a_alpha, a_seed, a_targets, b_rank, b_alpha, b_seed, b_targets, strength, dtype = sys.argv[15:25]
tied = int(sys.argv[25])

def post(endpoint, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{endpoint}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())

texts = [
    "The quick brown fox",
    "Once upon a time, in a land far away, there lived a",
]
# graft's spec -> llama-server's per-request scales of adapters 0 (a) and 1 (b).
selections = {"none": [0.0, 0.0], "a": [1.0, 0.0], "b": [0.0, 1.0], "b+a@0.5": [0.5, 1.0]}
cases = []
for spec, scales in selections.items():
    lora = [{"id": i, "scale": s} for i, s in enumerate(scales)]
    for text in texts:
        prompt = post("/tokenize", {"content": text, "add_special": True})["tokens"]
        res = post("/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                                   "cache_prompt": False, "return_tokens": True, "seed": 1, "n_probs": 0,
                                   "lora": lora})
        cases.append({"adapter": spec, "text": text, "prompt": prompt, "output": res["tokens"]})

def adapter(rank, alpha, seed, targets):
    return {"rank": int(rank), "alpha": float(alpha), "seed": int(seed), "targets": targets,
            "strength": float(strength), "dtype": dtype}

golden = {
    "generator": f"llama.cpp {build}: llama-server --lora a.gguf --lora b.gguf, per-request lora scales, "
                 "/completion greedy (temperature 0, top_k 1), no prompt cache",
    "model": {"arch": arch, "vocab": vocab, "embd": embd, "layers": layers, "heads": heads, "kv_heads": kv_heads,
              "ffn": ffn, "ctx": ctx, "type": wtype, "seed": seed},
    "adapters": {"a": adapter(a_rank, a_alpha, a_seed, a_targets), "b": adapter(b_rank, b_alpha, b_seed, b_targets)},
    "cases": cases,
}
if tied:
    golden["model"]["tied"] = True
with open(path, "w") as f:
    json.dump(golden, f, indent=1)
    f.write("\n")
distinct = len({tuple(c["output"]) for c in cases})
print(f"{path}: {len(cases)} cases, {distinct} distinct outputs")
PY
  kill $SERVER_PID
  wait $SERVER_PID 2>/dev/null || true
  SERVER_PID=
done
