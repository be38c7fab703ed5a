#!/usr/bin/env bash
# Checks that every C++ file of the repository (*.cpp, *.h) is formatted as
# the repo's .clang-format says, with Debian 12's clang-format (14;
# scripts/setup.sh installs it). Lists the files that are not, with the first
# lines that differ, and fails. `make format` formats them all; `make test`
# runs this check as its ctest test `clang_format`; `make format-check` alone.
set -euo pipefail
cd "$(dirname "$0")/.."

FORMAT=$(command -v clang-format || true)
if [ -z "$FORMAT" ]; then
  echo "check-format: clang-format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi

# In a git checkout: the tracked files and new ones not ignored (that still
# exist); in an unpacked copy without .git: every C++ file under src, tests
# and tools.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' |
    sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
  mapfile -t files < <(find src tests tools -name node_modules -prune -o \( -name '*.cpp' -o -name '*.h' \) -print | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check-format: no C++ files found in $PWD" >&2
  exit 1
fi

# One clang-format for all files; it names each unformatted one in an error line.
report=$("$FORMAT" --dry-run --Werror "${files[@]}" 2>&1 >/dev/null) && rc=0 || rc=$?
mapfile -t bad < <(printf '%s\n' "$report" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$rc" -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
  printf '%s\n' "$report" >&2
  echo "check-format: clang-format failed (exit $rc)" >&2
  exit 1
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted ($("$FORMAT" --version)):" >&2
  for f in "${bad[@]}"; do
    echo "--- $f" >&2
    "$FORMAT" "$f" | diff "$f" - | head -n 12 >&2 || true
  done
  echo "check-format: run 'make format' (or clang-format -i FILE) and commit the result" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted ($("$FORMAT" --version | head -n 1))"
