#!/usr/bin/env bash
# perf/compare_offload.sh - node-local offload against fio on the same directory.
#
#   perf/compare_offload.sh [-n OBJECTS] [-s SIZE] [-w STORMS] [-r ROUNDS] [-q "DEPTHS"] [-d PARENT]
#
# A mooncake-master with enable_offload + offload_on_evict (watermark 0.6)
# and one storage node with a 64 MiB segment and its offload directory in a
# mkdtemp directory under PARENT (default /tmp: the same file system fio
# writes on).
# 1. Offload during an eviction storm: `tier_bench put` of OBJECTS x SIZE
#    (default 64 x 4 MiB = 256 MiB through 64 MiB): every object the master
#    evicts is first written by the node (one file per object: write to a
#    temp file, fsync, rename; the objects of one poll's answer in a batch
#    whose fsyncs run together). GB/s = bytes the node persisted (master_offload_persisted_total
#    x SIZE) / the put phase's wall time. A put the full pool refuses
#    (NO_AVAILABLE_HANDLE: the node is still writing what eviction chose) is
#    tried again after PUT_RETRY_US (environment, default 1000 µs: with the
#    20 ms of earlier runs the disk idled while the putter slept: 18-47
#    refusals, 0.36-0.94 s of a 0.7-1.3 s storm; the count is printed). Peer: fio sequential writes, same
#    block size, queue depth 1, psync, fsync after every block (as each
#    offloaded object is synced before it is answered), total OBJECTS x SIZE,
#    to a new file (the node's files are new); and fio without fsync.
#    STORMS storms (default 3), each on a new master, node and directory,
#    each next to a run of the fio peers (after it in odd storms, before it
#    in even ones): medians, and r-ratio, the median of each storm's ratio
#    to its fio run. Warm-up on both sides, not counted: the putter
#    (`tier_bench put --warm`) first puts OBJECTS keys PREFIX-warm/<i>
#    through the same storm, they are removed (mooncake-cli rm --regex) and
#    their files deleted, then the timed pass (its GB/s: the objects the
#    node persisted in it / its seconds); fio writes once before the first
#    storm. (Without them one storm against one fio run read 0.48x-1.05x in
#    three runs of one build: fio's first file in a new directory wrote at
#    0.28-0.45 GB/s, its later ones at 0.8-1.0, and on this VM a process
#    pays 5-7 us at its first touch of each page of a mapping.)
#    The node writes through the page cache, syncs each file (a batch's
#    fsyncs together) before the master is told, then drops
#    the pages (its default); STORM_ARGS (environment) adds --set words to
#    the storms' node, e.g. "--set store.offload_direct_writes=true".
#    The node's load stages (mooncake_store_offload_load_stage_seconds on its
#    HTTP port) are printed as means per object for each read row, and so
#    are the reader's (mooncake_store_get_load_stage_seconds, written by
#    `tier_bench get --stages`): its call, the master's hold (the node's
#    load inside), the transfer out of the node's segment.
# 2. Reads of objects only on the node's disk: more puts push every object
#    of step 1 out of memory, the node is restarted (it reports its files:
#    every object is LOCAL_DISK only, memory empty) after a sync and
#    SETTLE_S seconds (default 5: the device settles after the writes), then for each queue
#    depth D of DEPTHS (default "1 4") and each of the node's two read modes
#    (O_DIRECT, its default; and offload_buffered_io=true: the page cache),
#    one `tier_bench get --depth D --rounds ROUNDS+1` process (another
#    process than the node, kept for all rounds as a serving engine keeps
#    its client, its buffers registered with it as a serving engine's KV
#    buffers are: `--register`; READER_REGISTER=0: not, a staging copy
#    more) reads every object once a round, D gets in flight (the
#    master has the node load each into its segment, answers the get once
#    it is there, the reader copies it from the node's segment; bytes
#    checked by XXH3 outside the timing). Round 0 is a warm-up, not counted:
#    on this VM a process's first touch of each 4 KiB page of a mapping
#    costs 5-7 us (0.55 GB/s for a first memcpy out of a new mapping of a
#    memfd, 17 GB/s after), so a reader started afresh every round spent
#    ~1-2 ms of each 4 MiB get there, and the disk's host-side cache is
#    warmed for both sides alike (fio's warm-up is its run after round 0).
#    After every round, outside its time (`--between`), the peers run: the
#    same minute of the disk for both.
#    Peer: fio sequential reads of a file of the same total size in the same
#    directory, same block size, io_uring with iodepth D, with --direct=1
#    (the device, against our O_DIRECT mode) and buffered with
#    --invalidate=0 (the page cache, warm as the offload files are: fio.dat
#    was written buffered just before; against our buffered mode).
#    The O_DIRECT mode has progressive loads as by default (a load alone in
#    flight tells its progress: its reader copies the pieces already read
#    while the node reads the rest); a third mode, direct-np, is O_DIRECT
#    without them (MC_OFFLOAD_PROGRESS=0: the reader copies after the load's
#    answer), the same fio peers.
#    Two more modes read through the node's store service: colocated (the
#    reader is a co-located client of the node's service, its buffers
#    mc_store_shared_alloc memory registered with it, as SGLang's host KV
#    pages: the node reads each file straight into them, O_DIRECT, no load
#    into its segment and no copy out: own reads) and coloc-buf (the same
#    through the page cache), against the same fio peers. Their reader calls
#    sync gets from D threads (tier_bench --sync; COLOC_SYNC=0: async gets
#    from one thread as the other modes, which a co-located client runs on
#    helper threads: one more thread hop each way), as serving engines call a
#    co-located client. MC_STORE_USE_HUGEPAGE=1 (environment: upstream's
#    switch) puts the reader's buffers in 2 MiB pages, so the node's read
#    into them is one large request (without it their pages are normal ones,
#    as contiguous as luck makes them: the read's time varies 1.5x from run
#    to run; perf/results/offload_thp.txt). MODES (environment)
#    picks modes (default "direct direct-np buffered buf-cold colocated
#    coloc-buf"). buf-cold: buffered, the page cache dropped before every
#    round of ours and every fio run (root; skipped, said so, without).
#    In O_DIRECT modes a second peer: fio reading the node's own object files
#    (the very device blocks the gets read), one after another, same block
#    size and depth: this VM's disk reads fio.dat at 0.5-0.7 GB/s in some
#    rounds and 1.2-2.8 GB/s (a host-side cache) in others, so the same
#    blocks make the fairer peer.
#    "loads" = the master's master_offload_loads_total plus
#    master_offload_own_reads_total per round: every get of the round was a
#    read of the disk (n of n) or not.
# Lease: every get of a disk-only object leaves its loaded copy in the node's
# segment; its reader releases the copy's lease once it copied it, so the
# copy may go at the next load's eviction (a reader without that, or a
# master with lease_release off, holds it for master.lease_ttl: the segment
# would have to hold one lease period of reads, and through the page cache
# loads waited for room). In step 2 the node's segment is 64 MiB
# (READ_SEGMENT; with 160 MiB, 2-6 gets a round found a copy loaded in the
# round before still there: "loads" says n of n now) and the lease is
# 200 ms. A get whose read outlives its lease (a busy machine)
# fails with LEASE_EXPIRED and is read again, in the time ("re-reads").
# HUGEPAGES=1 (environment): every node's segment in hugetlb pages
# (store.segment_hugepages) and fio's buffers too (--mem=shmhuge); the
# caller reserves the pool (echo 96 > /proc/sys/vm/nr_hugepages). A device
# read into 4 KiB pages scattered in memory goes out as ~1 MiB requests
# (the queue's 254 segments), into 2 MiB pages as one 4 MiB request: this
# VM's disk serves those 1.5-2.5x faster, for us and for fio alike. The
# co-located reader's buffers stay normal pages.
# Page cache: the buffered and coloc-buf figures of both sides are served by
# it (warm: fio.dat was written buffered just before, the node's files were
# read in round 0). buf-cold (root) drops it (sync; echo 3 >
# /proc/sys/vm/drop_caches) before fio's read and again before each of our
# rounds, outside the times: both sides read the disk through the page
# cache, and the node's opens find no cached inode either. The O_DIRECT
# modes and buf-cold measure the disk as the VM sees it: a host-side cache
# sits below it here (fio's cold reads of one file alternate between ~0.65
# and ~1.9 GB/s from round to round).
# The machine is shared: figures vary; compare within one run.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
b=${BUILD:-$here/build}
n=64
size=4M
rounds=3
storms=3
depths="1 4"
parent=/tmp
put_retry=${PUT_RETRY_US:-1000}
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=$2; shift 2 ;;
    -s) size=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -w) storms=$2; shift 2
        [[ "$storms" =~ ^[1-9][0-9]*$ ]] || { echo "-w wants a count of storms (1 or more)" >&2; exit 2; } ;;
    -q) depths=$2; shift 2 ;;
    -d) parent=$2; shift 2 ;;
    -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v fio >/dev/null || { echo "fio is needed (Debian package fio)" >&2; exit 1; }
