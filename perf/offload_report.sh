#!/usr/bin/env bash
# perf/offload_report.sh - how long a node's start report takes.
#
#   perf/offload_report.sh [-n FILES] [-s SIZE] [-r ROUNDS] [-d PARENT]
#
# A node that starts with an offload directory scans it and reports every
# file to the master before it serves (store/README.md, node-local offload):
# until then PERSIST requests of objects the master evicts wait, with the
# puts that need their memory. This times that report for FILES files
# (default 10000) of SIZE bytes (default 4K: the scan reads each header),
# written by `tier_bench write` into a node's directory under PARENT
# (default /tmp) and synced.
# Each round starts a new mooncake-master (enable_offload) and a node on
# that directory twice: reporting a batch of files per call
# (LDISK_REPORT_BATCH, the default) and a call per file
# (MC_OFFLOAD_REPORT_BATCH=0, as a node does with a master that lacks the
# batch call: the peer), in alternating order. The time is the node's
# mooncake_store_offload_report_seconds (the scan and the calls; the scan
# reads the files' headers through the page cache, warm after the first
# node of the first round, which is a warm-up and not counted: round 0).
# Prints each round, then the medians and the median of the rounds'
# ratios (per-file time / batch time).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
b=${BUILD:-$here/build}
n=10000
size=4K
rounds=5
parent=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=$2; shift 2 ;;
    -s) size=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -d) parent=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "-n wants a count of files (1 or more)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "-r wants a count of rounds (1 or more)" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }
for x in mooncake-master mooncake-store-server tier_bench; do
    [ -x "$b/$x" ] || { echo "$b/$x is missing: make" >&2; exit 1; }
done

root=$(mktemp -d "$parent/mc_report_bench.XXXXXX")
rpc=$((20000 + RANDOM % 12000))
http=$((rpc + 1))
node=$((rpc + 2))
nhttp=$((rpc + 3))
mpid=
npid=
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        for f in node master; do
            [ -s "$root/$f.log" ] && { echo "--- $f.log (last lines)"; tail -8 "$root/$f.log"; } >&2
        done
    fi
    [ -n "$npid" ] && kill "$npid" 2>/dev/null || true
    [ -n "$mpid" ] && kill "$mpid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 200); do
        (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on port $1" >&2
    return 1
}
nmetric() {
    curl -s "http://127.0.0.1:$nhttp/metrics" | awk -v k="$1" '$1 == k {print $2}'
}

mkdir -p "$root/node"
"$b/tier_bench" write --dir "$root/node" -n "$n" --size "$size" --prefix rep >/dev/null

# One master and one node (MC_OFFLOAD_REPORT_BATCH=$1): prints the report's seconds.
one() {
    "$b/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=$rpc \
        --set server.http_port=$http --set server.reactors=1 --set master.enable_offload=true \
        --set log.level=warn >/dev/null 2>>"$root/master.log" &
    mpid=$!
    wait_port $rpc
    MC_OFFLOAD_REPORT_BATCH=$1 "$b/mooncake-store-server" --set store.master=127.0.0.1:$rpc \
        --set store.port=$node --set store.local_hostname=127.0.0.1:$node \
        --set store.global_segment_size=64MiB --set store.offload_dir="$root/node" \
        --set store.reactors=1 --set store.http_port=$nhttp --set log.level=info \
        >/dev/null 2>>"$root/node.log" &
    npid=$!
    wait_port $nhttp
    local t="" deadline=$((SECONDS + 120))
    while [ $SECONDS -lt $deadline ]; do
        if [ "$(nmetric mooncake_store_offload_report_seconds_count)" = 1 ]; then
            t=$(nmetric mooncake_store_offload_report_seconds_sum)
            break
        fi
        sleep 0.05
    done
    local got
    got=$(nmetric mooncake_store_offload_reported_total)
    kill "$npid"; wait "$npid" 2>/dev/null || true
    npid=
    kill "$mpid"; wait "$mpid" 2>/dev/null || true
    mpid=
    [ -n "$t" ] || { echo "the node did not finish its report in 120 s" >&2; return 1; }
    [ "$got" = "$n" ] || { echo "the node reported $got files of $n" >&2; return 1; }
    echo "$t"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "start report of $n files of $size ($root/node), $rounds rounds + warm-up"
: >"$root/batch"
: >"$root/single"
: >"$root/ratio"
for r in $(seq 0 "$rounds"); do
    if [ $((r % 2)) = 0 ]; then
        tb=$(one 1); ts=$(one 0)
    else
        ts=$(one 0); tb=$(one 1)
    fi
    printf "round %d%s  batch %.3f s  per-file %.3f s  %.1fx\n" "$r" "$([ "$r" = 0 ] && echo " (warm-up)")" \
        "$tb" "$ts" "$(awk -v a="$ts" -v b="$tb" 'BEGIN {print (b > 0) ? a / b : 0}')"
    [ "$r" = 0 ] && continue
    echo "$tb" >>"$root/batch"
    echo "$ts" >>"$root/single"
    awk -v a="$ts" -v b="$tb" 'BEGIN {print (b > 0) ? a / b : 0}' >>"$root/ratio"
done
grep "objects reported in" "$root/node.log" | tail -2 | sed 's/^.*offload: [^:]*: /  node: /'
printf "median  batch %.3f s (%.0f files/s)  per-file %.3f s (%.0f files/s)  per-file/batch %.1fx\n" \
    "$(median <"$root/batch")" "$(awk -v n="$n" -v t="$(median <"$root/batch")" 'BEGIN {print n / t}')" \
    "$(median <"$root/single")" "$(awk -v n="$n" -v t="$(median <"$root/single")" 'BEGIN {print n / t}')" \
    "$(median <"$root/ratio")"
