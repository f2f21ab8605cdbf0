#!/usr/bin/env bash
# master_bench BatchPut against one mooncake-master with ha.sync = off /
# async / strict (redis-server on loopback), with and without a standby
# following the journal. Short runs: DURATION s x REPS, median.
#
#   perf/ha_bench.sh [DURATION=3] [REPS=3]
set -u
BUILD=${BUILD:-build}
DUR=${1:-3}
REPS=${2:-3}
. "$(dirname "$0")/ha_lib.sh"
ha_setup mc-ha-bench
master() { # port http sync cluster
  local ha=()
  [ "$3" != none ] && ha=(--set ha.backend=redis://127.0.0.1:$RPORT/0 --set ha.sync=$3
                          --set ha.cluster_id=$4 --set ha.lease_ttl=2s)
  $BUILD/mooncake-master --set server.bind_address=127.0.0.1 --set server.rpc_port=$1 \
    --set server.http_port=$2 --set server.reactors=1 "${ha[@]}" \
    --set log.file=$DIR/m$1.log >/dev/null 2>&1 &
  PIDS+=($!)
}
wait_leader() { for t in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:$1/role)" = 200 ] && return; sleep 0.05; done; }
run() { # label port
  local out
  out=$($BUILD/master_bench --master 127.0.0.1:$2 --operation BatchPut --duration $DUR \
        --reps $REPS --warmup 1 2>&1)
  echo "$1: $(echo "$out" | grep -E '^csv,|keys/s by rep' | tr '\n' ' ')"
  echo "$out" | grep -q '^csv,' || echo "$out" | tail -5
}
stop_all() { for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; PIDS=(); }
P=$((RPORT + 10))
master $P $((P + 1)) none -; sleep 0.5
run "ha.sync=off (no HA)" $P
stop_all
i=0
for mode in strict async; do
  for sb in 0 1; do
    i=$((i + 1)); c=bench$i; P=$((RPORT + 20 + 10 * i))
    master $P $((P + 1)) $mode $c; wait_leader $((P + 1))
    [ $sb = 1 ] && { master $((P + 2)) $((P + 3)) $mode $c; sleep 0.5; }
    run "ha.sync=$mode, $sb standby" $P
    curl -s 127.0.0.1:$((P + 1))/metrics | grep -E '^master_ha_journal_append_seconds_(sum|count)' | tr '\n' ' '; echo
    stop_all
  done
done