case "$size" in
*M) bytes_each=$(( ${size%M} * 1048576 )) ;;
*K) bytes_each=$(( ${size%K} * 1024 )) ;;
*) bytes_each=$size ;;
esac
bs=$((bytes_each / 1024))k
total_mb=$(( n * bytes_each / 1048576 ))
# HUGEPAGES=1 (see above): 80 free 2 MiB pages wanted: the storm or read
# node's 64 MiB segment, a reader's mapping of the one before, fio's buffers
node_huge=()
fio_mem=()
if [ "${HUGEPAGES:-0}" = 1 ]; then
    hp=/sys/kernel/mm/hugepages/hugepages-2048kB # the size segment_hugepages asks for
    hp_free=$(($(cat "$hp/free_hugepages" 2>/dev/null || echo 0) - $(cat "$hp/resv_hugepages" 2>/dev/null || echo 0)))
    if [ "${hp_free:-0}" -lt 80 ]; then
        echo "HUGEPAGES=1 wants 80 free 2 MiB pages ($hp_free free): echo 96 > /proc/sys/vm/nr_hugepages" >&2
        exit 1
    fi
    node_huge=(--set store.segment_hugepages=true)
    fio_mem=(--mem=shmhuge)
fi

root=$(mktemp -d "$parent/mc_offload_bench.XXXXXX")
rpc=$((20000 + RANDOM % 12000)) # below the ephemeral ports (32768-)
http=$((rpc + 1))
node=$((rpc + 2))
nhttp=$((rpc + 3))
svc=$((rpc + 4))
mpid=
npid=
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ]; then # say why before the logs go
        for f in bench node master; do
            [ -s "$root/$f.log" ] && { echo "--- $f.log (last lines)"; tail -8 "$root/$f.log"; } >&2
        done
    fi
    [ -n "$npid" ] && kill "$npid" 2>/dev/null || true
    [ -n "$mpid" ] && kill "$mpid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT

