#!/usr/bin/env bash
# perf/trace_tuning.sh - before/after figures of the eviction tuning that
# perf/trace_replay revealed (issue 18, item 4): the master's eviction
# policy as it was before each change, built from the commit itself, and as
# it is now, replayed on the FAST'25 traces with trace_replay --core (the
# master's core in-process, simulated clock at the trace's own pace, one
# request at a time: the same figures on any machine, up to the master's
# random placement, +-0.005 from run to run).
#
#   perf/trace_tuning.sh [-t conversation,synthetic] [-n 8]
#                        [-c 250,500,1000,2000,4000] [-o perf/results]
#                        [-w 0.95,1.0] [-B DIR]
#
# Versions (each a label in the CSV and the chart):
#   window     261abb8: a put that finds no room evicts one window of
#              eviction_ratio of the segment with the largest gap
#   lru-round  f0c28c1: it runs an LRU round over every segment first
#   tail-first the working tree: and a batch's later keys rank as less
#              recently used (a prompt's tail is evicted before its head)
# -w  master.eviction_high_watermark_ratio values: 0.95 is the default (the
#     tick evicts too), 1.0 leaves eviction to the puts alone
# Then the settings a deployment can choose, on the working tree at the
# default watermark: default; ratio-0.01 (master.eviction_ratio=0.01: the
# tick evicts 1% instead of 5%); sample-256 (master.evict_sample_max=256:
# eviction ranks a sample, not every object); lease-1s (master.lease_ttl);
# pin-prefix-2 (--soft-pin prefix:2: each request's first 2 blocks are
# soft-pinned); pin-reused (--soft-pin reused: a block put again after it
# was evicted is soft-pinned).
# -B  keep the builds of the old commits in DIR (reused when present)
#
# Writes results/trace_tuning_<trace>.csv (one row per version, watermark,
# N and C; label = version@watermark), results/trace_settings_<trace>.csv
# (label = setting), a chart of each (.png: store hit rate / ideal global LRU
# per capacity, one line per label) and prints the tables. Needs git (the old commits are taken from this checkout's
# history) and a build tree (make all).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
b=${BUILD:-$here/build}
cmdline="perf/trace_tuning.sh${*:+ $*}"
traces=conversation,synthetic
workers=8
caps=250,500,1000,2000,4000
marks=0.95,1.0
out=$here/perf/results
keepdir=
while [ $# -gt 0 ]; do
    case "$1" in
    -t) traces=$2; shift 2 ;;
    -n) workers=$2; shift 2 ;;
    -c) caps=$2; shift 2 ;;
    -w) marks=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -B) keepdir=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "perf/trace_tuning.sh: unknown argument '$1' (see -h)" >&2; exit 2 ;;
    esac
done
[ -x "$b/trace_replay" ] || { echo "perf/trace_tuning.sh: $b/trace_replay missing (make all)" >&2; exit 2; }
mkdir -p "$out"

