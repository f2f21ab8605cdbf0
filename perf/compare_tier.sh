#!/usr/bin/env bash
# perf/compare_tier.sh - tier read bandwidth against dd of the same files.
#
#   perf/compare_tier.sh [-n OBJECTS] [-s SIZE] [-r ROUNDS]
#
# 1. A mooncake-master with root_fs_dir (a mkdtemp directory under /tmp) and a
#    storage node with a 64 MiB segment; `tier_bench put` writes OBJECTS
#    objects of SIZE (default 64 x 4 MiB) with persist = eager (most of them
#    are evicted from memory on the way).
# 2. The master is restarted: it rebuilds the objects from the files, with
#    only their DISK replicas, so every get below reads a file.
# 3. ROUNDS times (default 3), back to back, each reading every object once,
#    one at a time:
#      store: `tier_bench get`: mc_store_get through the client
#             (GetReplicaList, worker-thread file read, key + XXH3 check, into
#             the caller's buffer);
#      file:  `tier_bench read`: mc_tier_read alone (no master, no client);
#      dd:    `dd if=FILE of=/dev/null bs=4M` per file; bandwidth = bytes /
#             the sum of dd's own reported times (its exec cost excluded).
# Page cache: not dropped (the script needs no root), so every file is in
# the page cache for all three (warm: they were just written and fit in RAM);
# the figures compare the read paths, not the disk (perf/compare_offload.sh's
# buf-cold mode reads the disk through the page cache, cold).
set -euo pipefail
# storage nodes take a free HTTP port (several per host here; store.http_port)
export MC_STORE_HTTP_PORT=${MC_STORE_HTTP_PORT:-0}

here=$(cd "$(dirname "$0")/.." && pwd)
b=${BUILD:-$here/build}
n=64
size=4M
rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=$2; shift 2 ;;
    -s) size=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

root=$(mktemp -d /tmp/mc_tier_bench.XXXXXX)
rpc=$((20000 + RANDOM % 20000))
http=$((rpc + 1))
node=$((rpc + 2))
mpid=
npid=
cleanup() {
    [ -n "$npid" ] && kill "$npid" 2>/dev/null || true
    [ -n "$mpid" ] && kill "$mpid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$root" "$root.master.log"
}
trap cleanup EXIT

start_master() {
    "$b/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=$rpc \
        --set server.http_port=$http --set server.reactors=1 --set server.root_fs_dir="$root" \
        --set server.cluster_id=bench --set server.persist=eager --set log.level=warn \
        >/dev/null 2>>"$root.master.log" &
    mpid=$!
    for _ in $(seq 100); do
        (echo >/dev/tcp/127.0.0.1/$rpc) 2>/dev/null && return 0
        sleep 0.05
    done
    echo "master did not start" >&2
    exit 1
}

start_master
"$b/mooncake-store-server" --set store.master=127.0.0.1:$rpc --set store.port=$node \
    --set store.local_hostname=127.0.0.1:$node --set store.global_segment_size=64MiB \
    --set store.reactors=1 --set log.level=error >/dev/null &
npid=$!
sleep 0.5
"$b/tier_bench" put --master 127.0.0.1:$rpc -n "$n" --size "$size"
kill "$mpid"; wait "$mpid" 2>/dev/null || true
start_master
sleep 0.3

files=$("$b/tier_bench" files --dir "$root/bench" -n "$n")
bytes=$(stat -c %s $files | awk '{s += $1} END {print s}')
echo "$n files, $bytes bytes in $root/bench (headers included); page cache warm for all"

declare -a S F D
for r in $(seq "$rounds"); do
    S+=("$("$b/tier_bench" get --master 127.0.0.1:$rpc -n "$n" --size "$size" --rounds 1 |
        awk -F, '/^csv/ {print $7}')")
    F+=("$("$b/tier_bench" read --dir "$root/bench" -n "$n" --size "$size" --rounds 1 |
        awk -F, '/^csv/ {print $7}')")
    t=0
    for f in $files; do
        s=$(LC_ALL=C dd if="$f" of=/dev/null bs=4M 2>&1 | awk '/copied/ {print $(NF-3)}')
        t=$(echo "$t + $s" | bc -l)
    done
    D+=("$(printf '%.4f' "$(echo "$bytes / $t / 1000000000" | bc -l)")")
done

med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ms=$(med "${S[@]}"); mf=$(med "${F[@]}"); md=$(med "${D[@]}")
printf '\n%-8s %8s %8s   %s\n' "path" "GB/s" "vs dd" "(median of $rounds rounds; GB/s of each round)"
printf '%-8s %8.3f %8.2f   rounds: %s\n' store "$ms" "$(echo "$ms / $md" | bc -l)" "${S[*]}"
printf '%-8s %8.3f %8.2f   rounds: %s\n' file "$mf" "$(echo "$mf / $md" | bc -l)" "${F[*]}"
printf '%-8s %8.3f %8.2f   rounds: %s\n' dd "$md" 1 "${D[*]}"
echo "csv,compare_tier,$size,$n,$ms,$mf,$md"
echo "(dd runs one process per file: it faults its 4 MiB buffer in every time; the"
echo " tier paths reuse one buffer. Same files, same page-cache state.)"
