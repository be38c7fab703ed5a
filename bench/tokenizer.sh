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
