#!/usr/bin/env bash
# /metrics of mooncake-master and of a storage node (issue 14): promtool
# check metrics finds nothing to complain about but upstream's names in
# conf/prometheus/lint-allowlist; every family has HELP and TYPE; the
# labelled RPC family, its latency histograms, process_* and
# mooncake_build_info are there and count what a put and a get did; the node
# serves /metrics and /health on its own HTTP port with what its transfer
# engine served and its segment use (0, then the put's bytes; a second node's
# segment is not counted; asked of the master at most once a second, however
# often it is scraped). The shipped alert rules and scrape config pass
# promtool; every metric the Grafana dashboard and the alerts query is
# exported.
set -u
. "$(dirname "$0")/helpers/cluster.sh"
PROMTOOL=${PROMTOOL:-promtool}
command -v "$PROMTOOL" >/dev/null || { echo "metrics_test: promtool missing (make deps-test), skipped"; exit 0; }

cluster_start_master
cluster_start_store 64MiB --set store.http_port=0 --set store.shm=off
NODE_HTTP=$(grep -m1 '^http ' "$CLUSTER_TMP/store1.out" | cut -d' ' -f2)
[ -n "$NODE_HTTP" ] || cluster_die "the node printed no 'http HOST:PORT' line"
NODE_HTTP=127.0.0.1:${NODE_HTTP##*:} # it listens on 0.0.0.0
T=$CLUSTER_TMP
NODE1=$STORE_NAME
ver=$("$B/mooncake-master" --version | cut -d' ' -f2)
val() { awk -v n="$2" '$1 == n { print $2 }' "$T/$1.prom"; }

# the node's segment use, as the master accounts it, before any object
curl -sf "http://$NODE_HTTP/metrics" >"$T/node0.prom" || cluster_die "node: GET /metrics failed"
t_node0=$(date +%s%N)
[ "$(val node0 mooncake_store_segment_mounted_bytes)" = 67108864 ] ||
  cluster_die "node: mounted bytes before a put: '$(val node0 mooncake_store_segment_mounted_bytes)'"
[ "$(val node0 mooncake_store_segment_used_bytes)" = 0 ] ||
  cluster_die "node: used bytes before a put: '$(val node0 mooncake_store_segment_used_bytes)'"

# traffic: a put and a get through the RPC port (the node serves the data)
head -c 100000 /dev/urandom >"$T/v"
"$B/mooncake-cli" --master "$MASTER" put k1 "$T/v" >/dev/null || cluster_die "put"
"$B/mooncake-cli" --master "$MASTER" get k1 "$T/got" >/dev/null || cluster_die "get"
cmp -s "$T/v" "$T/got" || cluster_die "get returned other bytes"
# a second node after the put: its segment is not the first node's
cluster_start_store 16MiB --set store.shm=off

allow=$(grep -v '^#' conf/prometheus/lint-allowlist | grep .)
check() { # check NAME URL: promtool clean but for the allowlist
  curl -sf "http://$2/metrics" >"$T/$1.prom" || cluster_die "$1: GET /metrics failed"
  "$PROMTOOL" check metrics <"$T/$1.prom" >"$T/$1.lint" 2>&1
  local bad
  bad=$(awk 'NR == FNR { ok[$1] = 1; next } !($1 in ok)' <(echo "$allow") "$T/$1.lint")
  [ -z "$bad" ] || cluster_die "$1: promtool check metrics complains: $bad"
  # every sample's family has a TYPE (and, below, as many HELP lines)
  local fam
  for fam in $(grep -v '^#' "$T/$1.prom" | sed -E 's/[{ ].*//' | sort -u); do
    grep -Eq "^# TYPE ($fam|${fam%_bucket}|${fam%_sum}|${fam%_count}) " "$T/$1.prom" ||
      cluster_die "$1: $fam has no TYPE"
  done
  [ "$(grep -c '^# HELP' "$T/$1.prom")" = "$(grep -c '^# TYPE' "$T/$1.prom")" ] ||
    cluster_die "$1: a family without HELP"
  grep -q "^mooncake_build_info{version=\"$ver\"} 1$" "$T/$1.prom" || cluster_die "$1: no build_info $ver"
  for m in process_cpu_seconds_total process_resident_memory_bytes process_open_fds \
    process_max_fds process_start_time_seconds process_virtual_memory_bytes; do
    grep -Eq "^$m [0-9.e+]+$" "$T/$1.prom" || cluster_die "$1: no $m"
  done
  awk '$1 == "process_resident_memory_bytes" && $2 > 1000000 { ok = 1 } END { exit !ok }' "$T/$1.prom" ||
    cluster_die "$1: implausible process_resident_memory_bytes"
}
check master "$HTTP"
[ "$(val master 'mooncake_master_rpc_requests_total{method="put_start"}')" -ge 1 ] ||
  cluster_die "master: put_start not counted in the labelled family"
[ "$(val master 'mooncake_master_rpc_requests_total{method="put_start"}')" = "$(val master master_put_start_requests_total)" ] ||
  cluster_die "master: the labelled family and upstream's name disagree"
[ "$(val master 'mooncake_master_rpc_duration_seconds_count{method="get_replica_list"}')" -ge 1 ] ||
  cluster_die "master: no latency observed for get_replica_list"
grep -q '^mooncake_master_rpc_duration_seconds_bucket{method="put_start",le="+Inf"}' "$T/master.prom" ||
  cluster_die "master: no histogram buckets"
grep -q "^segment_allocated_bytes{segment=\"$NODE1\"} [1-9]" "$T/master.prom" ||
  cluster_die "master: segment use not reported"

# the node asks the master at most once a second: a scrape a second after
# the first one has the master's account of the put
while [ $(($(date +%s%N) - t_node0)) -lt 1100000000 ]; do sleep 0.1; done
check node "$NODE_HTTP"
[ "$(val node 'mooncake_store_served_bytes_total{op="write"}')" -ge 100000 ] ||
  cluster_die "node: the put's bytes were not counted as served (tcp write)"
[ "$(val node 'mooncake_store_served_requests_total{op="read"}')$(val node 'mooncake_store_served_requests_total{op="readv"}')" != "00" ] ||
  cluster_die "node: the get was not counted as served"
[ "$(val node mooncake_store_segment_capacity_bytes)" = 67108864 ] || cluster_die "node: segment capacity"
# the put's object is in its segment; the second node's 16 MiB are not its own
[ "$(val node mooncake_store_segment_used_bytes)" = 100000 ] ||
  cluster_die "node: used bytes after a put of 100000: '$(val node mooncake_store_segment_used_bytes)'"
[ "$(val node mooncake_store_segment_replicas)" = 1 ] || cluster_die "node: replicas after a put"
[ "$(val node mooncake_store_segment_mounted_bytes)" = 67108864 ] ||
  cluster_die "node: mounted bytes with a second node: '$(val node mooncake_store_segment_mounted_bytes)'"
[ "$(val node mooncake_store_segments_mounted)" = 1 ] || cluster_die "node: segments mounted"
[ "$(val node mooncake_store_master_up)" = 1 ] || cluster_die "node: master_up"
grep -q '^mooncake_store_transfer_duration_seconds_bucket{transport="tcp",le="+Inf"}' "$T/node.prom" ||
  cluster_die "node: no transfer latency histogram"
[ "$(curl -s "http://$NODE_HTTP/health")" = OK ] || cluster_die "node: /health"

# a storm of scrapes costs the master one LIST_SEGMENTS a second
ls_calls() { curl -sf "http://$HTTP/metrics" | awk '$1 == "mooncake_master_rpc_requests_total{method=\"list_segments\"}" { print $2 }'; }
before=$(ls_calls)
[ -n "$before" ] || cluster_die "master: list_segments is not counted"
t0=$(date +%s%N)
for _ in $(seq 40); do
  curl -sf "http://$NODE_HTTP/metrics" >/dev/null || cluster_die "node: GET /metrics failed in a storm"
done
ms=$((($(date +%s%N) - t0) / 1000000))
calls=$(($(ls_calls) - before))
most=$((ms / 1000 + 1))
echo "metrics_test: 40 node scrapes in $ms ms asked the master $calls time(s) (at most $most)"
[ "$calls" -le "$most" ] || cluster_die "node: 40 scrapes in $ms ms asked the master $calls times (at most $most)"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$NODE_HTTP/metrics")
[ "$code" = 405 ] || cluster_die "node: POST /metrics answered $code"

# a node whose HTTP port is taken does not start, and says why
"$B/mooncake-store-server" --set "store.master=$MASTER" --set store.global_segment_size=16MiB \
  --set store.reactors=1 --set store.http_bind=127.0.0.1 --set "store.http_port=${NODE_HTTP##*:}" \
  >"$T/dup.out" 2>"$T/dup.err"
rc=$?
[ "$rc" = 1 ] || cluster_die "a node on a taken HTTP port exited $rc"
grep -q "store.http_port: cannot listen on 127.0.0.1:${NODE_HTTP##*:}" "$T/dup.err" ||
  cluster_die "no reason given: $(cat "$T/dup.err")"

# the shipped Prometheus files
"$PROMTOOL" check rules conf/prometheus/alerts.yml >"$T/rules.log" 2>&1 || { cat "$T/rules.log"; cluster_die "alerts.yml"; }
"$PROMTOOL" check config conf/prometheus/prometheus.yml >"$T/config.log" 2>&1 || { cat "$T/config.log"; cluster_die "prometheus.yml"; }
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["panels"]' \
  conf/prometheus/grafana-dashboard.json || cluster_die "grafana-dashboard.json"

# every metric the dashboard's and the alerts' queries read is one the master
# or the node exports (above), or Prometheus's own `up`; the alerts may also
# name families only an HA master exports (declared in store/master_ha.c)
exported() { cat "$T/master.prom" "$T/node.prom" | grep -v '^#' | sed -E 's/[{ ].*//'; echo up; }
exported | LC_ALL=C sort -u >"$T/exported"
names() { # the names FILE's queries use that are not exported (both lists in C order)
  local used
  used=$(/usr/bin/python3 test/integration/helpers/promql_names.py "$1") || return 1
  LC_ALL=C comm -23 <(echo "$used") "$T/exported"
}
missing=$(names conf/prometheus/grafana-dashboard.json) || cluster_die "promql_names.py failed"
[ -z "$missing" ] || cluster_die "grafana-dashboard.json queries metrics nobody exports: $missing"
missing=$(names conf/prometheus/alerts.yml) || cluster_die "promql_names.py failed"
for n in $missing; do
  grep -q "TYPE $n " store/master_ha.c || cluster_die "alerts.yml queries $n, which nobody exports"
done
# the check catches a renamed metric
sed 's/master_key_count/master_key_cnt/' conf/prometheus/grafana-dashboard.json >"$T/renamed.json"
[ "$(names "$T/renamed.json")" = master_key_cnt ] || cluster_die "a renamed dashboard metric went unnoticed"
echo "metrics_test: all checks passed"
