#!/usr/bin/env bash
# Identities (issue 13, finding 7), against a real master and nodes:
#  - a second node with the same local_hostname exits non-zero at start,
#    naming the live client that holds the name, and leaves the first node's
#    segment and transfer metadata alone (it used to mount too, and delete
#    the shared metadata when it stopped: every later put failed);
#  - a second node on the same transfer port fails with "address in use".
set -u
. "$(dirname "$0")/helpers/cluster.sh"

cluster_start_master
cluster_start_store 16MiB --set store.local_hostname=nodeX
T=$CLUSTER_TMP
cli() { timeout 30 "$B/mooncake-cli" --master "$MASTER" --http "$HTTP" "$@"; }

# start a node that must fail; $1 = log name, rest = --set args. Sets RC.
start_must_fail() {
  local name=$1 pid i
  shift
  "$B/mooncake-store-server" --set "store.master=$MASTER" --set store.global_segment_size=16MiB \
    --set store.reactors=1 --set store.http_port=0 "$@" >"$T/$name.out" 2>"$T/$name.log" &
  pid=$!
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    cluster_die "the second node ($name) is still running: it shares an identity"
  fi
  wait "$pid"
  RC=$?
}

start_must_fail dupname --set store.local_hostname=nodeX
[ "$RC" != 0 ] || cluster_die "a node with a taken local_hostname exited 0"
grep -q "segment name 'nodeX' is held by another live client" "$T/dupname.log" ||
  cluster_die "the refused node does not name the holder: $(tail -5 "$T/dupname.log")"
grep -q "^ready " "$T/dupname.out" && cluster_die "the refused node said ready"

# the first node is intact: its metadata is there and puts land on it
cli meta mc/default/seg/ >"$T/meta.out" 2>&1 || cluster_die "meta failed"
grep -q '^mc/default/seg/nodeX$' "$T/meta.out" || cluster_die "nodeX's descriptor is gone"
head -c 100000 /dev/urandom >"$T/v"
cli put k1 "$T/v" >/dev/null 2>&1 || cluster_die "put after the refused node failed"
cli get k1 "$T/back" >/dev/null 2>&1 || cluster_die "get failed"
cmp -s "$T/v" "$T/back" || cluster_die "get returned other bytes"

# the same transfer port: address in use, non-zero exit
port=$(grep -oE "transfer engine 'nodeX' listening on [^ ]+:[0-9]+" "$T"/store*.log | head -1 |
  sed -E 's/.*:([0-9]+)$/\1/')
[ -n "$port" ] || cluster_die "cannot read nodeX's port"
start_must_fail dupport --set store.local_hostname=nodeY --set "store.port=$port"
[ "$RC" != 0 ] || cluster_die "a node on a taken port exited 0"
grep -q "Address already in use" "$T/dupport.log" ||
  cluster_die "no 'address in use': $(tail -5 "$T/dupport.log")"

echo "identity_test: all checks passed"
