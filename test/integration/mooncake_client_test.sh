#!/usr/bin/env bash
# tools/mooncake_client (upstream's standalone client launcher) against a
# real mooncake-master: upstream's flags start a storage node serving
# co-located clients on the given port; a store_dummy process (a co-located
# client) puts and gets through it; bad flags and sizes are refused naming
# them (exit 2), and so is a second launcher on the same port (exit 1).
set -u
. "$(dirname "$0")/helpers/cluster.sh"

cluster_start_master --set master.lease_ttl=1s
T=$CLUSTER_TMP
L=tools/mooncake_client
PORT=$(cluster_free_port)
export MOONCAKE_STORE_SERVER="$B/mooncake-store-server"
BIN=${TEST_BIN_DIR:-$B/test/bin}

expect_usage() { # expected text, then the launcher's args
  local want=$1 rc
  shift
  "$L" "$@" >"$T/u.out" 2>"$T/u.err"
  rc=$?
  [ "$rc" = 2 ] || cluster_die "mooncake_client $* exited $rc, expected 2"
  grep -q -- "$want" "$T/u.err" || { cat "$T/u.err"; cluster_die "no '$want' in the message"; }
}
expect_usage "unknown flag --bogus" --bogus=1
expect_usage "global_segment_size: 'lots' is not a size" --global_segment_size=lots
expect_usage "enable_offload" --enable_offload
expect_usage "--port needs a value" --port

# upstream's spelling of every flag, gflags style (= and space)
"$L" --host=127.0.0.1 --port "$PORT" --global_segment_size="64 MB" \
  --local_buffer_size=16MB --master_server_address="$MASTER" \
  --metadata_server=P2PHANDSHAKE --protocol=tcp --threads=2 \
  -- --set store.reactors=1 --set store.http_port=0 --set log.level=info >"$T/client.out" 2>"$T/client.log" &
CLUSTER_PIDS+=($!)
cluster_wait_line "$T/client.out" "^service 127.0.0.1:$PORT\$" >/dev/null ||
  cluster_die "mooncake_client did not start its service"
grep -q "store service of" "$T/client.log" || cluster_die "no service in the log"
grep -q "segment .* of 64MiB" "$T/client.log" || cluster_die "64 MB is not 64 MiB"

# a co-located client works through it
timeout 60 "$BIN/store_dummy" --service "127.0.0.1:$PORT" --count 5 --size 1000000 >"$T/d.out" ||
  { cat "$T/d.out"; cluster_die "store_dummy failed"; }
grep -q '^ok 5$' "$T/d.out" || cluster_die "store_dummy: $(cat "$T/d.out")"

# a second one on the port is refused at start
"$L" --port "$PORT" --global_segment_size=16MB --master_server_address="$MASTER" \
  -- --set store.reactors=1 >"$T/second.out" 2>"$T/second.err"
rc=$?
[ "$rc" = 1 ] || cluster_die "a second service on port $PORT exited $rc, expected 1"
grep -q "one service per port" "$T/second.err" || { cat "$T/second.err"; cluster_die "no reason given"; }
echo "mooncake_client_test: ok"
