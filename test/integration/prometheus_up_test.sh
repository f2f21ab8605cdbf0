#!/usr/bin/env bash
# A real Prometheus (Debian's prometheus, on 127.0.0.1) scrapes a master and
# a storage node with the shipped conf/prometheus/prometheus.yml (targets
# replaced by this test's ports, a 1 s interval) and its alert rules, and
# reports up == 1 for both jobs; prints the query's answer. Skipped (and
# said) without the prometheus binary.
set -u
. "$(dirname "$0")/helpers/cluster.sh"
PROM=${PROMETHEUS:-prometheus}
command -v "$PROM" >/dev/null || { echo "prometheus_up_test: prometheus missing (make deps-test), skipped"; exit 0; }

cluster_start_master
cluster_start_store 16MiB --set store.http_port=0
NODE_HTTP=$(grep -m1 '^http ' "$CLUSTER_TMP/store1.out" | cut -d' ' -f2)
[ -n "$NODE_HTTP" ] || cluster_die "the node printed no 'http HOST:PORT' line"
NODE_HTTP=127.0.0.1:${NODE_HTTP##*:} # it listens on 0.0.0.0
T=$CLUSTER_TMP
mkdir -p "$T/prom"
sed -e "s/127.0.0.1:9003/$HTTP/" -e "s/127.0.0.1:9300/$NODE_HTTP/" \
  -e 's/scrape_interval: 15s/scrape_interval: 1s/' conf/prometheus/prometheus.yml >"$T/prom/prometheus.yml"
cp conf/prometheus/alerts.yml "$T/prom/"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PROM" --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
  --web.listen-address="127.0.0.1:$port" >"$T/prometheus.log" 2>&1 &
CLUSTER_PIDS+=($!)

q() { curl -sf "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1"; }
ok=0
for _ in $(seq 120); do
  ans=$(q 'up{job=~"mooncake-.*"}' 2>/dev/null)
  if [ -n "$ans" ] && echo "$ans" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
up = {x["metric"]["job"]: x["value"][1] for x in r}
sys.exit(0 if up.get("mooncake-master") == "1" and up.get("mooncake-store") == "1" else 1)'; then
    ok=1
    break
  fi
  sleep 0.25
done
[ "$ok" = 1 ] || cluster_die "Prometheus did not report up == 1 for both: ${ans:-no answer}"
echo "$ans" | /usr/bin/python3 -c '
import json, sys
for x in json.load(sys.stdin)["data"]["result"]:
    print("up{job=%s, instance=%s} = %s" % (x["metric"]["job"], x["metric"]["instance"], x["value"][1]))'
# the rules loaded (no evaluation error)
rules=$(curl -sf "http://127.0.0.1:$port/api/v1/rules")
echo "$rules" | /usr/bin/python3 -c '
import json, sys
g = json.load(sys.stdin)["data"]["groups"]
rules = [r for x in g for r in x["rules"]]
assert len(rules) >= 7, rules
bad = [r["name"] for r in rules if r.get("health") == "err"]
assert not bad, bad' || cluster_die "alert rules not loaded: $rules"
echo "prometheus_up_test: all checks passed"