start_master() {
    "$b/mooncake-master" --set server.bind_address=127.0.0.1 --set server.rpc_port=$rpc \
        --set server.http_port=$http --set server.reactors=1 --set master.enable_offload=true \
        --set master.offload_on_evict=true --set master.offload_cap_ratio=1.0 \
        --set master.eviction_high_watermark_ratio=0.6 --set master.eviction_ratio=0.2 \
        --set master.client_ttl=2s --set master.lease_ttl=200ms --set log.level=warn >/dev/null 2>>"$root/master.log" &
    mpid=$!
    for _ in $(seq 100); do
        (echo >/dev/tcp/127.0.0.1/$rpc) 2>/dev/null && break
        sleep 0.05
    done
}
stop_master() {
    kill "$mpid"; wait "$mpid" 2>/dev/null || true
    mpid=
}
start_master

start_node() { # [SEGMENT_SIZE [--set ...]]
    local seg=${1:-64MiB}
    shift || true
    nlog0=0 # node.log's lines before this node's
    [ -f "$root/node.log" ] && nlog0=$(wc -l <"$root/node.log")
    "$b/mooncake-store-server" --set store.master=127.0.0.1:$rpc --set store.port=$node \
        --set store.local_hostname=127.0.0.1:$node --set store.global_segment_size="$seg" \
        --set store.offload_dir="$root/node" --set store.reactors=1 --set store.http_port=$nhttp \
        --set log.level=info "${node_huge[@]}" "$@" \
        >/dev/null 2>>"$root/node.log" &
    npid=$!
    sleep 0.5
}
stop_node() {
    kill "$npid"; wait "$npid" 2>/dev/null || true
    npid=
}
metric() {
    curl -s "http://127.0.0.1:$http/metrics" | awk -v k="$1" '$1 == k {print $2}'
}
stage_sums() { # "sum_s count" of each load stage on the node, in stage order
    curl -s "http://127.0.0.1:$nhttp/metrics" | stage_sums_of -
}
stage_sums_of() { # FILE (the node's /metrics text): as stage_sums
    awk '
        /^mooncake_store_offload_load_stage_seconds_(sum|count)\{/ {
            match($1, /stage="[a-z]*"/); st = substr($1, RSTART + 7, RLENGTH - 8)
            if ($1 ~ /_sum\{/) sum[st] = $2; else cnt[st] = $2
        }
        END { n = split("handoff open read verify answer first", o, " ")
              for (i = 1; i <= n; i++) printf "%s %s ", sum[o[i]] + 0, cnt[o[i]] + 0; print "" }' "$1"
}
stage_means() { # BEFORE AFTER (stage_sums): mean µs per load of each stage
    awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); split(b, y, " ")
        split("handoff open read verify answer first", o, " ")
        for (i = 1; i < n; i += 2) { c = y[i + 1] - x[i + 1]
            printf "%s %.0f  ", o[(i + 1) / 2], (c > 0 ? (y[i] - x[i]) * 1e6 / c : 0) } }'
}
rstage_sums() { # FILE (tier_bench --stages) [SUMS]: SUMS plus the reader's "sum_s count" by stage
    awk -v acc="${2:-}" '
        /^mooncake_store_get_load_stage_seconds_(sum|count)\{/ {
            match($1, /stage="[a-z]*"/); st = substr($1, RSTART + 7, RLENGTH - 8)
            if ($1 ~ /_sum\{/) sum[st] = $2; else cnt[st] = $2
        }
        END { n = split("submit call held prepare transfer finish", o, " "); split(acc, a, " ")
              for (i = 1; i <= n; i++) printf "%s %s ", sum[o[i]] + a[2 * i - 1], cnt[o[i]] + a[2 * i]
              print "" }' "$1"
}
rstage_means() { # SUMS (rstage_sums) NODE_BEFORE NODE_AFTER (stage_sums) GET_US: mean µs per get of
    # each reader stage, and the get less the node's load (handoff .. answer): all that is outside it
    awk -v a="$1" -v x0="$2" -v x1="$3" -v g="$4" 'BEGIN { n = split(a, x, " ")
        split("submit call held prepare transfer finish", o, " ")
        for (i = 1; i < n; i += 2) { m[o[(i + 1) / 2]] = x[i + 1] > 0 ? x[i] * 1e6 / x[i + 1] : 0
            printf "%s %.0f  ", o[(i + 1) / 2], m[o[(i + 1) / 2]] }
        k = split(x0, p, " "); split(x1, q, " "); node = 0
        for (i = 1; i < k && i < 10; i += 2) # handoff .. answer (first is inside read)
            if (q[i + 1] > p[i + 1]) node += (q[i] - p[i]) * 1e6 / (q[i + 1] - p[i + 1])
        printf "| get - node %.0f", g - node }'
}
wait_idle() { # the node answered every request
    for _ in $(seq 600); do
        [ "$(metric master_offload_queued)" = 0 ] && [ "$(metric master_offload_in_flight)" = 0 ] &&
            return 0
        sleep 0.05
    done
}

med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
fio_bw() { # GB/s of a fio run (its own bandwidth figure)
    fio --output-format=terse --terse-version=3 "$@" 2>/dev/null |
        awk -F';' -v rw="$RW" '{ if (rw == "read") print $7 * 1024 / 1e9; else print $48 * 1024 / 1e9 }'
}
fio_writes() { # the write peers, on a new fio.dat as the node's files are new
    rm -f "$root/fio.dat"
    local f
    for f in sync buf; do
        local extra=()
        [ $f = sync ] && extra=(--fsync=1)
        local v
        v=$(RW=write fio_bw --name=w --directory="$root" --filename=fio.dat --rw=write --bs="$bs" \
            --iodepth=1 --ioengine=psync --size="${total_mb}M" "${extra[@]}" --end_fsync=1 \
            "${fio_mem[@]}")
        [ -n "$v" ] || {
            echo "compare_offload: fio's write run gave no figure (run it by hand in $root)" >&2
            exit 1
        }
        echo "$v" >>"$root/w.$f"
    done
}
# 1. eviction storms: STORMS of them (-w), each on a new master, node and
# directory, alternated with the fio peers (fio first in every other one:
# the disk's minute is the same for both in the median); the last one's
# files are read in step 2
: >"$root/w.sync"
: >"$root/w.buf"
fio_writes # its warm-up (the directory's first blocks), not counted
: >"$root/w.sync"
: >"$root/w.buf"
cat >"$root/warm.sh" <<WARM
#!/usr/bin/env bash
# after tier_bench put --warm's warm-up pass: once the node answered every
# request (an object removed while its write is pending would hold its
# memory until offload_timeout), its objects removed and their files
# deleted by the node, then the persisted count the timed pass starts from
set -euo pipefail
m() { curl -s "http://127.0.0.1:$http/metrics" | awk -v k="\$1" '\$1 == k {print \$2}'; }
for i in \$(seq 401); do
    [ "\$(m master_offload_queued)" = 0 ] && [ "\$(m master_offload_in_flight)" = 0 ] && break
    [ "\$i" = 401 ] && { echo "warm-up: the node did not answer every request in 10 s" >&2; exit 1; }
    sleep 0.025
done
"$b/mooncake-cli" --master 127.0.0.1:$rpc -q rm --force --regex '^off-warm/' >/dev/null
for i in \$(seq 401); do
    [ "\$(find "$root/node" -type f ! -name '.*' | wc -l)" = 0 ] && break
    [ "\$i" = 401 ] && { echo "warm-up: the node kept its files 10 s after their removal" >&2; exit 1; }
    sleep 0.025
done
m master_offload_persisted_total >"$root/w.base"
[ -s "$root/w.base" ] || { echo "warm-up: no master_offload_persisted_total" >&2; exit 1; }
WARM
chmod +x "$root/warm.sh"
W=()
for ((si = 1; si <= storms; si++)); do
    if [ "$si" -gt 1 ]; then
        stop_node
        stop_master
        rm -rf "$root/node"
        start_master
    fi
    # shellcheck disable=SC2086 # STORM_ARGS: words
    start_node 64MiB ${STORM_ARGS:-}
    [ $((si % 2)) = 0 ] && fio_writes
    "$b/tier_bench" put --master 127.0.0.1:$rpc -n "$n" --size "$size" --prefix off \
        --retry "$put_retry" --warm --between "$root/warm.sh" >"$root/put.out" 2>>"$root/bench.log"
    secs=$(sed -n 's/^put pass: \([0-9.]*\) s$/\1/p' "$root/put.out")
    [ -n "$secs" ] || { echo "compare_offload: tier_bench put printed no pass time" >&2; exit 1; }
    persisted=$(($(metric master_offload_persisted_total) - $(cat "$root/w.base")))
    W+=("$(echo "$persisted * $bytes_each / $secs / 1000000000" | bc -l)")
    if [ $((si % 2)) = 1 ]; then
        wait_idle # the node's last writes do not run into fio's
        fio_writes
    fi
    echo "storm $si: $persisted objects of $size written in $secs s ($n put; $(sed -n 's/.*; //p' "$root/put.out" | head -1)): $(printf '%.3f' "${W[-1]}") GB/s; fio fsync every block $(tail -1 "$root/w.sync"), buffered $(tail -1 "$root/w.buf")"
done
mapfile -t FWS <"$root/w.sync"
mapfile -t FWB <"$root/w.buf"
w_gbs=$(med "${W[@]}")
fw_sync=$(med "${FWS[@]}")
fw=$(med "${FWB[@]}")
# the median of each storm's ratio to the fio run next to it
w_rr=$(med $(for ((i = 0; i < ${#W[@]}; i++)); do echo "${W[i]} / ${FWS[i]}" | bc -l; done))

# 2. disk-only reads: push everything out, restart the node
"$b/tier_bench" put --master 127.0.0.1:$rpc -n 32 --size "$size" --prefix fill >/dev/null 2>>"$root/bench.log"
wait_idle
stop_node
files=$(find "$root/node" -type f ! -name '.*' | wc -l)
echo "offload: $files files on the node after the last storm"
# let the device settle after the storm's writes (SETTLE_S, default 5 s):
# without it the mode measured first was the slower one, whichever it was
sync
sleep "${SETTLE_S:-5}"

rows=()
objrows=()
stages=()
rstages=()
for mode in ${MODES:-direct direct-np buffered buf-cold colocated coloc-buf}; do
    rseg=${READ_SEGMENT:-64MiB}
    reader=()
    [ "${READER_REGISTER:-1}" = 1 ] && reader=(--register)
    case $mode in
    direct) start_node "$rseg" ;;
    colocated) # the reader is a co-located client of the node's store service
        start_node "$rseg" --set service.enabled=true --set service.port=$svc
        reader=(--service 127.0.0.1:$svc)
        [ "${COLOC_SYNC:-1}" = 1 ] && reader+=(--sync)
        true ;;
    coloc-buf)
        start_node "$rseg" --set service.enabled=true --set service.port=$svc \
            --set store.offload_buffered_io=true
        reader=(--service 127.0.0.1:$svc)
        [ "${COLOC_SYNC:-1}" = 1 ] && reader+=(--sync)
        true ;;
    direct-np) # O_DIRECT, no progressive loads: readers copy after the load's answer
        export MC_OFFLOAD_PROGRESS=0
        start_node "$rseg"
        unset MC_OFFLOAD_PROGRESS ;;
    buffered) start_node "$rseg" --set store.offload_buffered_io=true ;;
    buf-cold) # buffered, the page cache dropped before every round (ours and fio's)
        if ! { : >/proc/sys/vm/drop_caches; } 2>/dev/null; then
            echo "buf-cold: skipped (the page cache cannot be dropped: /proc/sys/vm/drop_caches wants root)"
            continue
        fi
        start_node "$rseg" --set store.offload_buffered_io=true ;;
    *) echo "compare_offload: unknown mode '$mode' (MODES)" >&2; exit 2 ;;
    esac
    sleep 1
    for d in $depths; do
        declare -a S=() F=() L=() R=() G=()
        # fio reads names literally only without '%' (the node escapes keys): links
        rm -rf "$root/objs" && mkdir "$root/objs"
        k=0
        for f in $(find "$root/node" -type f -name 'off%2F*' ! -name '*.tmp*' | sort); do
            k=$((k + 1)); ln -s "$f" "$root/objs/o$k"
        done
        objlist=$(find "$root/objs" -type l | sort | paste -sd:)
        # one reader process for all rounds (a serving engine keeps its
        # client): round 0 warms it up (its first touch of each page of the
        # node's shared segment; the disk's host-side cache for both sides)
        # and is not counted; after each round, outside its time, the peers
        # run (--between): the same minute of this disk for both
        cat > "$root/peer.sh" <<PEER
