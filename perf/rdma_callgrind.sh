#!/usr/bin/env bash
# perf/rdma_callgrind.sh [BUILD] - instructions per slice on the rdma submit +
# completion path, with valgrind --tool=callgrind, on the EMULATED provider.
#
# Collection is on only inside the path's entry points: mc_te_submit (the
# submitting thread: validation, slicing, path choice, one mailbox message per
# NIC), nic_submit_msg (the NIC's reactor: endpoint lookup, queueing, WR chains,
# post) and on_cq_event / poll_work (the NIC's reactor: CQ polling,
# completion accounting, te_slice_done). poll_work is the part of a busy
# poll that found completions or ends the busy period: the polls that find
# nothing (spinning while the NIC works; how many depends on the NIC's
# speed, not on the slices) are not counted. The emulated provider's own functions
# reached from there (emu_post_send, emu_poll_cq, emu_req_notify, emu_cq_event)
# are subtracted: on hardware those are libibverbs' (a few dozen instructions
# each). Slices = calls of te_slice_done. Prints one line per block size and
# CQ mode: busy polling (MC_RDMA_BUSY_POLL_US=50: completions reaped in
# batches) and event mode (0, the emulated default: about one completion
# per wake-up, so the arming and the empty re-poll count per slice).
set -euo pipefail
BUILD=${1:-build}
bench=$(realpath "$BUILD/transfer_bench")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
for mode in ${MODES:-50 0}; do
for bs in 64K 1M; do
    MC_RDMA_BUSY_POLL_US=$mode valgrind --tool=callgrind --callgrind-out-file="cg.$bs.%p" --trace-children=no \
        --toggle-collect=mc_te_submit --toggle-collect=nic_submit_msg \
        --toggle-collect=on_cq_event --toggle-collect=poll_work \
        "$bench" --protocol rdma --emulated 1 --operation write --block_size "$bs" \
        --batch_size 32 --duration 2 --reps 1 --warmup 0.1 --buffer_size 64M >/dev/null 2>&1
    f=$(ls -S cg."$bs".* | head -1) # the initiator (the forked target collects nothing)
    callgrind_annotate --inclusive=yes --tree=caller "$f" >"$f.txt" 2>/dev/null
    num() { tr -d , | awk '{print $1}'; }
    total=$(grep 'PROGRAM TOTALS' "$f.txt" | num)
    emu=0
    for fn in emu_post_send emu_poll_cq emu_req_notify emu_cq_event; do
        v=$(grep -E "^ *[0-9,]+ .*\*  .*verbs_emu.c:$fn " "$f.txt" | head -1 | num || true)
        emu=$((emu + ${v:-0}))
    done
    slices=$(grep -B3 '\*  .*transport/batch.c:te_slice_done' "$f.txt" | grep '<' |
        sed -E 's/.*\(([0-9,]+)x\).*/\1/' | tr -d , | head -1)
    echo "busy_poll_us $mode, block $bs: $total instructions collected, $emu in the" \
        "emulated provider, $slices slices: $(((total - emu) / slices)) instructions per slice"
    rm -f cg."$bs".*
done
done
