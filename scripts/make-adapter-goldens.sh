#!/usr/bin/env bash
# Records llama.cpp's greedy continuations on graft's test models with graft's
# test LoRA adapters applied, as token ids, into tests/data/goldens/<cpu kind>/adapters/
# (committed; tests/adapters/parity_test.cpp rebuilds the same model and
# adapters with graft's deterministic tools and checks graft's output token
# for token, for the GGUF and the PEFT form of each adapter).
#
# Two sets of adapters, each in its own file per model, each recorded with one
# llama-server that loads the set's adapters (--lora x --lora y); each case
# picks its selection with the per-request "lora" field:
# - <model>.json: a and b in F16; none, a, b, and a@0.5 + b (two stacked, as
#   --lora-scaled would);
# - <model>-f32-bf16.json: c in F32 and d in BF16, the types graft keeps as
#   they are (F16 storage changed their values); c, d, and c@0.5 + d (an F32
#   and a BF16 adapter stacked).
# A CPU kind's folder may lack the second file until someone records it there
# (parity_test counts the files it expects per CPU kind).
#
# A stacked case is recorded as graft's spec "y+x@0.5": llama.cpp adds the
# deltas of its adapters to each projection's output one at a time, the last
# set first (the adapters of a request, those with a nonzero scale, go in id
# order into an unordered_map, which libstdc++ iterates in reverse insertion
# order when it holds two), and graft adds them in the spec's order. The
# order only changes the last bits of a sum, but through q8_0 activation
# quantization that can change a token.
#
# Usage: scripts/make-adapter-goldens.sh   (GRAFT=path/to/graft to pick the
# binary, LLAMA_BIN=folder of llama.cpp's tools, CASES=arch:vocab:type ...,
# SETS="f16 f32-bf16" to record only some sets)
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
STRENGTH=1.0
# Per set: the file suffix, the adapters (id:rank:alpha:seed:targets:dtype,
# loaded in this order) and the selections (graft spec=id@scale,...).
# a: rank 8 on every projection; b: rank 16 on attention only; c: rank 8 on
# every projection in F32; d: rank 16 on the MLP in BF16.
set_suffix() { case $1 in f16) echo "" ;; f32-bf16) echo "-f32-bf16" ;; esac; }
set_adapters() {
  case $1 in
    f16) echo "a:8:16:1:all:f16 b:16:8:2:attn:f16" ;;
    f32-bf16) echo "c:8:16:3:all:f32 d:16:32:4:mlp:bf16" ;;
  esac
}
set_selections() {
  case $1 in
    f16) echo "none= a=a@1 b=b@1 b+a@0.5=a@0.5,b@1" ;;
    f32-bf16) echo "c=c@1 d=d@1 d+c@0.5=c@0.5,d@1" ;;
  esac
}
SETS=${SETS:-f16 f32-bf16}

# Small vocabularies keep the test quick: its time goes into the output layer.
# qwen35 (hybrid): 3 gated delta-net layers and 1 of full attention, tied
# output; "all" and "attn" then include the linear-attention projections.
# gemma3, gemma4 and minicpm: the golden models' shapes (scripts/make-goldens.sh);
# the gemma models slide over 4 positions, and gemma4's "all" and "attn"
# include its per-layer-input projections and skip the k and v its shared-KV
# layers lack.
CASES=${CASES:-llama:llama-spm:f16 qwen3:phi-3:q8_0 qwen35:llama-spm:f16 gemma3:llama-spm:f16
  gemma4:llama-spm:f16 minicpm:llama-spm:q8_0}
