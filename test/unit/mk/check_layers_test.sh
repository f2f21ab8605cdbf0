#!/usr/bin/env bash
# mk/check-layers.sh, mk/check-format.sh and mk/check-funcs.sh on small trees
# built here: a tree that keeps its rules passes; each deliberate violation
# fails and the message names the file and what it did.
set -euo pipefail
top=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

failures=0
expect() { # expect pass|fail WHAT PATTERN -- CMD...: CMD's outcome and output
    local want=$1 what=$2 pattern=$3 out rc=0
    shift 4
    out=$("$@" 2>&1) || rc=$?
    if [ "$want" = pass ] && [ $rc -ne 0 ]; then
        echo "FAIL $what: expected to pass, exit $rc:"; echo "$out"; failures=$((failures + 1))
    elif [ "$want" = fail ] && [ $rc -eq 0 ]; then
        echo "FAIL $what: expected to fail, passed"; failures=$((failures + 1))
    elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" <<<"$out"; then
        echo "FAIL $what: output lacks '$pattern':"; echo "$out"; failures=$((failures + 1))
    else
        echo "ok   $what"
    fi
}

# --- layers: lo/ is the bottom, hi/ may use lo/ except its private header
t=$tmp/layers
mkdir -p "$t/lo" "$t/hi"
cat >"$t/lo/README.md" <<'MD'
# lo
```layers
*.h *.c : lo
```
MD
cat >"$t/hi/README.md" <<'MD'
# hi
```layers
# a comment line
*        : hi lo !lo/*_int.h
net.c    : <event2/*>
```
MD
printf '#include <stdint.h>\n' >"$t/lo/a.h"
printf '#include "lo/a.h"\n' >"$t/lo/a_int.h"
printf '#include "lo/a_int.h"\n#include "a.h"\n#include <sys/socket.h>\n' >"$t/lo/a.c"
printf '#include "lo/a.h"\n#include <string.h>\n' >"$t/hi/b.c"
printf '#include "hi/b.h"\n#include <event2/event.h>\n' >"$t/hi/net.c"
printf '/* nothing */\n' >"$t/hi/b.h"
git -C "$t" init -q
git -C "$t" add -A
check_layers() { "$top/mk/check-layers.sh" "$t"; }
expect pass "a tree within its rules passes" "" -- check_layers

printf '#include "lo/a_int.h"\n' >>"$t/hi/b.c"
expect fail "a private header included from another folder fails" \
    "hi/b.c: includes lo/a_int.h, which hi/README.md does not allow" -- check_layers
printf '#include "lo/a.h"\n' >"$t/hi/b.c"

printf '#include "hi/b.h"\n' >>"$t/lo/a.c"
expect fail "an include upwards fails" \
    "lo/a.c: includes hi/b.h, which lo/README.md does not allow" -- check_layers
printf '#include "a.h"\n' >"$t/lo/a.c"

printf '#include <event2/event.h>\n' >>"$t/hi/b.c"
expect fail "a foreign library outside the files allowed to use it fails" \
    "hi/b.c: includes <event2/event.h>, which hi/README.md does not allow" -- check_layers
printf '#include "lo/a.h"\n' >"$t/hi/b.c"

printf '#include "lo/gone.h"\n' >>"$t/hi/b.c"
expect fail "an include of a missing file fails" \
    "hi/b.c: includes \"lo/gone.h\", which is no file of the repository" -- check_layers
printf '#include "lo/a.h"\n' >"$t/hi/b.c"

mkdir -p "$t/lo/sub"
printf '#include "lo/a.h"\n' >"$t/lo/sub/c.c"
git -C "$t" add -A
expect pass "a subfolder without a README follows its parent's rule" "" -- check_layers

mkdir -p "$t/other"
printf '/* x */\n' >"$t/other/d.c"
git -C "$t" add -A
expect fail "a file under no rule fails" \
    "other/d.c: no README.md above it has a layers block" -- check_layers
git -C "$t" rm -q --cached other/d.c

sed -i 's/^\*\.h \*\.c : lo$/*.h : lo/' "$t/lo/README.md"
expect fail "a file no rule line names fails" \
    "lo/a.c: no line of lo/README.md's layers block names it" -- check_layers

# --- format: the project's .clang-format
f=$tmp/format
mkdir -p "$f"
cp "$top/.clang-format" "$f/"
printf 'int add(int a, int b)\n{\n    return a + b;\n}\n' >"$f/ok.c"
git -C "$f" init -q
git -C "$f" add -A
check_format() { "$top/mk/check-format.sh" "$f"; }
expect pass "formatted files pass format-check" "" -- check_format
printf 'int  sub(int a,int b){return a-b;}\n' >"$f/bad.c"
git -C "$f" add -A
expect fail "a file clang-format would change fails format-check" "bad.c" -- check_format

# --- function length: library folders, 120 lines after the opening brace
fn=$tmp/funcs
mkdir -p "$fn/store" "$fn/perf"
body() { # body NAME LINES: a function LINES long (lines after "{", "}" included)
    echo "static void $1(int *p)"
    echo "{"
    for _ in $(seq $(($2 - 1))); do echo "    (*p)++;"; done
    echo "}"
}
{ body short 120; echo; } >"$fn/store/a.c"
body long 130 >"$fn/perf/bench.c" # not the library: not checked
git -C "$fn" init -q
git -C "$fn" add -A
check_funcs() { "$top/mk/check-funcs.sh" "$fn"; }
expect pass "functions of 120 lines, and long ones outside the library, pass" "" -- check_funcs
{ echo "/* a comment that says nothing */"; body too_long 121; } >>"$fn/store/a.c"
git -C "$fn" add -A
expect fail "a library function of 121 lines fails"     "store/a.c:125: too_long is 121 lines (over 120)" -- check_funcs
{ echo "/* A long one: the checker wants a reason.";
  echo " * long: one case per option, nothing to share */"; body justified 200; } >"$fn/store/b.c"
sed -i '/a comment that says nothing/,$d' "$fn/store/a.c"
git -C "$fn" add -A
expect pass "a long function with a \"long:\" comment just above it passes" "" -- check_funcs
{ echo "/* long: this reason belongs to the prototype below */";
  echo "static void proto(int *p);"; body unjustified 150; } >"$fn/store/c.c"
git -C "$fn" add -A
expect fail "a \"long:\" comment above other code justifies nothing"     "store/c.c:3: unjustified is 150 lines" -- check_funcs

echo "check_layers_test: $failures failed"
[ $failures -eq 0 ]
