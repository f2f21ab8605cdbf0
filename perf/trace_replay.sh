#!/usr/bin/env bash
# perf/trace_replay.sh - replay the FAST'25 traces against live clusters:
# for every trace, worker count N and capacity C, start a mooncake-master
# and S mooncake-store-server nodes holding N x C blocks in all, run
# build/trace_replay against them, stop them; then a table, one CSV and
# one plot per trace.
#
#   perf/trace_replay.sh [-t conversation,synthetic] [-n 4,8,16]
#                        [-c 500,1000,2000,4000] [-b 64K] [-s 4] [-x afap|X]
#                        [-o perf/results] [-p PREFIX] [-m section.key=value]...
#                        [-T tcp|shm] [-k] [-- trace_replay flags]
#
#   -t  traces: names of perf/traces/NAME_trace.jsonl.gz, or paths of
#       .jsonl / .jsonl.gz files
#   -n  workers (simulated prefill nodes), -c capacities (blocks per worker)
#   -b  block size (bytes per 512 tokens), -s storage nodes (their segments
#       share the N x C blocks equally; S must divide N x C)
#   -x  afap (as fast as possible, the default) or a speed-up factor
#   -o  where PREFIX_NAME.csv and PREFIX_NAME.png go (prefix "trace")
#   -m  --set for every mooncake-master (repeatable), e.g. -m master.lease_ttl=1s
#   -T  tcp (default): clients reach the nodes over TCP, as if they were other
#       hosts (store.shm = off); shm: same-host shared memory
#   -k  no cluster: trace_replay --core (the master's core in-process, a
#       simulated clock at trace time / the -x factor (default 1), one request
#       at a time: the eviction policy alone, seconds per run, +-0.005 run to run);
#       -m settings become --core-set
#   --  the rest goes to every trace_replay (e.g. --soft-pin prefix:4, --limit 2000)
#
# Every run is on 127.0.0.1 with ports the processes pick (no port races);
# logs go to a mkdtemp directory that is removed at the end unless a run
# failed. Exit status 1 when any run reported errors or wrong bytes.
set -euo pipefail
# storage nodes take a free HTTP port (several per host here; store.http_port)
export MC_STORE_HTTP_PORT=${MC_STORE_HTTP_PORT:-0}
shopt -s extglob

here=$(cd "$(dirname "$0")/.." && pwd)
cmdline="perf/trace_replay.sh${*:+ $*}"
b=${BUILD:-$here/build}
traces=conversation,synthetic
workers=4,8,16
caps=500,1000,2000,4000
block=64K
nodes=4
speed=afap
out=$here/perf/results
prefix=trace
msets=()
csets=()
core=0
transport=tcp
while [ $# -gt 0 ]; do
    case "$1" in
    -t) traces=$2; shift 2 ;;
    -n) workers=$2; shift 2 ;;
    -c) caps=$2; shift 2 ;;
    -b) block=$2; shift 2 ;;
    -s) nodes=$2; shift 2 ;;
    -x) speed=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -p) prefix=$2; shift 2 ;;
    -m) msets+=(--set "$2"); csets+=(--core-set "$2"); shift 2 ;;
    -k) core=1; shift ;;
    -T) transport=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "perf/trace_replay.sh: unknown argument '$1' (see -h)" >&2; exit 2 ;;
    esac
done
extra=("$@")

for p in trace_replay mooncake-master mooncake-store-server; do
    [ -x "$b/$p" ] || { echo "perf/trace_replay.sh: $b/$p missing (make all)" >&2; exit 2; }
done
# sizes as the configuration files read them: K/KiB = 1024 (M, G alike)
case "$block" in
[1-9]*([0-9])) bytes=$block ;;
[1-9]*([0-9])@(K|KiB)) bytes=$(( ${block%%K*} << 10 )) ;;
[1-9]*([0-9])@(M|MiB)) bytes=$(( ${block%%M*} << 20 )) ;;
*) echo "perf/trace_replay.sh: -b: expected a size such as 65536, 64K or 1MiB, got '$block'" >&2
   exit 2 ;;
esac
if [ "$core" = 1 ]; then
    mode=(--core "${csets[@]}")
    [ "$speed" = afap ] || mode+=(--speedup "$speed")
elif [ "$speed" = afap ]; then
    mode=(--afap)
else
    mode=(--speedup "$speed")
fi
mkdir -p "$out"
# what ran, where and when: the first lines of the output (results/*.txt)
echo "# $cmdline"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null ||
    echo unknown), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"

