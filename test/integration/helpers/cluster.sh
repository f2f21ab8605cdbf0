# cluster.sh - sourced by test/integration/*_test.sh: start a mooncake-master
# and mooncake-store-server processes on 127.0.0.1, stop them on exit.
#
#   . "$(dirname "$0")/helpers/cluster.sh"
#   cluster_start_master [--set k=v]...   -> MASTER (host:port), HTTP (host:port)
#   cluster_start_store SIZE              -> STORE_NAME (segment name)
#   cluster_kill_all                      (also run by the EXIT trap)
#   cluster_free_port                     -> a port for a process that must be told one
#
# Ports: the master binds ports 0 and we read the real ones from its log,
# so there is no free-port race. A port a test must choose comes from
# cluster_free_port: below the kernel's ephemeral range (where the outgoing
# connections of the tests running beside it take theirs) and not listened on. Every wait is bounded (10 s); a failure
# prints the processes' logs and exits 1.

B=${TEST_BUILD_DIR:-build}
CLUSTER_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mc-cluster.XXXXXX")
CLUSTER_PIDS=()

cluster_kill_all() {
  local p
  for p in "${CLUSTER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${CLUSTER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  CLUSTER_PIDS=()
  rm -rf "$CLUSTER_TMP"
}
trap cluster_kill_all EXIT

cluster_free_port() {
  local lo p i
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$lo" -gt 12000 ] 2>/dev/null || lo=32768
  for i in $(seq 50); do
    p=$((10000 + RANDOM % (lo - 10000)))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  cluster_die "no free port below $lo after 50 tries"
}

cluster_die() {
  echo "FAIL: $*" >&2
  local f
  for f in "$CLUSTER_TMP"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2
    tail -n 30 "$f" >&2
  done
  exit 1
}

# Wait (10 s) until file $1 has a line matching the ERE $2; print that line.
cluster_wait_line() {
  local i line
  for i in $(seq 200); do
    line=$(grep -E -m1 -- "$2" "$1" 2>/dev/null) && { echo "$line"; return 0; }
    sleep 0.05
  done
  return 1
}

cluster_start_master() {
  "$B/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=0 \
    --set server.http_port=0 --set server.reactors=1 --set log.level=info "$@" \
    >"$CLUSTER_TMP/master.out" 2>"$CLUSTER_TMP/master.log" &
  CLUSTER_PIDS+=($!)
  local l
  l=$(cluster_wait_line "$CLUSTER_TMP/master.log" 'ready: rpc [^ ]+:[0-9]+') ||
    cluster_die "mooncake-master did not start"
  MASTER=$(echo "$l" | sed -E 's/.*ready: rpc ([^ ,]+:[0-9]+).*/\1/')
  l=$(cluster_wait_line "$CLUSTER_TMP/master.log" 'metrics at http://') ||
    cluster_die "mooncake-master has no HTTP port"
  HTTP=$(echo "$l" | sed -E 's|.*http://([^/]+)/metrics.*|\1|')
  export MASTER HTTP
}

# $1: global_segment_size (e.g. 64MiB); more args: --set k=v for the node.
cluster_start_store() {
  local size=$1 n=${#CLUSTER_PIDS[@]}
  shift
  "$B/mooncake-store-server" --set "store.master=$MASTER" \
    --set "store.global_segment_size=$size" --set store.reactors=1 --set store.http_port=0 "$@" \
    >"$CLUSTER_TMP/store$n.out" 2>"$CLUSTER_TMP/store$n.log" &
  CLUSTER_PIDS+=($!)
  local l
  l=$(cluster_wait_line "$CLUSTER_TMP/store$n.out" '^ready ') ||
    cluster_die "mooncake-store-server did not start"
  STORE_NAME=${l#ready }
  export STORE_NAME
}
