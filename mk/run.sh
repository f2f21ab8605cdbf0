#!/usr/bin/env bash
# make run: start the system on its embedded defaults (conf/*.conf) in the
# foreground: mooncake-master, then one mooncake-store-server (a storage node
# contributing global_segment_size of DRAM) once the master accepts. Ctrl-C
# stops both; so does either of them exiting.
set -euo pipefail
BUILD=${1:-build}
mconf=conf/mooncake-master.conf
sconf=conf/mooncake-store-server.conf

conf_value() { # file key default
  local v
  v=$(sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\([^;[:space:]]*\).*/\1/p" "$1" | head -n1)
  echo "${v:-$3}"
}
rpc_port=$(conf_value "$mconf" rpc_port 50051)
http_port=$(conf_value "$mconf" http_port 9003)

pids=()
stop() {
  trap - INT TERM EXIT
  # Children of a script ignore SIGINT (no job control): ask with SIGTERM.
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

echo "== starting mooncake-master -c $mconf"
"$BUILD/mooncake-master" -c "$mconf" &
pids+=($!)
for _ in $(seq 100); do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "mooncake-master exited; see its messages above" >&2
    exit 1
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$rpc_port") 2>/dev/null; then
    break
  fi
  sleep 0.1
done

echo "== starting mooncake-store-server -c $sconf"
"$BUILD/mooncake-store-server" -c "$sconf" --set "store.master=127.0.0.1:$rpc_port" &
pids+=($!)

cat <<EOF
== running (Ctrl-C stops both)
   clients:  mc_store_open() with master = 127.0.0.1:$rpc_port (include/mooncake/store.h)
   more DRAM: $BUILD/mooncake-store-server -c $sconf --set store.global_segment_size=4GiB
   metrics:  curl http://127.0.0.1:$http_port/metrics
   summary:  curl http://127.0.0.1:$http_port/metrics/summary
   segments: curl http://127.0.0.1:$http_port/segments
EOF
wait -n "${pids[@]}" || true