tmp=$(mktemp -d /tmp/trace_replay.XXXXXX)
pids=()
stop_cluster() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
keep=0
cleanup() {
    stop_cluster
    if [ "$keep" = 1 ]; then echo "perf/trace_replay.sh: logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

# Wait (30 s) until file $1 has a line matching the ERE $2; print it.
wait_line() {
    local i line
    for i in $(seq 600); do
        line=$(grep -E -m1 -- "$2" "$1" 2>/dev/null) && { echo "$line"; return 0; }
        sleep 0.05
    done
    return 1
}

# start_cluster SEGMENT_BYTES -> MASTER, HTTP, MPID, NPIDS
start_cluster() {
    local seg=$1 i l
    # The previous configuration's logs go first: wait_line would otherwise
    # find their "ready" lines (a dead master's port) before the new
    # processes have even truncated them.
    rm -f "$tmp"/master.out "$tmp"/master.log "$tmp"/node*.out "$tmp"/node*.log
    "$b/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=0 \
        --set server.http_port=0 --set log.level=info "${msets[@]}" \
        >"$tmp/master.out" 2>"$tmp/master.log" &
    MPID=$!
    pids=("$MPID")
    l=$(wait_line "$tmp/master.log" 'ready: rpc [^ ]+:[0-9]+') ||
        { keep=1; echo "mooncake-master did not start ($tmp/master.log)" >&2; return 1; }
    MASTER=$(echo "$l" | sed -E 's/.*ready: rpc ([^ ,]+:[0-9]+).*/\1/')
    l=$(wait_line "$tmp/master.log" 'metrics at http://') ||
        { keep=1; echo "mooncake-master has no HTTP port" >&2; return 1; }
    HTTP=$(echo "$l" | sed -E 's|.*http://([^/]+)/metrics.*|\1|')
    NPIDS=
    for i in $(seq "$nodes"); do
        "$b/mooncake-store-server" --set "store.master=$MASTER" \
            --set "store.global_segment_size=$seg" --set store.reactors=1 --set log.level=warn \
            --set "store.shm=$([ "$transport" = shm ] && echo on || echo off)" \
            >"$tmp/node$i.out" 2>"$tmp/node$i.log" &
        pids+=($!)
        NPIDS=${NPIDS:+$NPIDS,}$!
    done
    for i in $(seq "$nodes"); do
        wait_line "$tmp/node$i.out" '^ready ' >/dev/null ||
            { keep=1; echo "storage node $i did not start ($tmp/node$i.log)" >&2; return 1; }
    done
}

status=0
IFS=, read -r -a tlist <<<"$traces"
IFS=, read -r -a nlist <<<"$workers"
IFS=, read -r -a clist <<<"$caps"
for tr in "${tlist[@]}"; do
    case "$tr" in
    */*) src=$tr ;;
    *) src=$here/perf/traces/${tr}_trace.jsonl.gz ;;
    esac
    [ -r "$src" ] || { echo "perf/trace_replay.sh: cannot read $src" >&2; exit 2; }
    name=$(basename "$src"); name=${name%.gz}; name=${name%.jsonl}; name=${name%_trace}
    file=$tmp/$name.jsonl
    case "$src" in *.gz) gzip -dc "$src" >"$file" ;; *) cp "$src" "$file" ;; esac
    csv=$out/${prefix}_$name.csv
    "$b/trace_replay" --csv-header >"$csv"
    for n in "${nlist[@]}"; do
        for c in "${clist[@]}"; do
            total=$((n * c))
            if [ $((total % nodes)) -ne 0 ]; then
                echo "perf/trace_replay.sh: $nodes nodes do not divide $n x $c blocks" >&2
                exit 2
            fi
            seg=$((total / nodes * bytes))
            if [ "$seg" -lt $((1 << 20)) ]; then seg=$((1 << 20)); fi
            echo "== $name: $n workers x $c blocks of $block, $nodes nodes of $seg B, $speed"
            set +e
            if [ "$core" = 1 ]; then
                "$b/trace_replay" --trace "$file" --nodes "$nodes" --workers "$n" \
                    --capacity "$c" --block-size "$block" "${mode[@]}" "${extra[@]}" \
                    >"$tmp/run.out" 2>"$tmp/run.err"
                rc=$?
            else
                start_cluster "$seg"
                "$b/trace_replay" --trace "$file" --master "$MASTER" --master-http "$HTTP" \
                    --master-pid "$MPID" --node-pids "$NPIDS" --nodes "$nodes" --workers "$n" \
                    --capacity "$c" --block-size "$block" --transport "$transport" \
                    "${mode[@]}" "${extra[@]}" >"$tmp/run.out" 2>"$tmp/run.err"
                rc=$?
            fi
            set -e
            sed 's/^/   /' "$tmp/run.out" | grep -v '^   csv,'
            # (each worker's client warns that its RPC port has no secret: not shown)
            grep -v "listens on .* without a secret" "$tmp/run.err" | sed 's/^/   stderr: /' | head -20 || true
            grep '^csv,trace_replay,' "$tmp/run.out" | sed 's/^csv,trace_replay,//' >>"$csv" || true
            if [ "$rc" -ne 0 ]; then status=1; keep=1; fi
            [ "$core" = 1 ] || stop_cluster
        done
    done
    echo
    echo "== $name: ${csv#"$here"/}"
    # the headline columns, one row per configuration
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i;
                       print "N C hit_local hit_global hit_store store/ideal pooled/local" \
                             " store/local saved_store gb_get gb_put get_p50/p99_us" \
                             " put_p50/p99_us evictions errors mismatches req_s"; next }
             { printf "%s %s %s %s %s %s %s %s %s %s %s %s/%s %s/%s %s %s %s %s\n",
                 $col["workers"], $col["capacity_blocks"], $col["hit_local"],
                 $col["hit_global"], $col["hit_store"], $col["store_vs_ideal"],
                 $col["pooled_vs_local"], $col["store_vs_local"], $col["tokens_saved_store"],
                 $col["gb_get"], $col["gb_put"], $col["get_p50_us"], $col["get_p99_us"],
                 $col["put_p50_us"], $col["put_p99_us"], $col["evictions"], $col["errors"],
                 $col["checksum_mismatches"], $col["req_s"] }' "$csv" | column -t
    "$here/perf/trace_plot" "$csv" "$out/${prefix}_$name.png" \
        "$name trace: hit rate vs capacity ($block blocks, $nodes nodes, $speed)" || status=1
done
exit $status
