#!/usr/bin/env bash
# tools/embed_example against a real mooncake-master and storage node: the
# store client embedded in a host-owned libevent loop does async puts, gets
# (data verified), exist, a miss and removes while the host's own timer keeps
# ticking; every callback on the host's thread, never inside a submit.
#
# It runs with metadata = p2p and with metadata = master (the default), which
# once deadlocked in attached mode (a blocking publish from the host thread).
set -u
. "$(dirname "$0")/helpers/cluster.sh"

cluster_start_master
cluster_start_store 128MiB

T=$CLUSTER_TMP
has() { grep -E -q -- "$2" "$1" || { cat "$1"; cluster_die "$1 lacks /$2/"; }; }

run_example() { # $1: metadata mode
  timeout --signal=KILL 60 "$B/embed_example" --master "$MASTER" --metadata "$1" --count 8 \
    --size 1MiB --tick-ms 2 >"$T/embed.out" 2>"$T/embed.log"
  local rc=$?
  cat "$T/embed.out"
  [ "$rc" = 0 ] || cluster_die "embed_example (metadata $1) exited $rc"
  has "$T/embed.out" '^put 8 x 1048576 bytes: 8 ok, 0 failed'
  has "$T/embed.out" '^get 8 x 1048576 bytes: 8 ok \(data verified\), 0 wrong data, 0 failed'
  has "$T/embed.out" '^exist: 1, get of a missing key: OBJECT_NOT_FOUND, removes: 8 ok, 0 failed'
  has "$T/embed.out" '^host timer ticks: [1-9][0-9]* '
  has "$T/embed.out" '^callbacks: 26, on another thread: 0, inside a submit: 0, twice: 0$'
  has "$T/embed.out" '^embed_example: ok$'
}

run_example p2p
# the example removed what it stored: the store is empty again
[ "$(curl -s "http://$HTTP/keys" 2>/dev/null | tr -d ' \n')" = "[]" ] ||
  [ ! -x "$(command -v curl)" ] || cluster_die "keys left behind"

# metadata = master, the default: publishing must not block the host loop
run_example master
echo "embed_test: all checks passed"
