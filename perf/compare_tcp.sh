#!/usr/bin/env bash
# perf/compare_tcp.sh - the TCP transport against iperf3 on loopback, same run.
#
#   perf/compare_tcp.sh [-r ROUNDS] [-t SECS] [-d SECS] [-p PORT] [-s | -B BIN]
#                       [-- transfer_bench flags]
#
# Every round runs, back to back:
#   1. iperf3 -s -1 on 127.0.0.1 and `iperf3 -c 127.0.0.1 -l 1M -t SECS -J`:
#      one stream of 1 MiB writes; the figure is the receiver's sum
#      (bits_per_second / 8 / 1e9 = GB/s);
#   2. transfer_bench (forked target process, so also two processes) over TCP:
#      write and read of 64 KiB, 1 MiB and 4 MiB blocks, batch 16, 1 thread;
#      1 MiB and 4 MiB blocks with batch 1 (one block of memory in flight, as
#      iperf3 reuses one 1 MiB buffer: cache-hot on both ends); 1 MiB and
#      4 MiB with 4 threads; 4 KiB x batch 128 for requests/s. One timed run
#      per point per round.
# Rounds interleave the two tools so that load from elsewhere hits both; the
# table shows the median over rounds of each, and their ratio against the
# targets. Extra flags (e.g. --slice_size 256K --tcp_lanes 2) go to
# transfer_bench. Needs iperf3 and python3 (make deps).
# -s: every round also runs the same transfer_bench points with
#   --secret_file (a fresh secret, so every connection authenticates), right
#   before or after the run without (the order alternates by round); a last
#   table shows each point without and with the secret side by side
#   (medians over rounds, and their ratio).
# -B BIN: the same, with another transfer_bench binary instead of the secret
#   (another build, e.g. of the commit before a change: `git worktree add
#   /tmp/before SHA && make -C /tmp/before build/transfer_bench`); the last
#   table shows BIN's and this build's figures side by side (ratio = this
#   build / BIN).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH:-$here/build/transfer_bench}
rounds=3
secs=5
dur=3
port=$((20000 + RANDOM % 20000))
secret=0
other=""

usage() {
    sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}
while [ $# -gt 0 ]; do
    case "$1" in
    -r) rounds=$2; shift 2 ;;
    -t) secs=$2; shift 2 ;;
    -d) dur=$2; shift 2 ;;
    -p) port=$2; shift 2 ;;
    -s) secret=1; shift ;;
    -B) other=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "compare_tcp.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
extra=("$@")

for tool in iperf3 python3 ss; do
    command -v "$tool" >/dev/null || { echo "compare_tcp.sh: $tool not found (make deps)" >&2; exit 1; }
done
[ -x "$bench" ] || { echo "compare_tcp.sh: $bench not built (make build/transfer_bench)" >&2; exit 1; }
if [ -n "$other" ]; then
    [ "$secret" = 0 ] || { echo "compare_tcp.sh: -s and -B do not combine" >&2; exit 2; }
    [ -x "$other" ] || { echo "compare_tcp.sh: -B $other is not an executable" >&2; exit 1; }
fi

tmp=$(mktemp -d)
srv=""
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

iperf_round() { # $1: output json
    iperf3 -s -B 127.0.0.1 -p "$port" -1 >/dev/null 2>&1 &
    srv=$!
    for _ in $(seq 100); do
        ss -ltn "sport = :$port" | grep -q LISTEN && break
        sleep 0.05
    done
    # a failed round (the port taken, a timeout under load) is reported and
    # left out of the iperf3 median, not fatal
    iperf3 -c 127.0.0.1 -p "$port" -l 1M -t "$secs" -J >"$1" || echo "iperf3 failed: $(head -c 300 "$1")" >&2
    kill "$srv" 2>/dev/null || true
    wait "$srv" || true
    srv=""
}

echo "compare_tcp: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPU(s), $(uname -r), $rounds round(s)"
echo "compare_tcp: iperf3 -c 127.0.0.1 -l 1M -t $secs (1 stream); transfer_bench --duration $dur ${extra[*]}"
if [ "$secret" = 1 ]; then
    head -c 48 /dev/urandom | base64 >"$tmp/secret"
    chmod 600 "$tmp/secret"
    echo "compare_tcp: -s: each round also runs transfer_bench --secret_file (every connection authenticates)"
fi
[ -z "$other" ] || echo "compare_tcp: -B: each round also runs $other (A) beside $bench (B)"
# tb_points OUT [FLAGS...]: every transfer_bench point once, into OUT, with
# $bench (tb_run: with the binary given first)
tb_points() {
    tb_run "$bench" "$@"
}
tb_run() {
    local bench=$1 out=$2
    shift 2
    local common=(--reps 1 --duration "$dur" --warmup 1 "${extra[@]}" "$@")
    "$bench" --operation write,read --block_size 64K,1M,4M --batch_size 16 --threads 1 \
        "${common[@]}" >"$out"
    "$bench" --operation write,read --block_size 1M,4M --batch_size 1 --threads 1 \
        "${common[@]}" >>"$out"
    "$bench" --operation write,read --block_size 1M,4M --batch_size 16 --threads 4 \
        "${common[@]}" >>"$out"
    "$bench" --operation write,read --block_size 4K --batch_size 128 --threads 1 \
        "${common[@]}" >>"$out"
}
# variant ROUND: the run beside the plain one (-s: with the secret, -B: the
# other binary), before it in even rounds and after it in odd ones
variant() {
    if [ "$secret" = 1 ]; then
        echo "round $1/$rounds: transfer_bench with the secret" >&2
        tb_points "$tmp/tbs.$1.txt" --secret_file "$tmp/secret"
    elif [ -n "$other" ]; then
        echo "round $1/$rounds: transfer_bench A ($other)" >&2
        tb_run "$other" "$tmp/tbs.$1.txt"
    fi
}
for r in $(seq "$rounds"); do
    echo "round $r/$rounds: iperf3" >&2
    iperf_round "$tmp/iperf.$r.json"
    if [ $((r % 2)) = 0 ]; then variant "$r"; fi
    echo "round $r/$rounds: transfer_bench" >&2
    tb_points "$tmp/tb.$r.txt"
    if [ $((r % 2)) = 1 ]; then variant "$r"; fi
    head -1 "$tmp/tb.$r.txt" >"$tmp/settings"
