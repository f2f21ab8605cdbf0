#!/usr/bin/env bash
# Run the test binaries of $BUILD: unit tests, then integration tests.
#   test/run.sh [unit|integration|all]
# Each test runs under a time limit; the last line is "N passed, N failed".
set -u
BUILD=${BUILD:-build}
what=${1:-all}
export TEST_BUILD_DIR="$BUILD"
export TEST_BIN_DIR="$BUILD/test/bin"
# ThreadSanitizer: the emulated RDMA NIC's copies stand for DMA (test/tsan.supp)
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"

pass=0
fail=0
failed=()

run_one() {
  local t=$1 limit=$2
  local name=${t#$BUILD/}
  local log
  log=$(mktemp)
  local start=$SECONDS
  if timeout --signal=KILL "$limit" "$t" >"$log" 2>&1; then
    pass=$((pass + 1))
    printf 'PASS %-50s %3ds\n' "$name" $((SECONDS - start))
  else
    local rc=$?
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL %-50s %3ds (exit %d)\n' "$name" $((SECONDS - start)) "$rc"
    tail -n 60 "$log" | sed 's/^/    | /'
  fi
  rm -f "$log"
}

if [ "$what" = unit ] || [ "$what" = all ]; then
  for t in $(find "$BUILD/test/unit" -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" 120
  done
  for t in $(find test/unit -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" 120
  done
fi
if [ "$what" = integration ] || [ "$what" = all ]; then
  for t in $(find "$BUILD/test/integration" -maxdepth 1 -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" 300
  done
  for t in $(find test/integration -maxdepth 1 -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" 300
  done
  for t in $(find "$BUILD/test/fault" -maxdepth 1 -type f -name '*_test' 2>/dev/null | sort); do
    run_one "$t" 300
  done
  for t in $(find test/fault -maxdepth 1 -type f -name '*_test.sh' 2>/dev/null | sort); do
    run_one "$t" 300
  done
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
