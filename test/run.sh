#!/usr/bin/env bash
# Run the test binaries of $BUILD: unit tests, integration tests, then the
# Python tests (test/python, one pytest run per file, when $BUILD/python
# holds the package: not in sanitizer builds).
#   test/run.sh [unit|integration|python|all]
# Each test runs under a time limit; the last line is "N passed, N failed".
# TEST_SLOW (the Makefile sets it: 5 under ThreadSanitizer, 2 under
# AddressSanitizer, else 1) multiplies every limit; the tests' own timeouts
# follow the same factor (TC_SLOW, test/integration/cluster.h).
set -u
BUILD=${BUILD:-build}
what=${1:-all}
SLOW=${TEST_SLOW:-1}
case $SLOW in
'' | *[!0-9]* | 0)
  echo "run.sh: TEST_SLOW must be a positive whole number, not '$SLOW'" >&2
  exit 2
  ;;
esac
export TEST_SLOW=$SLOW
export TEST_BUILD_DIR="$BUILD"
export TEST_BIN_DIR="$BUILD/test/bin"
# ThreadSanitizer: the emulated RDMA NIC's copies stand for DMA (test/tsan.supp)
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"

pass=0
fail=0
failed=()

# run_one PATH LIMIT [COMMAND...]: run COMMAND (default: PATH itself), named
# by PATH, under a time limit.
run_one() {
  local t=$1 limit=$2
  shift 2
  [ $# -gt 0 ] || set -- "$t"
  local name=${t#$BUILD/}
  local log
  log=$(mktemp)
  local start=$SECONDS
  if timeout --signal=KILL "$limit" "$@" >"$log" 2>&1; then
    pass=$((pass + 1))
    printf 'PASS %-50s %3ds\n' "$name" $((SECONDS - start))
  else
    local rc=$?
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL %-50s %3ds (exit %d)\n' "$name" $((SECONDS - start)) "$rc"
    # cmocka's first failed assertions, which a long tail (a sanitizer's
    # leak report after a failed test) may not reach
    if grep -qE '^\[   LINE   \]' "$log"; then
      echo "    | (first failed assertions)"
      grep -m 6 -E '^\[  ERROR   \]|^\[   LINE   \]' "$log" | sed 's/^/    | /'
      echo "    | (last 60 lines)"
    fi
    tail -n 60 "$log" | sed 's/^/    | /'
  fi
  rm -f "$log"
}

if [ "$what" = unit ] || [ "$what" = all ]; then
  for t in $(find "$BUILD/test/unit" -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" $((120 * SLOW))
  done
  for t in $(find test/unit -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" $((120 * SLOW))
  done
fi
if [ "$what" = integration ] || [ "$what" = all ]; then
  for t in $(find "$BUILD/test/integration" -maxdepth 1 -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" $((300 * SLOW))
  done
  for t in $(find test/integration -maxdepth 1 -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" $((300 * SLOW))
  done
  for t in $(find "$BUILD/test/fault" -maxdepth 1 -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" $((300 * SLOW))
  done
  for t in $(find test/fault -maxdepth 1 -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" $((300 * SLOW))
  done
fi
if [ "$what" = python ] || [ "$what" = all ]; then
  if [ -f "$BUILD/python/mooncake/__init__.py" ]; then
    for t in $(find test/python -maxdepth 1 -type f -name 'test_*.py' 2>/dev/null | sort); do
      run_one "$t" $((300 * SLOW)) env PYTHONPATH="$BUILD/python" /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider "$t"
    done
  elif [ "$what" = python ]; then
    echo "no Python package in $BUILD/python (make python)"
    fail=$((fail + 1))
  fi
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
