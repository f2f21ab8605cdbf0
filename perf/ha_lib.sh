# ha_lib.sh - sourced by the HA benchmarks (ha_bench.sh, ha_failover.sh,
# ha_snapshot.sh): a throwaway redis-server on loopback for their masters,
# and the cleanup at exit.
#
# ha_setup NAME: DIR (a new directory /tmp/NAME-XXXXXX), RPORT (a
# redis-server on 127.0.0.1 there, no persistence), PIDS (empty: the caller
# adds the masters it starts). At exit the masters are killed, redis is shut
# down and DIR removed (KEEP_LOGS=DIR2 in the environment copies DIR's logs
# to DIR2 first).
ha_setup() {
  DIR=$(mktemp -d "/tmp/$1-XXXXXX")
  RPORT=$((20000 + RANDOM % 20000))
  redis-server --port $RPORT --bind 127.0.0.1 --save "" --appendonly no --dir $DIR \
    --logfile $DIR/redis.log --daemonize yes >/dev/null
  sleep 0.3
  PIDS=()
  trap ha_cleanup EXIT
}

ha_cleanup() {
  for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done
  wait 2>/dev/null
  redis-cli -p $RPORT shutdown nosave >/dev/null 2>&1
  [ -n "${KEEP_LOGS:-}" ] && cp $DIR/*.log "$KEEP_LOGS"/
  rm -rf $DIR
}