tmp=$(mktemp -d /tmp/trace_tuning.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
builds=${keepdir:-$tmp/builds}
mkdir -p "$builds"

echo "# $cmdline"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$here" rev-parse --short HEAD), $(nproc) cores" \
    "(trace_replay --core: the figures do not depend on the machine's load)"

# build_at SHA: DIR/trace_replay of that commit (git archive + make)
build_at() {
    local sha=$1 d=$builds/$1
    if [ ! -x "$d/build/trace_replay" ]; then
        echo "== building trace_replay at $sha (once; -B keeps it)" >&2
        rm -rf "$d"
        mkdir -p "$d"
        git -C "$here" archive "$sha" | tar -x -C "$d"
        nice make -C "$d" -j2 build/trace_replay >"$d.log" 2>&1 ||
            { echo "perf/trace_tuning.sh: building $sha failed ($d.log)" >&2; trap - EXIT; exit 1; }
    fi
    echo "$d/build/trace_replay"
}
vers=(window lru-round tail-first)
bins=("$(build_at 261abb8)" "$(build_at f0c28c1)" "$b/trace_replay")

# LABEL|trace_replay flags (labels without "=": trace_compare splits on it)
sets=("default|" "ratio-0.01|--core-set master.eviction_ratio=0.01"
    "sample-256|--core-set master.evict_sample_max=256"
    "lease-1s|--core-set master.lease_ttl=1s" "pin-prefix-2|--soft-pin prefix:2"
    "pin-reused|--soft-pin reused")

# table CSV: store hit rate / ideal, one row per label and N, one column per C
table() {
    echo "== ${1#"$here"/} (store hit rate / ideal global LRU of N x C blocks)"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
             { k = $col["label"] " " $col["workers"]; v[k, $col["capacity_blocks"]] = $col["store_vs_ideal"]
               if (!(k in seen)) { seen[k] = 1; rows[++nr] = k }
               if (!($col["capacity_blocks"] in cs)) { cs[$col["capacity_blocks"]] = 1; cap[++nc] = $col["capacity_blocks"] } }
             END { printf "%-22s %3s", "label", "N"
                   for (j = 1; j <= nc; j++) printf " %8s", "C=" cap[j]
                   printf "\n"
                   for (r = 1; r <= nr; r++) { split(rows[r], p, " "); printf "%-22s %3s", p[1], p[2]
                       for (j = 1; j <= nc; j++) printf " %8s", v[rows[r], cap[j]]
                       printf "\n" } }' "$1"
}

IFS=, read -r -a tlist <<<"$traces"
IFS=, read -r -a nlist <<<"$workers"
IFS=, read -r -a clist <<<"$caps"
IFS=, read -r -a wlist <<<"$marks"
status=0
for tr in "${tlist[@]}"; do
    src=$here/perf/traces/${tr}_trace.jsonl.gz
    [ -r "$src" ] || { echo "perf/trace_tuning.sh: cannot read $src" >&2; exit 2; }
    file=$tmp/$tr.jsonl
    gzip -dc "$src" >"$file"
    csv=$out/trace_tuning_$tr.csv
    "$b/trace_replay" --csv-header >"$csv"
    for w in "${wlist[@]}"; do
        for i in "${!vers[@]}"; do
            for n in "${nlist[@]}"; do
                for c in "${clist[@]}"; do
                    if ! nice "${bins[$i]}" --trace "$file" --core --nodes 4 --workers "$n" \
                        --capacity "$c" --core-set "master.eviction_high_watermark_ratio=$w" \
                        --label "${vers[$i]}@$w" >"$tmp/run.out" 2>"$tmp/run.err"; then
                        status=1
                        echo "perf/trace_tuning.sh: ${vers[$i]} $tr N=$n C=$c watermark $w failed:" >&2
                        tail -5 "$tmp/run.err" >&2
                    fi
                    grep '^csv,trace_replay,' "$tmp/run.out" | sed 's/^csv,trace_replay,//' >>"$csv" || true
                done
            done
        done
    done
    table "$csv"
    "$here/perf/trace_compare" "$out/trace_tuning_$tr.png" \
        "$tr trace, trace_replay --core: eviction before/after (version@high watermark)" "$csv" ||
        status=1

    csv=$out/trace_settings_$tr.csv
    "$b/trace_replay" --csv-header >"$csv"
    for i in "${!sets[@]}"; do
        read -r -a args <<<"${sets[$i]#*|}"
        for n in "${nlist[@]}"; do
            for c in "${clist[@]}"; do
                if ! nice "$b/trace_replay" --trace "$file" --core --nodes 4 --workers "$n" \
                    --capacity "$c" "${args[@]}" --label "${sets[$i]%%|*}" >"$tmp/run.out" \
                    2>"$tmp/run.err"; then
                    status=1
                    echo "perf/trace_tuning.sh: ${sets[$i]%%|*} $tr N=$n C=$c failed:" >&2
                    tail -5 "$tmp/run.err" >&2
                fi
                grep '^csv,trace_replay,' "$tmp/run.out" | sed 's/^csv,trace_replay,//' >>"$csv" || true
            done
        done
    done
    table "$csv"
    "$here/perf/trace_compare" "$out/trace_settings_$tr.png" \
        "$tr trace, trace_replay --core: settings (working tree, watermark 0.95)" "$csv" || status=1
done
exit $status
