#!/usr/bin/env bash
# No function of the library (src/util, reactor, rpc, transport, store) is
# longer than 120 lines (issue 15): a long state handler or request body
# moves into named helpers. A function may be longer when the line before
# its name says why: "/* long: REASON */". (Functions are found as the
# tree's clang-format writes them: the name at column 0, "{" and "}" alone
# at column 0.)
set -u
cd "$(dirname "$0")/../../.."
MAX=120
bad=$(for f in $(git ls-files 'src/util/*.c' 'reactor/*.c' 'rpc/*.c' 'transport/*.c' \
  'transport/rdma/*.c' 'store/*.c'); do
  awk -v F="$f" -v MAX="$MAX" '
    /^[A-Za-z_].*\(/ { sig = $0; why = (prev ~ /\/\* long: /) }
    { if ($0 !~ /^[A-Za-z_].*\(/) prevline = $0 }
    /^\{/ { start = NR; name = sig; ok = why }
    /^\}/ && start { if (NR - start > MAX && !ok) printf "%s: %d lines: %s\n", F, NR - start, name; start = 0 }
    { prev = $0 }' "$f"
done)
if [ -n "$bad" ]; then
  echo "FAIL: functions over $MAX lines (split them, or say why with /* long: ... */):"
  echo "$bad"
  exit 1
fi
# the checker finds a long function (so a pass means something)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
{ echo "static void f(void)"; echo "{"; for i in $(seq 130); do echo "    x();"; done; echo "}"; } >"$T/long.c"
n=$(awk -v MAX="$MAX" '/^[A-Za-z_].*\(/ { sig = $0 } /^\{/ { start = NR } /^\}/ && start { if (NR - start > MAX) print sig; start = 0 }' "$T/long.c")
[ "$n" = "static void f(void)" ] || { echo "FAIL: the checker missed a 130-line function"; exit 1; }
echo "function_length_test: all checks passed"
