#!/usr/bin/env bash
# A log file that cannot be written fails the start (issue 13, finding 8):
# both daemons exit non-zero at once naming the file and the cause, instead
# of running and dropping every line.
set -u
B=${TEST_BUILD_DIR:-build}
T=$(mktemp -d "${TMPDIR:-/tmp}/mc-logtest.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for prog in mooncake-master mooncake-store-server; do
  # port 0 and no master needed: it must stop before it gets that far
  timeout 10 "$B/$prog" --set log.file=/dev/full --set log.level=info >"$T/out" 2>"$T/err"
  rc=$?
  [ "$rc" = 124 ] && fail "$prog ran with log.file=/dev/full"
  [ "$rc" != 0 ] || fail "$prog exited 0 with log.file=/dev/full"
  grep -q "log.file: cannot write '/dev/full': No space left on device" "$T/err" ||
    fail "$prog: no reason given: $(cat "$T/err")"
done
echo "log_file_test: all checks passed"
