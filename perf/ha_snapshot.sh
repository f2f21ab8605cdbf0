#!/usr/bin/env bash
# HA snapshots of a large state (ha.sync=strict, redis-server on loopback):
# master_bench fills a leader with churn (BatchPut passes, the store emptied
# before and after each: the journal grows) and then OBJECTS objects
# (--rss_objects: they stay). A standby then starts, replays the journal and
# snapshots near its end (ha.snapshot_records set to the journal's length
# less 2000): a snapshot of about the whole state. A third master starts on
# the trimmed journal, loads that snapshot and replays the rest. Prints the
# snapshot's size, its form (one string, or a list of ha.snapshot_chunk
# chunks), the time to write it (the standby's log) and to load it (the new
# master's log, and the time from its start until it holds the leader's
# objects).
#
#   perf/ha_snapshot.sh [OBJECTS=2000000] [CHUNK=16MiB] [CHURN_SECONDS=4]
#
# About 100 bytes of snapshot per object (40-byte keys): 6 M objects go past
# the 512 MB a Redis string holds (CHURN_SECONDS must make the journal at
# least twice the state: ~2.5 M records per second of churn here).
set -u
BUILD=${BUILD:-build}
N=${1:-2000000}
CHUNK=${2:-16MiB}
DUR=${3:-4}
. "$(dirname "$0")/ha_lib.sh"
ha_setup mc-ha-snap
C=snap$$
master() { # port http [snapshot_records]
  $BUILD/mooncake-master --set server.bind_address=127.0.0.1 --set server.rpc_port=$1 \
    --set server.http_port=$2 --set ha.backend=redis://127.0.0.1:$RPORT/0 \
    --set ha.cluster_id=$C --set ha.lease_ttl=5s --set ha.snapshot_records=${3:-1000000000} \
    --set ha.snapshot_chunk=$CHUNK --set master.client_ttl=600s \
    --set log.file=$DIR/m$1.log --set log.level=info >/dev/null 2>&1 &
  PIDS+=($!)
}
status() { curl -s 127.0.0.1:$1/ha_status | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
keys() { curl -s 127.0.0.1:$1/metrics/summary | sed -n 's/^keys=\([0-9]*\).*/\1/p'; }
P=$((RPORT + 10))
master $P $((P + 1))
for t in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:$((P + 1))/role)" = 200 ] && break
  sleep 0.05
done
$BUILD/master_bench --master 127.0.0.1:$P --operation BatchPut --duration "$DUR" --reps 1 \
  --warmup "$DUR" 2>&1 | grep -E '^csv,' | sed 's/^/churn: /'
$BUILD/master_bench --master 127.0.0.1:$P --master_pid ${PIDS[0]} --rss_objects "$N" 2>&1 |
  grep -E '^  put in' | sed 's/^ */objects: /'
n=$(keys $((P + 1)))
head=$(status $((P + 1)) journal_head_seq)
echo "leader: $n objects, $head journal records"
t0=$(date +%s%N)
master $((P + 2)) $((P + 3)) $((head - 2000))
taken=0
for t in $(seq 1500); do
  taken=$(status $((P + 3)) snapshots_taken)
  [ "${taken:-0}" -ge 1 ] && break
  sleep 0.2
done
[ "${taken:-0}" -ge 1 ] || { echo "no snapshot within 300 s"; tail -5 $DIR/m$((P + 2)).log; exit 1; }
t1=$(date +%s%N)
echo "standby: started, replayed and snapshotted in $(( (t1 - t0) / 1000000 )) ms"
grep -h 'snapshot at journal entry' $DIR/m$((P + 2)).log | sed 's/^.*snapshot at/standby: snapshot at/'
echo "redis: $(redis-cli -p $RPORT TYPE mc/$C/ha/snap) of $(redis-cli -p $RPORT LLEN mc/$C/ha/snap)" \
  "chunks; redis used_memory $(redis-cli -p $RPORT INFO memory | sed -n 's/^used_memory_human:\(.*\)\r$/\1/p')"
t0=$(date +%s%N)
master $((P + 4)) $((P + 5))
for t in $(seq 2400); do
  [ "$(status $((P + 5)) snapshots_loaded)" = 1 ] && [ "$(keys $((P + 5)))" = "$n" ] && break
  sleep 0.05
done
t1=$(date +%s%N)
echo "new master: $(keys $((P + 5))) objects $(( (t1 - t0) / 1000000 )) ms after its start;" \
  "snapshots loaded $(status $((P + 5)) snapshots_loaded)"
grep -h 'loaded the snapshot' $DIR/m$((P + 4)).log | sed 's/^.*loaded/new master: loaded/'
echo "VmRSS: leader $(grep VmRSS /proc/${PIDS[0]}/status | awk '{print $2}') kB," \
  "standby $(grep VmRSS /proc/${PIDS[1]}/status | awk '{print $2}') kB"
