#!/usr/bin/env bash
# fault_service.sh - co-located clients killed in the middle of puts, many
# times: the store service must end every session and free its memory.
#
#   perf/fault_service.sh [-n CYCLES] [-s VALUE_SIZE] [-w WARMUP_CYCLES]
#
# Starts a mooncake-master and a mooncake-store-server with service.enabled
# (store.global_segment_size 256 MiB, lease_ttl 1 s), then CYCLES times:
# starts test/bin/store_dummy --mode churn (a co-located client putting
# VALUE_SIZE values from its shared pool in a loop), waits for its first put,
# lets it run 0-20 ms and SIGKILLs it. Prints the service's open descriptors
# and resident memory (/proc) after the warm-up cycles and at the end, every
# 100 cycles in between, and fails (exit 1) when the descriptors grew or the
# resident memory grew by more than 32 MiB; then a store_dummy work round
# checks that the service still serves. make check runs a 30-cycle version
# (store_service_test); this is the 1,000-cycle one (default -n 1000).
set -u
# storage nodes take a free HTTP port (several per host here; store.http_port)
export MC_STORE_HTTP_PORT=${MC_STORE_HTTP_PORT:-0}
BUILD=${BUILD:-build}
BIN=${TEST_BIN_DIR:-$BUILD/test/bin}
CYCLES=1000
SIZE=1048576
WARM=10
while getopts "n:s:w:h" o; do
  case $o in
    n) CYCLES=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    w) WARM=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
for f in "$BUILD/mooncake-master" "$BUILD/mooncake-store-server" "$BIN/store_dummy"; do
  [ -x "$f" ] || { echo "fault_service.sh: $f missing (make all tests)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fault_service.XXXXXX")
pids=()
keep=0
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$keep" = 1 ]; then echo "logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

wait_line() { # file ERE -> the line (30 s: the machine may be loaded)
  for _ in $(seq 600); do
    grep -E -m1 -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

"$BUILD/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=0 \
  --set server.http_port=0 --set server.reactors=1 --set master.lease_ttl=1s \
  --set log.level=info >"$tmp/master.out" 2>"$tmp/master.log" &
pids+=($!)
l=$(wait_line "$tmp/master.log" 'ready: rpc [^ ]+:[0-9]+') || { cat "$tmp/master.log"; exit 1; }
master=$(echo "$l" | sed -E 's/.*ready: rpc ([^ ,]+:[0-9]+).*/\1/')
port=$((30000 + RANDOM % 20000))
"$BUILD/mooncake-store-server" --set "store.master=$master" --set store.global_segment_size=256MiB \
  --set store.reactors=1 --set service.enabled=true --set "service.port=$port" \
  --set log.level=warn >"$tmp/node.out" 2>"$tmp/node.log" &
svc=$!
pids+=($svc)
wait_line "$tmp/node.out" '^service ' >/dev/null || { cat "$tmp/node.log"; exit 1; }

usage_of() { # pid -> "FDS RSS_KIB"
  local fds rss
  fds=$(ls "/proc/$1/fd" | wc -l)
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status")
  echo "$fds $rss"
}

echo "fault_service: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPU(s), $CYCLES kill cycles, values of $SIZE bytes"
start=$(date +%s)
base=""
for i in $(seq 1 "$CYCLES"); do
  out="$tmp/d.$i.out" # its own file: no stale line of the cycle before
  TEST_LOG=warn "$BIN/store_dummy" --service "127.0.0.1:$port" --mode churn --id "$i" --size "$SIZE" \
    --pool $((4 * SIZE + 1048576)) --staging 1048576 >"$out" 2>>"$tmp/d.err" &
  d=$!
  if ! wait_line "$out" '^(running|fail)' >/dev/null || ! grep -q running "$out"; then
    kill -KILL "$d" 2>/dev/null; wait "$d" 2>/dev/null
    echo "cycle $i: the client did not start within 30 s: $(cat "$out")" >&2
    tail -n 20 "$tmp/d.err" "$tmp/node.log" >&2
    keep=1
    exit 1
  fi
  sleep "0.0$((RANDOM % 20))"
  kill -KILL "$d"
  wait "$d" 2>/dev/null
  rm -f "$out"
  if [ "$i" = "$WARM" ]; then
    sleep 0.2
    base=$(usage_of "$svc")
    echo "after $i warm-up cycles: service fds/RSS KiB: $base"
  elif [ $((i % 100)) = 0 ]; then
    echo "after $i cycles: $(usage_of "$svc")"
  fi
done
sleep 1 # the last sessions end (their connections' ends reach the service)
end=$(usage_of "$svc")
secs=$(( $(date +%s) - start ))
echo "after $CYCLES cycles ($secs s): service fds/RSS KiB: $end"
set -- $base $end
if [ "$3" -gt "$1" ]; then echo "FAIL: descriptors grew ($1 -> $3)"; exit 1; fi
if [ "$4" -gt $(( $2 + 32768 )) ]; then echo "FAIL: resident memory grew by more than 32 MiB ($2 -> $4 KiB)"; exit 1; fi
"$BIN/store_dummy" --service "127.0.0.1:$port" --count 5 --size 100000 >"$tmp/w.out" ||
  { echo "FAIL: the service does not serve any more: $(cat "$tmp/w.out")"; exit 1; }
echo "ok: descriptors $1 -> $3, resident $2 -> $4 KiB; the service still serves ($(cat "$tmp/w.out"))"