#!/usr/bin/env bash
curl -s "http://127.0.0.1:$http/metrics" | awk '\$1 ~ /^master_offload_(loads|own_reads)_total\$/ {s += \$2} END {print s}' >> "$root/p.loads"
[ "\$MC_BENCH_ROUND" = 0 ] && curl -s "http://127.0.0.1:$nhttp/metrics" > "$root/p.node0"
fio_bw() { fio --output-format=terse --terse-version=3 "\$@" 2>/dev/null | awk -F';' '{print \$7 * 1024 / 1e9}'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
if [ "$mode" = buf-cold ]; then
    # both sides from the device through the page cache: dropped before fio's
    # read and again before our next round (outside its time)
    drop
    fio_bw --name=r --directory="$root" --filename=fio.dat --rw=read --bs="$bs" --iodepth="$d" \
        --ioengine=io_uring --size="${total_mb}M" --invalidate=1 ${fio_mem[*]} >> "$root/p.fio"
    drop
elif [ "$mode" != buffered ] && [ "$mode" != coloc-buf ]; then
    fio_bw --name=r --directory="$root" --filename=fio.dat --rw=read --bs="$bs" --iodepth="$d" \
        --ioengine=io_uring --size="${total_mb}M" --direct=1 ${fio_mem[*]} >> "$root/p.fio"
    fio_bw --name=o --filename="$objlist" --file_service_type=sequential --rw=read --bs="$bs" \
        --iodepth="$d" --ioengine=io_uring --direct=1 ${fio_mem[*]} >> "$root/p.obj"
else
    fio_bw --name=r --directory="$root" --filename=fio.dat --rw=read --bs="$bs" --iodepth="$d" \
        --ioengine=io_uring --size="${total_mb}M" --invalidate=0 ${fio_mem[*]} >> "$root/p.fio"
fi
PEER
        chmod +x "$root/peer.sh"
        rm -f "$root/p.loads" "$root/p.fio" "$root/p.obj" "$root/p.node0" "$root/rstages"
        echo $(( $(metric master_offload_loads_total) + $(metric master_offload_own_reads_total) )) \
            > "$root/p.loads"
        out=$("$b/tier_bench" get --master 127.0.0.1:$rpc -n "$n" --size "$size" --prefix off \
            --rounds $((rounds + 1)) --depth "$d" --stages "$root/rstages" --between "$root/peer.sh" \
            "${reader[@]}" \
            2>>"$root/bench.log") || {
            echo "tier_bench get failed ($mode, depth $d):" >&2
            tail -5 "$root/bench.log" >&2
            exit 1
        }
        st0=$(stage_sums_of "$root/p.node0") # after the warm-up round
        mapfile -t S < <(echo "$out" | awk -F, '/^csv/ && $6 > 0 {print $7}')
        mapfile -t R < <(echo "$out" | awk -F, '/^csv/ && $6 > 0 {print $8}')
        mapfile -t F < <(tail -n +2 "$root/p.fio")
        G=()
        [ -s "$root/p.obj" ] && mapfile -t G < <(tail -n +2 "$root/p.obj")
        mapfile -t L < <(awk 'NR > 2 {print $1 - prev} {prev = $1}' "$root/p.loads")
        rst=$(rstage_sums "$root/rstages")
        rpart=$(awk '$1 == "mooncake_store_get_load_partial_bytes_total" {v = $2} END {print v + 0}' \
            "$root/rstages")
        if [ "${#S[@]}" != "$rounds" ] || [ "${#F[@]}" != "$rounds" ]; then
            echo "compare_offload: $mode depth $d: ${#S[@]} rounds of gets, ${#F[@]} of fio (want $rounds)" >&2
            exit 1
        fi
        ms=$(med "${S[@]}"); mf=$(med "${F[@]}")
        st1=$(stage_sums)
        get_us=$(echo "$bytes_each / $ms / 1000" | bc -l)
        stages+=("$(printf '%-9s %5s  get %.0f (median round)  %s' "$mode" "$d" "$get_us" \
            "$(stage_means "$st0" "$st1")")")
        rstages+=("$(printf '%-9s %5s  %s | copied early %s KiB/get' "$mode" "$d" \
            "$(rstage_means "$rst" "$st0" "$st1" "$get_us")" \
            "$(echo "$rst" | awk -v p="$rpart" '{ printf "%.0f", ($6 > 0 ? p / 1024 / $6 : 0) }')")")
        declare -a Q=()
        for i in "${!S[@]}"; do Q+=("$(echo "${S[$i]} / ${F[$i]}" | bc -l)"); done
        mq=$(med "${Q[@]}")
        rows+=("$(printf '%-9s %5s %9.3f %9.3f %7.2f %7.2f   loads/round: %s  re-reads: %s  rounds: %s | fio %s' \
            "$mode" "$d" "$ms" "$mf" "$(echo "$ms / $mf" | bc -l)" "$mq" "${L[*]}" "${R[*]}" "${S[*]}" "${F[*]}")")
        echo "csv,compare_offload_read,$mode,$size,$n,$d,$ms,$mf"
        if [ ${#G[@]} -gt 0 ]; then
            mg=$(med "${G[@]}")
            declare -a QG=()
            for i in "${!S[@]}"; do QG+=("$(echo "${S[$i]} / ${G[$i]}" | bc -l)"); done
            objrows+=("$(printf '%-9s %5s %9.3f %9.3f %7.2f %7.2f   fio rounds: %s' "$mode" "$d" "$ms" \
                "$mg" "$(echo "$ms / $mg" | bc -l)" "$(med "${QG[@]}")" "${G[*]}")")
            echo "csv,compare_offload_read_objfiles,$mode,$size,$n,$d,$ms,$mg"
        fi
    done
    io=$(grep -o 'loads read with .*' "$root/node.log" | tail -1)
    own=$(curl -s "http://127.0.0.1:$nhttp/metrics" | awk '
        $1 == "mooncake_store_offload_own_reads_total" {n = $2}
        $1 == "mooncake_store_offload_own_reads_direct_total" {d = $2}
        $1 == "mooncake_store_offload_loads_total" {ln = $2}
        $1 == "mooncake_store_offload_loads_direct_total" {ld = $2}
        END { if (ln > 0) printf "; %d loads (%d O_DIRECT)", ln, ld
              if (n > 0) printf "; %d own reads (%d O_DIRECT) straight into the reader'"'"'s memory", n, d }')
    mem=normal
    [ ${#node_huge[@]} -gt 0 ] && mem="hugetlb (segment_hugepages; fio --mem=shmhuge)"
    nlog=$(tail -n +"$((nlog0 + 1))" "$root/node.log")
    thp=$(echo "$nlog" | grep -o "'mooncake-segment': [0-9]* of [0-9]* MiB in 2 MiB pages" | tail -1)
    [ -n "$thp" ] && mem="transparent huge pages (${thp#*: })"
    echo "$nlog" | grep -q 'segment_hugepages: no\|no hugetlb memfd' &&
        mem="$mem (no hugetlb pages free)"
    case $mode in
    colocated | coloc-buf) # mc_store_shared_alloc: upstream's switch
        case ${MC_STORE_USE_HUGEPAGE:-} in
        "" | 0 | [Ff][Aa][Ll][Ss][Ee] | [Nn][Oo] | [Oo][Ff][Ff])
            mem="$mem; reader's buffers: normal pages (MC_STORE_USE_HUGEPAGE unset)" ;;
        *) mem="$mem; reader's buffers: 2 MiB pages (MC_STORE_USE_HUGEPAGE=$MC_STORE_USE_HUGEPAGE)" ;;
        esac ;;
    esac
    echo "node ($mode): $io$own; segment pages: $mem"
    grep -q 'refuses O_DIRECT' "$root/node.log" && grep 'refuses O_DIRECT' "$root/node.log" | tail -1
    stop_node
done

printf '\n%-44s %8s %8s %7s\n' "write path ($n x $size, queue depth 1), medians of $storms" "GB/s" "ratio" "r-ratio"
printf '%-44s %8.3f %8s %7s   storms: %s\n' "write: offload during the eviction storm" "$w_gbs" "" "" \
    "$(printf '%.3f ' "${W[@]}")"
printf '%-44s %8.3f %8.2f %7.2f   fio: %s\n' "write: fio seq, fsync every block" "$fw_sync" \
    "$(echo "$w_gbs / $fw_sync" | bc -l)" "$w_rr" "$(printf '%.3f ' "${FWS[@]}")"
printf '%-44s %8.3f %8.2f %7s   fio: %s\n' "write: fio seq, buffered" "$fw" "$(echo "$w_gbs / $fw" | bc -l)" "" \
    "$(printf '%.3f ' "${FWB[@]}")"
echo "csv,compare_offload_write,$size,$n,$w_gbs,$fw_sync,$fw"
printf '\nreads of disk-only objects (%s x %s), GB/s, medians of %s rounds; fio: io_uring, same depth\n' \
    "$n" "$size" "$rounds"
printf '%-9s %5s %9s %9s %7s %7s\n' "node I/O" "depth" "get" "fio" "ratio" "r-ratio"
printf '%s\n' "${rows[@]}"
echo "(ratio = offload / fio, of the medians; r-ratio: the median of each round's ratio (a round"
echo " runs ours, then fio, back to back: on a busy machine the fairer one)."
echo " direct: the node reads with O_DIRECT, fio --direct=1: the device."
echo " direct-np: direct without progressive loads (MC_OFFLOAD_PROGRESS=0): copied after the answer."
echo " buffered: offload_buffered_io=true and fio buffered: both served by the page cache.
 buf-cold: the same with the page cache dropped before each round of both: both from the disk.
 colocated: the reader is a co-located client of the node's store service (its buffers:
  mc_store_shared_alloc memory registered with it): the node reads the file straight into
  them (O_DIRECT), no load into its segment, no copy out; coloc-buf: the same, buffered.)"
printf '\nthe same O_DIRECT reads against fio reading the node'"'"'s own object files (the very blocks the\n'
printf 'gets read, one file after another, %s per read, same depth), GB/s, medians\n' "$bs"
printf '%-9s %5s %9s %9s %7s %7s\n' "node I/O" "depth" "get" "fio-obj" "ratio" "r-ratio"
printf '%s\n' "${objrows[@]}"
printf '\nwhere a get of a disk-only object spends its time, µs per object (get: the whole get at the\n'
printf 'median round; the node'"'"'s load stages, means over the rounds: handoff = the master'"'"'s answer to\n'
printf 'the node'"'"'s worker, open = file and header, read = io_uring and the device (the pieces before\n'
printf 'the last are hashed meanwhile), verify = the checksum left once the last piece is in, answer = to\n'
printf 'the master; first = inside read, to the first piece in (what a copy out could overlap); the\n'
printf 'rest of get: the reader'"'"'s side, in the next table)\n'
printf '%s\n' "${stages[@]}"
printf '\nthe same gets on the reader, µs per get, means over the rounds and the warm-up (submit = to the call that got\n'
printf 'the load (with progressive loads: the copies made while the node read), call = its round\n'
printf 'trip less the master'"'"'s hold, held = the master held it (the node'"'"'s load is inside), prepare = to the\n'
printf 'transfer, transfer = the copy out of the node'"'"'s segment after the load'"'"'s answer, finish = to\n'
printf 'the callback; get - node = the median round'"'"'s get less the node'"'"'s load stages: all outside the\n'
printf 'node'"'"'s load; copied early = bytes copied while the node was still reading: progressive loads)\n'
printf '%s\n' "${rstages[@]}"
