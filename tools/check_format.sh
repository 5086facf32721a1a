#!/usr/bin/env bash
# tools/check_format.sh [--fix] [FILE...] — clang-format (Debian 12: clang-format 14) over the C++
# sources with the repository's .clang-format. Without --fix: prints each difference
# (`clang-format --dry-run`) and their count, exit 1 when there is any. With --fix: rewrites the
# files in place. Default files: every tracked .cpp/.h/.cu/.cuh outside tests/fixtures/.
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=0
if [ "${1:-}" = "--fix" ]; then FIX=1; shift; fi
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^tests/fixtures/')
fi
if [ "$FIX" = 1 ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
n=$(clang-format --dry-run --style=file "${files[@]}" 2>&1 | tee /dev/stderr | grep -c 'warning:' || true)
echo "check_format: $n difference(s) from .clang-format in ${#files[@]} files"
[ "$n" -eq 0 ]
