#!/usr/bin/env bash
# make format-check: every tracked .c and .h file is as clang-format writes it
# with the checked-in .clang-format (`make format` rewrites them so).
#
#   mk/check-format.sh [ROOT]   prints clang-format's complaints, exit 1 if any
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
mapfile -t files < <(git ls-files '*.c' '*.h')
[ ${#files[@]} -gt 0 ] || exit 0
if ! clang-format --dry-run -Werror "${files[@]}"; then
    echo "format-check: files above differ from .clang-format (make format fixes them)"
    exit 1
fi
