#!/usr/bin/env bash
# The benchmarks' command lines (perf/bench_opt.h) and peer processes
# (perf/bench_proc.h): transfer_bench, rpc_bench, trace_replay and
# offdel_bench answer --help from their tables, refuse a bad number naming
# the flag and its range (exit 2), take the flags the perf/ scripts use, and
# a short run of each works: transfer_bench against a forked target over
# TCP and the local memcpy transport, rpc_bench against its forked echo
# server, trace_replay's baselines, offdel_bench's master core. Runs are a
# fraction of a second each (the figures mean nothing here).
set -u
B=${TEST_BUILD_DIR:-build}
T=$(mktemp -d "${TMPDIR:-/tmp}/mc-bench-cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# expect RC PATTERN -- CMD...: CMD exits RC and its output holds PATTERN
expect() {
  local want=$1 pattern=$2 out rc=0
  shift 3
  out=$(timeout 60 "$@" 2>&1) || rc=$?
  if [ "$rc" != "$want" ]; then
    fail "$* exited $rc, expected $want:"; echo "$out" | tail -n 20 >&2
  elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" <<<"$out"; then
    fail "$*: output lacks '$pattern':"; echo "$out" | tail -n 20 >&2
  else
    echo "ok   $*"
  fi
}

tb=$B/transfer_bench
expect 0 "--block_size VALUE" -- "$tb" --help
expect 0 "(auto|target|initiator)" -- "$tb" --help
expect 2 "--reps: " -- "$tb" --reps 0
expect 2 "--buffer_size" -- "$tb" --buffer_size 12x
expect 2 "--threads: '65' is not a number in 1..64" -- "$tb" --threads 1,65
expect 2 "--operation is read, write or read,write" -- "$tb" --operation copy
expect 2 "--protocol" -- "$tb" --protocol udp
expect 2 "unknown option --no_such_flag" -- "$tb" --no_such_flag 1
expect 2 "--emulated" -- "$tb" --emulated 2
expect 2 "--mode initiator needs --segment" -- "$tb" --mode initiator
# the dump of the values in effect shows the engine's own defaults
expect 0 "tcp_lanes = " -- "$tb" --dump-config
# a short run over TCP against the forked target (the flags compare_tcp.sh
# and compare_shm.sh use), and the local transport against memcpy
small=(--reps 1 --duration 0.1 --warmup 0 --buffer_size 4M --threads 1)
expect 0 "csv,transfer_bench," -- "$tb" --operation write,read --block_size 4K,64K \
  --batch_size 4 "${small[@]}" --cold
expect 0 "csv,transfer_bench," -- "$tb" --protocol local --operation write --block_size 4K \
  --batch_size 1 "${small[@]}" --check
expect 0 "csv,transfer_bench," -- "$tb" --set bench.block_size=8K --batch_size=2 \
  "${small[@]}"
# a target alone: its segment line, and it stops on SIGTERM
"$tb" --mode target --buffer_size 4M >"$T/target.out" 2>"$T/target.err" &
tpid=$!
for _ in $(seq 100); do grep -q '^segment ' "$T/target.out" && break; sleep 0.1; done
seg=$(sed -n 's/^segment //p' "$T/target.out")
if [ -z "$seg" ]; then
  fail "transfer_bench --mode target printed no segment line"; cat "$T/target.err" >&2
else
  expect 0 "csv,transfer_bench," -- "$tb" --segment "$seg" --block_size 4K --batch_size 2 \
    "${small[@]}"
fi
kill -TERM "$tpid" 2>/dev/null
wait "$tpid" || fail "the target exited $? on SIGTERM"

rb=$B/rpc_bench
expect 0 "--connections VALUE" -- "$rb" --help
expect 2 "--body: " -- "$rb" --body 3
expect 0 "csv,rpc_bench,1,1," -- "$rb" --connections 1 --depth 1 --duration 0.1 --reps 1 \
  --warmup 0

tr=$B/trace_replay
expect 0 "--soft-pin VALUE" -- "$tr" --help
expect 0 "trace,workers,capacity_blocks,block_size" -- "$tr" --csv-header
expect 2 "--trace FILE is required" -- "$tr" --master 127.0.0.1:1
expect 2 "--workers: " -- "$tr" --trace x --workers 0
expect 2 "--soft-pin prefix:K: expected K in 1..65536" -- "$tr" --trace x --soft-pin prefix:0
expect 2 "--core-set: unknown key" -- "$tr" --trace x --core --core-set master.lease_ttl=1s \
  --core-set no.such=1
expect 2 "--label: no commas" -- "$tr" --trace x --baseline-only --label a,b
expect 2 "--node-pids" -- "$tr" --trace x --baseline-only --node-pids 1,x
expect 2 "not --afap" -- "$tr" --trace x --core --afap
for i in 0 1 2 3; do
  echo "{\"timestamp\": $i, \"input_length\": 1000, \"output_length\": 1, \"hash_ids\": [1, $((i + 2))]}"
done >"$T/trace.jsonl"
expect 0 "csv,trace_replay,trace.jsonl,4,100,4096," -- "$tr" --trace "$T/trace.jsonl" \
  --baseline-only --workers 4 --capacity 100 --block-size 4K
# repeated --core-set: each one counts (the master's core in-process)
expect 0 "csv,trace_replay,trace.jsonl,1,100,4096,0,core-x" -- "$tr" --trace "$T/trace.jsonl" \
  --core --workers 1 --capacity 100 --block-size 4K --core-set master.lease_ttl=1s \
  --core-set master.evict_sample_max=2
expect 2 "--core-set: expected a count >= 1 (got 'master.evict_sample_max=0')" -- "$tr" \
  --trace "$T/trace.jsonl" --core --core-set master.lease_ttl=1s \
  --core-set master.evict_sample_max=0

ob=$B/offdel_bench
expect 2 "--deletions: " -- "$ob" --deletions 0
expect 0 "report gone" -- "$ob" --deletions 200 --segments 2 --ops 50 --reps 1

echo "bench_cli_test: $fails failed"
[ "$fails" = 0 ]
