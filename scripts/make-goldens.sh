#!/usr/bin/env bash
# Records llama.cpp's greedy continuations on graft's test models, as token
# ids, into tests/data/goldens/<cpu kind>/ (committed, one folder per kind: see
# scripts/goldens-cpu-kind.sh; the parity test in tests/engine
# regenerates the same models with graft's deterministic tool and checks
# graft's output token for token; CI never builds llama.cpp).
#
# Usage: scripts/make-goldens.sh            (GRAFT=path/to/graft to pick the binary)
# Needs: llama.cpp's tools (scripts/build-llama-cpp.sh builds them), python3.
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
OUT=$ROOT/tests/data/goldens/$(scripts/goldens-cpu-kind.sh)
WORK=$(mktemp -d)
trap 'kill $SERVER_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
SERVER_PID=
mkdir -p "$OUT"
BUNDLE=$ROOT/.deps/llama.cpp
PORT=${PORT:-18089}
N_PREDICT=32

# The shapes must match tests/engine/parity_test.cpp (it rebuilds the models from the JSON).
EMBD=256 HEADS=4 KV_HEADS=2 FFN=512 CTX=1024 SEED=42
# qwen35 (hybrid): 3 gated delta-net layers and 1 of full attention, a tied
# output (Qwen3.5-4B's layout, scaled down), and a prompt longer than one
# 512-token prefill chunk, which graft reads in such chunks.
# gemma3: 6 layers, local (sliding over 4 positions, shorter than all
# prompts but one) and global in Gemma 3's pattern (here every 3rd global),
# one key/value head, heads wider than the embedding and a global rope base
# of 1e6, as Gemma 3 1B has, scaled down. Its own output matrix (not tied):
# a random tied embedding, scaled up by sqrt(n_embd) on the way in, makes
# every continuation repeat its last token.
# gemma4: Gemma 4 E2B's layout scaled down: 10 layers, 4 local (sliding over 4
# positions) then 1 global, local heads half as wide as the global ones (64
# and 128), one key/value head, the last 5 layers sharing the keys and values
# of layers 3 and 4 with twice the FFN width, 32-wide per-layer inputs,
# partial rope on the global layers (base 1e6), a final logit softcap of 30.
# Its own output matrix, as for gemma3.
# For sliding-window models llama-server reads a prompt in batches that end 4
# (and 4 + n_ubatch) tokens before its end, to checkpoint its cache there; the
# parity test reads them in the same batches (server_prompt_batches
# in tests/engine/generate.h), since the batches decide which of ggml's
# flash-attention kernels a row takes.
# minicpm: 4 layers (untied, as for gemma3), with MiniCPM's embedding, residual and
# logit scalings (make-test-model's defaults: scale_emb 12, scale_depth 1.4,
# dim_model_base 64).
# KV_TYPE=q8_0 (or q4_0) records with that KV cache type on both sides
# (llama.cpp's -ctk/-ctv, which needs its flash attention), into
# <arch>-<type>-kv-<kv type>.json.
KV_TYPE=${KV_TYPE:-f16}
KV_ARGS=()
KV_SUFFIX=
# llama.cpp rotates keys and values by a Walsh-Hadamard matrix before
# storing them in a quantized cache (when the head width is a multiple of
# 64); graft stores them as they are, so the goldens are recorded with that
# rotation off (LLAMA_ATTN_ROT_DISABLE=1): the same arithmetic on both sides.
if [ "$KV_TYPE" != f16 ]; then
  KV_ARGS=(-ctk "$KV_TYPE" -ctv "$KV_TYPE" -fa on)
  KV_SUFFIX=-kv-$KV_TYPE
  export LLAMA_ATTN_ROT_DISABLE=1
fi
ARCHS=${ARCHS:-llama:llama-bpe qwen3:qwen2 qwen35:qwen35 gemma3:llama-spm gemma4:llama-spm minicpm:llama-spm}
TYPES=${TYPES:-f16 q8_0 q4_0}