done

python3 - "$tmp" "$rounds" "$secret" "$other" "$bench" <<'EOF'
import json, statistics, sys
tmp, rounds, secret, other, bench = (sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1",
                                     sys.argv[4], sys.argv[5])
def points(path, into):
    for line in open(path):
        if not line.startswith("csv,transfer_bench,"):
            continue
        f = line.strip().split(",")[2:]
        key = (f[1], int(f[2]), int(f[3]), int(f[4]))  # op, threads, block, batch
        into.setdefault(key, []).append((float(f[5]), float(f[6])))
iperf, tb, tbs = [], {}, {}
for r in range(1, rounds + 1):
    try:
        end = json.load(open(f"{tmp}/iperf.{r}.json"))["end"]
        iperf.append(end["sum_received"]["bits_per_second"] / 8 / 1e9)
    except (ValueError, KeyError):
        print(f"round {r}: iperf3 gave no result (left out)")
        iperf.append(None)
    points(f"{tmp}/tb.{r}.txt", tb)
    if secret or other:
        points(f"{tmp}/tbs.{r}.txt", tbs)
med = statistics.median
ip = med([x for x in iperf if x is not None])
print(open(f"{tmp}/settings").read().strip())
print(f"iperf3 -l 1M, 1 stream: median {ip:.3f} GB/s over rounds "
      f"({', '.join('-' if x is None else f'{x:.3f}' for x in iperf)})")
print()
print("ratio = median bench / median iperf3; r-ratio = median of the per-round ratios")
print(f"{'block':>6} {'op':<5} {'thr':>3} {'batch':>5} {'bench GB/s':>11} {'iperf3 GB/s':>12}"
      f" {'ratio':>6} {'r-ratio':>7} {'target':>7}  rounds (GB/s)")
name = {65536: "64K", 1 << 20: "1M", 4 << 20: "4M", 4096: "4K"}
def gb(key):
    return med([g for g, _ in tb[key]])
for op in ("write", "read"):
    for blk, batch, target in ((65536, 16, 0.5), (1 << 20, 16, 0.9), (4 << 20, 16, 0.9),
                               (1 << 20, 1, 0.9), (4 << 20, 1, 0.9)):
        key = (op, 1, blk, batch)
        if key not in tb:
            continue
        g = gb(key)
        rr = med([x / i for (x, _), i in zip(tb[key], iperf) if i is not None])
        ok = "ok" if g / ip >= target else "MISS"
        print(f"{name[blk]:>6} {op:<5} {1:>3} {batch:>5} {g:>11.3f} {ip:>12.3f} {g/ip:>6.2f} "
              f"{rr:>7.2f} {'>=' + str(target):>7} {ok:<4} "
              f"({', '.join(f'{x:.2f}' for x, _ in tb[key])})")
print()
print("threads 1 -> 4 (batch 16): GB/s, median over rounds")
for op in ("write", "read"):
    for blk in (1 << 20, 4 << 20):
        k1, k4 = (op, 1, blk, 16), (op, 4, blk, 16)
        if k1 in tb and k4 in tb:
            a, b = gb(k1), gb(k4)
            print(f"{name[blk]:>6} {op:<5} 1 thr {a:.3f}  4 thr {b:.3f}  x{b/a:.2f} "
                  f"{'ok' if b >= 0.95 * a else 'DROP'}")
print()
for op in ("write", "read"):
    key = (op, 1, 4096, 128)
    if key in tb:
        rq = med([q for _, q in tb[key]])
        print(f"4K x batch 128 {op:<5}: {rq:,.0f} requests/s (target >= 250,000: "
              f"{'ok' if rq >= 250000 else 'MISS'}), {gb(key):.3f} GB/s")
if secret or other:
    print()
    if secret:
        la, lb = "without", "with"
        print("without / with --secret_file (every connection authenticated): median over rounds;")
        print("ratio = with / without; per-round = the rounds' values (without | with)")
    else:
        la, lb = "A", "B"
        tb, tbs = tbs, tb  # A: the other binary, B: this build
        print(f"A = {other}, B = {bench}: median over rounds;")
        print("ratio = B / A; per-round = the rounds' values (A | B)")
    print(f"{'block':>6} {'op':<5} {'thr':>3} {'batch':>5} {la:>10} {lb:>10} {'ratio':>6}"
          "  per-round")
    for key in sorted(tb, key=lambda k: (k[0] != "write", k[1], k[2], k[3])):
        if key not in tbs:
            continue
        op, thr, blk, batch = key
        rps = blk == 4096  # small blocks: requests/s is the figure
        unit = 1 if rps else 0
        a = med([x[unit] for x in tb[key]])
        b = med([x[unit] for x in tbs[key]])
        fmt = (lambda v: f"{v:,.0f}/s") if rps else (lambda v: f"{v:.3f}GB/s")
        print(f"{name[blk]:>6} {op:<5} {thr:>3} {batch:>5} {fmt(a):>10} {fmt(b):>10} {b/a:>6.2f}  "
              f"{', '.join(fmt(x[unit]) for x in tb[key])} | "
              f"{', '.join(fmt(x[unit]) for x in tbs[key])}")
EOF
