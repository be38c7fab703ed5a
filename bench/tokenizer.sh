#!/usr/bin/env bash
# Tokenizer throughput, graft next to llama.cpp's llama-tokenize, on the same
# vocabularies and the same few MB of mixed text (prose in many scripts,
# code, numbers, emoji, odd whitespace). Prints one table:
#
#   graft in-proc MB/s   the tokenize call alone: its CPU time as `graft tokenize --timing` reports it
#   graft MB/s           CPU time (user + sys) of the whole process minus that
#                        of the same process on a 1-byte text (the vocabulary load)
#   llama.cpp MB/s       the same subtraction for llama-tokenize
#   ratio                llama.cpp's CPU time over graft's (above 1: graft is faster)
#   ids                  whether both produced exactly the same token ids
#
# CPU time rather than wall time keeps the figures steady on a busy machine.
# Both tools print every id to a file; each figure is the best of RUNS runs.
# Usage:
#   bench/tokenizer.sh                       # default vocabularies, 4 MB
#   SIZE_MB=8 VOCABS="llama-bpe qwen2" RUNS=5 bench/tokenizer.sh
# GRAFT (default build/bin/graft) and LLAMA_BIN (default .llama-cpp/bin) pick
# the binaries; llama.cpp's tools are built with scripts/build-llama-cpp.sh
# when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

GRAFT=${GRAFT:-$ROOT/build/bin/graft}
LLAMA_BIN=${LLAMA_BIN:-$ROOT/.llama-cpp/bin}
SIZE_MB=${SIZE_MB:-4}
RUNS=${RUNS:-3}
VOCABS=${VOCABS:-"llama-bpe qwen2 gemma-4 llama-spm gpt-2"}
MODELS=$ROOT/.deps/llama.cpp/models

if [ ! -x "$GRAFT" ]; then
  echo "graft binary not found at $GRAFT (build it: cmake --build build --target graft, or set GRAFT=...)" >&2
  exit 1
fi
if [ ! -x "$LLAMA_BIN/llama-tokenize" ]; then
  echo "llama-tokenize not found in $LLAMA_BIN; building llama.cpp's tools (takes a while)" >&2
  LLAMA_BIN=$(scripts/build-llama-cpp.sh)
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CORPUS=$WORK/corpus.txt
printf 'x' >"$WORK/one.txt"

# The corpus: bench/data/mixed.txt with its lines shuffled (seeded), then one
# of graft's own tracked source files, again and again up to SIZE_MB.
python3 - "$ROOT" "$((SIZE_MB * 1000 * 1000))" "$CORPUS" <<'EOF'
import random, subprocess, sys
root, target, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mixed = open(f"{root}/bench/data/mixed.txt", encoding="utf-8", newline="").read()
files = subprocess.run(["git", "-C", root, "ls-files", "src", "tests", "tools", "scripts", "*.md"],
                       capture_output=True, text=True, check=True).stdout.split()
code = [open(f"{root}/{f}", encoding="utf-8", errors="replace", newline="").read() for f in sorted(files)]
rng = random.Random(20240229)
lines = mixed.splitlines(keepends=True)
parts, size, i = [], 0, 0
while size < target:
    rng.shuffle(lines)
    chunk = "".join(lines) + code[i % len(code)]
    i += 1
    parts.append(chunk)
    size += len(chunk.encode("utf-8"))
data = "".join(parts).encode("utf-8")[:target]
while data and (data[-1] & 0xC0) == 0x80:  # do not end inside a character
    data = data[:-1]
if data and data[-1] >= 0xC0:
    data = data[:-1]
open(out_path, "wb").write(data)
EOF
BYTES=$(stat -c %s "$CORPUS")

cpu_ms() {  # command... -> prints the user + sys CPU milliseconds it took
  /usr/bin/time -f '%U %S' -o "$WORK/time" "$@"
  python3 -c "import sys; u, s = map(float, open(sys.argv[1]).read().split()[-2:]); print(f'{(u + s) * 1000:.0f}')" \
    "$WORK/time"
}
mbps() { python3 -c "import sys; b, ms = float(sys.argv[1]), float(sys.argv[2]); print(f'{b / 1e6 / (ms / 1e3):.2f}' if ms > 0 else 'n/a')" "$1" "$2"; }
best() { sort -g | head -1; }

