#!/usr/bin/env bash
# conf/*.conf list every key of their program with its default: the values
# (comments aside) are what `PROGRAM --dump-config` prints on no file, so a
# key added to a program without its conf file fails here.
set -u
B=${TEST_BUILD_DIR:-build}
rc=0
for f in conf/*.conf; do
  p=$(basename "$f" .conf)
  [ -x "$B/$p" ] || { echo "FAIL: $f: no program $B/$p"; rc=1; continue; }
  d=$(diff <(env -i "$B/$p" --dump-config | grep -v '^;' | grep .) <(grep -v '^;' "$f" | grep .))
  [ -z "$d" ] || { echo "FAIL: $f differs from $p --dump-config (< program, > file):"; echo "$d"; rc=1; }
done
[ "$rc" = 0 ] && echo "conf_files_test: all checks passed"
exit $rc
