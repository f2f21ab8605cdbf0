#!/usr/bin/env bash
# Failover time of mooncake-master HA: redis-server + 3 masters on loopback;
# the leader is SIGKILLed N times; each time we measure from the kill until
# another master answers /role with 200 (it holds the lease, has replayed
# the journal and serves). The killed master is restarted (as a standby)
# before the next round. Prints one line per kill, then the median.
#
#   perf/ha_failover.sh [KILLS=7] [LEASE=1s]
set -u
BUILD=${BUILD:-build}
KILLS=${1:-7}
LEASE=${2:-1s}
. "$(dirname "$0")/ha_lib.sh"
ha_setup mc-ha-bench
declare -a RP HP
start() {
  local i=$1
  $BUILD/mooncake-master --set server.bind_address=127.0.0.1 --set server.rpc_port=${RP[$i]} \
    --set server.http_port=${HP[$i]} --set server.reactors=1 \
    --set ha.backend=redis://127.0.0.1:$RPORT/0 --set ha.cluster_id=bench \
    --set ha.lease_ttl=$LEASE --set log.file=$DIR/m$i.log >/dev/null 2>&1 &
  PIDS[$i]=$!
}
for i in 0 1 2; do RP[$i]=$((RPORT + 1 + 2 * i)); HP[$i]=$((RPORT + 2 + 2 * i)); start $i; done
leader() { # index of the master answering /role with 200
  for i in 0 1 2; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 0.2 127.0.0.1:${HP[$i]}/role)" = 200 ] \
      && { echo $i; return; }
  done; echo -1; }
for t in $(seq 50); do [ "$(leader)" -ge 0 ] && break; sleep 0.1; done
times=()
for k in $(seq $KILLS); do
  l=$(leader)
  sleep 1 # the standbys are polling, steady state
  t0=$(date +%s%N)
  kill -9 ${PIDS[$l]}; wait ${PIDS[$l]} 2>/dev/null
  while :; do n=$(leader); [ "$n" -ge 0 ] && [ "$n" != "$l" ] && break; sleep 0.005; done
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  times+=($ms)
  echo "kill $k: leader $l -> $n in $ms ms"
  start $l
  sleep 0.5
done
sorted=($(printf '%s\n' "${times[@]}" | sort -n))
echo "lease $LEASE: failover median ${sorted[$(( ${#sorted[@]} / 2 ))]} ms (min ${sorted[0]}, max ${sorted[-1]}, $KILLS kills)"
echo "csv,ha_failover,$LEASE,$KILLS,${sorted[$(( ${#sorted[@]} / 2 ))]},${sorted[0]},${sorted[-1]}"