graft_run() {  # vocab file out timings -> prints CPU ms; appends the in-process ms to `timings`
  cpu_ms sh -c '"$0" tokenize "$1" -f "$2" --no-special --timing >"$3" 2>"$4"' \
    "$GRAFT" "$MODELS/ggml-vocab-$1.gguf" "$2" "$3" "$WORK/graft.err"
  sed -n 's/.* ms, \([0-9.]*\) ms CPU.*/\1/p' "$WORK/graft.err" >>"$4"
}
llama_run() {  # vocab file out -> prints CPU ms
  cpu_ms sh -c '"$0" -m "$1" -f "$2" --ids --log-disable --no-bos --no-parse-special --no-escape >"$3" 2>/dev/null' \
    "$LLAMA_BIN/llama-tokenize" "$MODELS/ggml-vocab-$1.gguf" "$2" "$3"
}

echo "tokenizer throughput on $(python3 -c "print(f'{$BYTES / 1e6:.2f}')") MB of mixed text, best of $RUNS runs" \
  "($(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg))"
printf '%-14s %10s %14s %10s %14s %7s  %s\n' vocab tokens "graft in-proc" "graft" "llama.cpp" "ratio" "ids"
printf '%-14s %10s %14s %10s %14s %7s  %s\n' "" "" "MB/s" "MB/s" "MB/s" "" "identical"
for vocab in $VOCABS; do
  if [ ! -f "$MODELS/ggml-vocab-$vocab.gguf" ]; then
    echo "$vocab: no such vocabulary in $MODELS" >&2
    continue
  fi
  : >"$WORK/inproc"
  g_full=() g_base=() l_full=() l_base=()
  for _ in $(seq "$RUNS"); do
    g_full+=("$(graft_run "$vocab" "$CORPUS" "$WORK/graft.ids" "$WORK/inproc")")
    g_base+=("$(graft_run "$vocab" "$WORK/one.txt" /dev/null /dev/null)")
    l_full+=("$(llama_run "$vocab" "$CORPUS" "$WORK/llama.ids")")
    l_base+=("$(llama_run "$vocab" "$WORK/one.txt" /dev/null)")
  done
  g_ms=$(python3 -c "import sys; print(min(map(float, sys.argv[1].split())) - min(map(float, sys.argv[2].split())))" \
    "${g_full[*]}" "${g_base[*]}")
  l_ms=$(python3 -c "import sys; print(min(map(float, sys.argv[1].split())) - min(map(float, sys.argv[2].split())))" \
    "${l_full[*]}" "${l_base[*]}")
  inproc_ms=$(best <"$WORK/inproc")
  tokens=$(wc -w <"$WORK/graft.ids")
  if [ "$(tr -d '[],' <"$WORK/llama.ids" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')" == \
       "$(tr -s ' \n' ' ' <"$WORK/graft.ids" | sed 's/^ //; s/ $//')" ]; then
    same=yes
  else
    same=NO
  fi
  g_rate=$(mbps "$BYTES" "$g_ms")
  l_rate=$(mbps "$BYTES" "$l_ms")
  ratio=$(python3 -c "import sys; print(f'{float(sys.argv[2]) / float(sys.argv[1]):.1f}x')" "$g_ms" "$l_ms")
  printf '%-14s %10s %14s %10s %14s %7s  %s\n' "$vocab" "$tokens" "$(mbps "$BYTES" "$inproc_ms")" "$g_rate" \
    "$l_rate" "$ratio" "$same"
done

[ "${PARITY:-1}" = 0 ] && exit 0

