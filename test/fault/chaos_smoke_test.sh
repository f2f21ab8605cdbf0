#!/usr/bin/env bash
# A one-minute run of the chaos driver (test/fault/chaos.c): the HA cluster
# with a Sentinel-watched Redis under load while the HA leader, the Redis
# primary and a node are killed with SIGKILL and a node is partitioned
# (nftables in a network namespace; skipped, and said so, without root).
# Passes when the driver's targets are met: no wrong bytes, no acknowledged
# put lost while a live replica or the journal held it, no call past twice
# its timeout. The ten-minute run with every fault: test/fault/README.md.
set -u
BUILD=${BUILD:-build}
bin=${TEST_BIN_DIR:-$BUILD/test/bin}/chaos
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" --duration 60 --single-share 0 --seed 7 \
    --faults leader-kill,redis-kill,partition,node-kill >"$out" 2>&1
rc=$?
grep -v '^20[0-9][0-9]-' "$out"
if [ $rc -ne 0 ] || ! grep -q '^targets .*: met$' "$out"; then
    echo "chaos smoke: FAILED (exit $rc)"
    exit 1
fi
grep -q '^faults injected: .*HA leader kill -9 x[1-9].*' "$out" || { echo "no leader kill ran"; exit 1; }
grep -q 'Redis primary kill -9 x[1-9]' "$out" || { echo "no Redis primary kill ran"; exit 1; }
echo "chaos smoke: targets met"
