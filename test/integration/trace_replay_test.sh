#!/usr/bin/env bash
# perf/trace_replay against a real mooncake-master and two storage nodes, on
# a small made-up trace: with room for every block and one worker the
# store's hit rate equals the unbounded baseline exactly; with several
# workers nothing fails and no byte is wrong; a value with wrong bytes
# planted under a trace key is caught by the checksum (exit 1); a bad trace
# line is refused naming the line (exit 2).
set -u
. "$(dirname "$0")/helpers/cluster.sh"

cluster_start_master --set master.lease_ttl=1s
cluster_start_store 32MiB
cluster_start_store 32MiB
T=$CLUSTER_TMP

# 60 requests, 7 conversations sharing block 0; a conversation's requests
# share its first blocks (prefix reuse), of 3..7 blocks each.
for i in $(seq 0 59); do
  c=$((i % 7)) n=$((2 + i % 5)) ids=0
  for j in $(seq 1 "$n"); do ids="$ids, $((100 * c + j))"; done
  echo "{\"timestamp\": $((i * 10)), \"input_length\": $(((n + 1) * 512 - 100)), \"output_length\": 1, \"hash_ids\": [$ids]}"
done >"$T/trace.jsonl"

replay() { timeout 60 "$B/trace_replay" --trace "$T/trace.jsonl" --master "$MASTER" \
  --master-http "$HTTP" --block-size 4K "$@"; }
field() { # field NAME FILE: the value of a CSV column in the csv line of FILE
  local h
  h=$("$B/trace_replay" --csv-header)
  awk -F, -v h="$h" -v want="$1" 'BEGIN { n = split(h, names, ","); for (i = 1; i <= n; i++) col[names[i]] = i }
    /^csv,trace_replay,/ { sub(/^csv,trace_replay,/, ""); print $col[want] }' "$2"
}

replay --workers 1 --capacity 100000 --key-prefix a/ >"$T/one.out" 2>&1 ||
  { cat "$T/one.out"; cluster_die "one-worker replay failed"; }
hs=$(field hit_store "$T/one.out") hi=$(field hit_unbounded "$T/one.out")
[ -n "$hs" ] && [ "$hs" = "$hi" ] ||
  { cat "$T/one.out"; cluster_die "store hit rate $hs, unbounded $hi: should be equal"; }
[ "$hs" != "0.0000" ] || cluster_die "the trace reuses prefixes: hit rate must not be 0"
[ "$(field errors "$T/one.out")" = 0 ] || cluster_die "errors in the one-worker replay"
[ "$(field checksum_mismatches "$T/one.out")" = 0 ] || cluster_die "wrong bytes"
[ "$(field evictions "$T/one.out")" = 0 ] || cluster_die "evictions with room for every block"

replay --workers 4 --capacity 100000 --key-prefix b/ --speedup 10 >"$T/four.out" 2>&1 ||
  { cat "$T/four.out"; cluster_die "four-worker replay failed"; }
grep -q 'start lag ms' "$T/four.out" || cluster_die "a timed replay reports its lag"
[ "$(field errors "$T/four.out")" = 0 ] || cluster_die "errors in the four-worker replay"
[ "$(field checksum_mismatches "$T/four.out")" = 0 ] || cluster_die "wrong bytes"

# a value of the right size but other bytes under the key of block 0
head -c 4096 /dev/zero >"$T/zeros"
timeout 30 "$B/mooncake-cli" --master "$MASTER" put c/0 "$T/zeros" >/dev/null ||
  cluster_die "cli put"
replay --workers 1 --capacity 100000 --key-prefix c/ >"$T/bad.out" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$T/bad.out"; cluster_die "wrong bytes read back: exit $rc, expected 1"; }
[ "$(field checksum_mismatches "$T/bad.out")" -ge 1 ] || cluster_die "the mismatch is counted"

printf '{"timestamp": 0, "input_length": 1, "hash_ids": [1]}\n{"timestamp": 1, "hash_ids": [1]}\n' \
  >"$T/broken.jsonl"
timeout 30 "$B/trace_replay" --trace "$T/broken.jsonl" --master "$MASTER" >"$T/broken.out" 2>&1
rc=$?
[ "$rc" = 2 ] || cluster_die "a bad trace: exit $rc, expected 2"
grep -q 'broken.jsonl:2: missing input_length' "$T/broken.out" ||
  { cat "$T/broken.out"; cluster_die "the error names the file, the line and the field"; }
# a master address where nothing answers: said before the replay starts
# (not one RPC timeout per call for the whole trace)
dead=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 60 "$B/trace_replay" --trace "$T/trace.jsonl" --master "127.0.0.1:$dead" --workers 2 \
  --capacity 100 --block-size 4K >"$T/dead.out" 2>&1
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$T/dead.out"; cluster_die "no master: exit $rc"; }
grep -q "the master 127.0.0.1:$dead does not answer" "$T/dead.out" ||
  { cat "$T/dead.out"; cluster_die "the error names the master"; }
echo "trace_replay_test: ok"