# Adversarial text: random runs drawn from many character pools, with special
# token texts (and whitespace around them) between the runs.
FUZZ=$WORK/fuzz.txt
python3 - "$FUZZ" <<'PY'
import random, sys
rng = random.Random(6)
pools = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "0123456789\u0660\u0661\u096a\u0be8",
    " ", "\t", "\n", "\r\n", "\r", "\u00a0\u2009\u3000\u2028\u2029\u0085\u200b\u202f\u205f\u1680\v\f\x1c\x1f",
    ".,;:!?\u00bf\u00a1\u2026\u2014\u2013-_()[]{}<>/\\|@#$%^&*+=~`\"\u201c\u201d\u2018\u2019\u00ab\u00bb",
    "\u00e9\u00e8\u00ea\u00eb\u00e0\u00e2\u00e4\u00f4\u00f6\u00fc\u00e7\u00f1\u00df\u00f8\u00e5\u00e6\u0153\u00c9\u00c7",
    "\u0430\u0431\u0432\u0433\u0434\u0435\u0451\u0436\u0437\u0438\u0439\u041a\u041b",
    "\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8\u0391\u0392", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\u4e00\u9fa5",
    "\u3072\u3089\u304c\u306a\u30ab\u30bf\u30ab\u30ca\uff76\uff80", "\ud55c\uad6d\uc5b4\uac00\ud7a3",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u0641\u0627\u0631\u0633\u06cc", "\u0939\u093f\u0928\u094d\u0926\u0940\u09ac\u09be",
    "\u0e44\u0e17\u0e22\u0ea5\u0eb2\u0ea7\u1781\u17d2\u1798\u17c2\u179a", "\u0301\u0308\u0327\u20dd\u0903",
    "\U0001f999\U0001f680\u2705\u274c\U0001f44d\U0001f3fd\u200d\ufe0f\U0001f1eb\U0001f1f7",
    "\u2200\u2208\u211d\u00b2\u2211\u222b\u221a\u221e", "\uff21\uff22\uff41\uff42\uff11\uff12\uff01\uff1f",
    "\ufb01\ufb02\u01c5\u01c8\u216b\u217b\u2460", "\U0001d400\U0001d41a\U00010400\U0001e900", "\ufffd\ufeff\u00ad",
]
words = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'RE", "'LL", "\u2581", "\u2581\u2581"]
specials = ["<s>", "</s>", "<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>",
            "<|begin_of_text|>", "<|start_header_id|>", "<|reserved_special_token_10|>",
            "<|reserved_special_token_1|>", "[INST]", "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|end|>",
            "<|assistant|>", "<turn|>", "<|turn>", "<bos>", "<eos>", "<|fim_prefix|>", "<|END_OF_TURN_TOKEN|>",
            "<\uff5cend\u2581of\u2581sentence\uff5c>"]
out = []
for _ in range(40000):
    r = rng.random()
    if r < 0.05:
        out.append(rng.choice(["", " ", "\n", "  "]) + rng.choice(specials) + rng.choice(["", " ", "\n", " \n "]))
    elif r < 0.15:
        out.append(rng.choice(words))
    else:
        pool = rng.choice(pools)
        out.append("".join(rng.choice(pool) for _ in range(rng.choice([1, 1, 2, 3, 5, 8, 13]))))
open(sys.argv[1], "w", encoding="utf-8").write("".join(out))
PY

metadata() {  # file key -> the value `graft inspect` shows, quotes removed
  "$GRAFT" inspect "$1" 2>/dev/null | awk -v key="$2" '$1 == key {gsub(/"/, "", $2); print $2}'
}

echo
echo "parity with llama-tokenize on $(($(stat -c %s "$FUZZ") / 1000)) KB of generated text: ids identical?"
printf '%-16s %-7s %-15s %8s  %s\n' vocab model pre tokens "plain / parse_special"
for path in "$MODELS"/ggml-vocab-*.gguf; do
  vocab=$(basename "$path" .gguf)
  vocab=${vocab#ggml-vocab-}
  model=$(metadata "$path" tokenizer.ggml.model)
  pre=$(metadata "$path" tokenizer.ggml.pre)
  if ! "$GRAFT" tokenize "$path" x >/dev/null 2>&1; then
    printf '%-16s %-7s %-15s %8s  %s\n' "$vocab" "$model" "${pre:--}" - "not supported by graft"
    continue
  fi
  results=()
  for parse in no yes; do
    if [ $parse = yes ]; then lflag=; gflag=--parse-special; else lflag=--no-parse-special; gflag=--no-parse-special; fi
    "$LLAMA_BIN/llama-tokenize" -m "$path" -f "$FUZZ" --ids --log-disable --no-escape $lflag 2>/dev/null |
      tr -d '[],' | tr -s ' \n' '\n' | grep -v '^$' >"$WORK/llama.fuzz" || true
    "$GRAFT" tokenize "$path" -f "$FUZZ" $gflag 2>/dev/null | tr -s ' \n' '\n' | grep -v '^$' >"$WORK/graft.fuzz"
    if cmp -s "$WORK/llama.fuzz" "$WORK/graft.fuzz"; then results+=(yes); else results+=(NO); fi
  done
  printf '%-16s %-7s %-15s %8s  %s / %s\n' "$vocab" "$model" "${pre:--}" "$(wc -l <"$WORK/graft.fuzz")" \
    "${results[0]}" "${results[1]}"
done