for case in $CASES; do
  IFS=: read -r arch vocab type <<<"$case"
  name=$arch-$type
  model=$WORK/$name.gguf
  LAYERS=2 TIED=0 EXTRA=() KVH=$KV_HEADS HEAD_DIM=0 SLIDING=0 PATTERN=0 ROPE_BASE=10000 MORE='{}'
  if [ "$arch" = qwen35 ]; then LAYERS=4 TIED=1 EXTRA=(--tied); fi
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
  "$GRAFT" make-test-model "$model" --arch "$arch" --vocab "$BUNDLE/models/ggml-vocab-$vocab.gguf" \
    --embd $EMBD --layers $LAYERS --heads $HEADS --kv-heads $KVH --ffn $FFN --ctx $CTX \
    --type "$type" --seed $SEED "${EXTRA[@]}" >/dev/null
  for set in $SETS; do
    read -r -a ADAPTERS <<<"$(set_adapters "$set")"
    LORA_ARGS=()
    for spec in "${ADAPTERS[@]}"; do
      IFS=: read -r id rank alpha seed targets dtype <<<"$spec"
      "$GRAFT" make-test-adapter --base "$model" --gguf "$WORK/$id.gguf" --rank "$rank" --alpha "$alpha" \
        --seed "$seed" --targets "$targets" --strength $STRENGTH --dtype "$dtype" >/dev/null
      LORA_ARGS+=(--lora "$WORK/$id.gguf")
    done
    "$LLAMA_BIN/llama-server" -m "$model" "${LORA_ARGS[@]}" -c $CTX --parallel 1 \
      -t "$(nproc)" --host 127.0.0.1 --port $PORT --cache-ram 0 --no-webui >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 120); do
      if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
      sleep 0.5
    done
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
    python3 - "$PORT" "$OUT/$name$(set_suffix "$set").json" "$arch" "$vocab" "$type" $EMBD $LAYERS $HEADS \
      $KVH $FFN $CTX $SEED $N_PREDICT "$(git -C "$BUNDLE" log -1 --format=%h 2>/dev/null || echo unknown)" \
      $STRENGTH $TIED "$HEAD_DIM:$SLIDING:$PATTERN:$ROPE_BASE" "$MORE" "$(set_selections "$set")" \
      "${ADAPTERS[@]}" <<'PY'
import json, sys, urllib.request
port, path, arch, vocab, wtype = sys.argv[1:6]
embd, layers, heads, kv_heads, ffn, ctx, seed, n_predict = map(int, sys.argv[6:14])
build = sys.argv[14]
strength = float(sys.argv[15])
tied = int(sys.argv[16])
head_dim, sliding, pattern, rope_base = map(int, sys.argv[17].split(":"))
more = json.loads(sys.argv[18])  # the family's own shape fields, as parity_test.cpp reads them
# graft's spec -> {adapter id: llama-server scale}
selections = {}
for item in sys.argv[19].split():
    spec, chosen = item.split("=")
    selections[spec] = {c.split("@")[0]: float(c.split("@")[1]) for c in chosen.split(",") if c}
specs = [s.split(":") for s in sys.argv[20:]]  # id, rank, alpha, seed, targets, dtype; loaded in this order
ids = [s[0] for s in specs]

def post(endpoint, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{endpoint}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())

texts = [
    "The quick brown fox",
    "Once upon a time, in a land far away, there lived a",
]
cases = []
for spec, chosen in selections.items():
    lora = [{"id": i, "scale": chosen.get(name, 0.0)} for i, name in enumerate(ids)]
    for text in texts:
        prompt = post("/tokenize", {"content": text, "add_special": True})["tokens"]
        res = post("/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                                   "cache_prompt": False, "return_tokens": True, "seed": 1, "n_probs": 0,
                                   "lora": lora})
        cases.append({"adapter": spec, "text": text, "prompt": prompt, "output": res["tokens"]})

def adapter(rank, alpha, seed, targets, dtype):
    return {"rank": int(rank), "alpha": float(alpha), "seed": int(seed), "targets": targets,
            "strength": strength, "dtype": dtype}

golden = {
    "generator": f"llama.cpp {build}: llama-server " + " ".join(f"--lora {i}.gguf" for i in ids) +
                 ", per-request lora scales, /completion greedy (temperature 0, top_k 1), no prompt cache",
    "model": {"arch": arch, "vocab": vocab, "embd": embd, "layers": layers, "heads": heads, "kv_heads": kv_heads,
              "ffn": ffn, "ctx": ctx, "type": wtype, "seed": seed},
    "adapters": {s[0]: adapter(*s[1:]) for s in specs},
    "cases": cases,
}
if tied:
    golden["model"]["tied"] = True
if head_dim:
    golden["model"]["head_dim"] = head_dim
if rope_base != 10000:
    golden["model"]["rope_base"] = rope_base
if sliding:
    golden["model"]["sliding_window"] = sliding
    golden["model"]["sliding_window_pattern"] = pattern
golden["model"].update(more)
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
done
