#!/usr/bin/env bash
# make check-funcs: no function of the library (src/util, reactor, rpc,
# transport, store) is longer than 120 lines: a long state handler or request
# body moves into named helpers. A longer one passes when a comment line just
# above its name says why, starting "long:" (e.g. "/* long: one switch over
# every option, a case each */").
#
# A function's length is the count of lines after its opening brace, up to
# and including its closing one. Functions are found as the tree's
# clang-format writes them (make format-check): the name line at column 0,
# "{" and "}" alone at column 0.
#
#   mk/check-funcs.sh [ROOT]   checks git ls-files of the library folders of
#                              ROOT (default: the repository this script is
#                              in); one line per violation, exit 1 if any.
set -euo pipefail

MAX=${CHECK_FUNCS_MAX:-120}
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
mapfile -t files < <(git ls-files 'src/util/*.c' 'reactor/*.c' 'rpc/*.c' 'transport/*.c' 'store/*.c')
[ ${#files[@]} -gt 0 ] || exit 0
bad=$(awk -v MAX="$MAX" '
    FNR == 1 { start = 0; cmt = 0; why = 0 }
    # outside a body: remember whether the comment lines just above say "long:"
    !start && /^[ \t]*(\/\*|\*|\/\/)/ { if ($0 ~ /long:/) cmt = 1; next }
    !start && /^[A-Za-z_].*\(/ { name = $0; line = FNR; why = cmt; cmt = 0; next }
    !start && /^\{/ { start = FNR; next }
    start && /^\}/ {
        if (FNR - start > MAX && !why) {
            sub(/\(.*/, "", name)
            n = split(name, w, /[ *]+/)
            printf "%s:%d: %s is %d lines (over %d): split it into named helpers, or say why in a comment line \"long: REASON\" just above it\n", FILENAME, line, w[n], FNR - start, MAX
        }
        start = 0; why = 0; next
    }
    !start && !/^[ \t]*$/ { cmt = 0 }
' "${files[@]}")
if [ -n "$bad" ]; then
    echo "$bad"
    echo "check-funcs: functions over $MAX lines (see above)"
    exit 1
fi