for arch_vocab in $ARCHS; do
  arch=${arch_vocab%%:*}
  vocab=${arch_vocab##*:}
  LAYERS=2 TIED=0 CHUNK=0 EXTRA=() KVH=$KV_HEADS HEAD_DIM=0 SLIDING=0 PATTERN=0 ROPE_BASE=10000 MORE='{}'
  if [ "$arch" = qwen35 ]; then LAYERS=4 TIED=1 CHUNK=512 EXTRA=(--tied); fi
  if [ "$arch" = minicpm ]; then LAYERS=4; fi
  if [ "$arch" = gemma3 ]; then
    LAYERS=6 KVH=1 HEAD_DIM=128 SLIDING=4 PATTERN=3 ROPE_BASE=1000000
    EXTRA=(--head-dim $HEAD_DIM --sliding-window $SLIDING --sliding-window-pattern $PATTERN
      --rope-base $ROPE_BASE)
  fi
  if [ "$arch" = gemma4 ]; then
    LAYERS=10 KVH=1 HEAD_DIM=128 SLIDING=4 PATTERN=5 ROPE_BASE=1000000
    EXTRA=(--head-dim $HEAD_DIM --sliding-window $SLIDING --sliding-window-pattern $PATTERN
      --rope-base $ROPE_BASE --head-dim-local 64 --shared-kv-layers 5 --per-layer-embd 32 --logit-softcap 30)
    MORE='{"head_dim_local": 64, "shared_kv_layers": 5, "per_layer_embd": 32, "logit_softcap": 30}'
  fi
  for type in $TYPES; do
    name=$arch-$type$KV_SUFFIX
    model=$WORK/$name.gguf
    "$GRAFT" make-test-model "$model" --arch "$arch" --vocab "$BUNDLE/models/ggml-vocab-$vocab.gguf" \
      --embd $EMBD --layers $LAYERS --heads $HEADS --kv-heads $KVH --ffn $FFN --ctx $CTX \
      --type "$type" --seed $SEED "${EXTRA[@]}" >/dev/null
    "$LLAMA_BIN/llama-server" -m "$model" -c $CTX --parallel 1 -t "$(nproc)" --host 127.0.0.1 --port $PORT \
      --cache-ram 0 --no-webui "${KV_ARGS[@]}" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 120); do
      if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
      sleep 0.5
    done
    python3 - "$PORT" "$OUT/$name.json" "$arch" "$vocab" "$type" $EMBD $LAYERS $HEADS $KVH $FFN $CTX $SEED \
      $N_PREDICT "$(git -C "$BUNDLE" log -1 --format=%h 2>/dev/null || echo unknown)" $TIED $CHUNK \
      $HEAD_DIM $SLIDING $PATTERN $ROPE_BASE "$KV_TYPE" "$MORE" <<'PY'
import json, sys, urllib.request
port, path, arch, vocab, wtype = sys.argv[1:6]
embd, layers, heads, kv_heads, ffn, ctx, seed, n_predict = map(int, sys.argv[6:14])
build = sys.argv[14]
tied, chunk = map(int, sys.argv[15:17])
head_dim, sliding, pattern, rope_base = map(int, sys.argv[17:21])
kv_type = sys.argv[21]
more = json.loads(sys.argv[22])  # the family's own shape fields, as parity_test.cpp reads them

def post(endpoint, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{endpoint}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())

texts = [
    "The quick brown fox",
    "Once upon a time, in a land far away, there lived a",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Q: What is the capital of France?\nA:",
    "1, 2, 3, 4, 5,",
    "Hello",
    ("In the beginning the Universe was created. This has made a lot of people very angry and been widely "
     "regarded as a bad move. Many races believe that it was created by some sort of god, though the Jatravartid "
     "people of Viltvodle VI believe that the entire Universe was in fact sneezed out of the nose of a being "
     "called the Great Green Arkleseizure, and they live in perpetual fear of the time they call The Coming "
     "of the Great White Handkerchief."),
]
if chunk:
    # Longer than one prefill chunk: the story goes on, day by day.
    names = ["Arthur", "Ford", "Trillian", "Zaphod", "Marvin", "Slartibartfast", "Fenchurch", "Random"]
    days = [f"On day {i} {names[i % len(names)]} walked {3 + i * 7 % 19} miles, counted {i * 13 % 29} "
            f"stars and wrote {1 + i % 5} letters home." for i in range(1, 21)]
    texts[-1] = texts[-1] + " " + " ".join(days)
cases = []
for text in texts:
    prompt = post("/tokenize", {"content": text, "add_special": True})["tokens"]
    res = post("/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                               "cache_prompt": False, "return_tokens": True, "seed": 1, "n_probs": 0})
    cases.append({"text": text, "prompt": prompt, "output": res["tokens"]})
if chunk:
    assert max(len(c["prompt"]) for c in cases) > chunk, "the long prompt must span more than one chunk"
golden = {
    "generator": f"llama.cpp {build}: llama-server /completion, greedy (temperature 0, top_k 1), no prompt cache",
    "model": {"arch": arch, "vocab": vocab, "embd": embd, "layers": layers, "heads": heads, "kv_heads": kv_heads,
              "ffn": ffn, "ctx": ctx, "type": wtype, "seed": seed},
    "cases": cases,
}
if kv_type != "f16":
    golden["model"]["kv_type"] = kv_type
    golden["generator"] += f", -ctk/-ctv {kv_type} with flash attention, attention rotation off"
if tied:
    golden["model"]["tied"] = True
if chunk:
    golden["prefill_chunk"] = chunk
if head_dim:
    golden["model"]["head_dim"] = head_dim
if rope_base != 10000:
    golden["model"]["rope_base"] = rope_base
golden["model"].update(more)
if sliding:
    golden["model"]["sliding_window"] = sliding
    golden["model"]["sliding_window_pattern"] = pattern
    assert sum(len(c["prompt"]) > sliding for c in cases) >= 5, "most prompts must be longer than the window"
with open(path, "w") as f:
    json.dump(golden, f, indent=1)
    f.write("\n")
print(f"{path}: {len(cases)} cases, {[len(c['prompt']) for c in cases]} prompt tokens")
PY
    kill $SERVER_PID
    wait $SERVER_PID 2>/dev/null || true
    SERVER_PID=
  done
done
