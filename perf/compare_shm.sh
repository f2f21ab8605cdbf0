#!/usr/bin/env bash
# compare_shm.sh - same-host shared memory against memcpy, TCP and Redis, in
# one run on this machine.
#
#   perf/compare_shm.sh [--reps 3] [--duration 3] [--concurrency 4] [--segment-size 2G]
#
# 1. Transfer engine (transfer_bench, a forked target process, 4 threads x 1
#    request in flight, --cold: every request on fresh memory): write and
#    read of 1 MiB and 4 MiB blocks over the shm transport (the target's
#    buffer is shared memory) against plain memcpy of the same sizes between
#    two buffers of this process (interleaved with it, same threads), and
#    the same over the tcp transport.
# 2. Store (store_bench, 4 threads doing sync calls): Put/Get of 1 MiB and
#    4 MiB values and BatchGet of 64 x 4 KiB by a co-located client through
#    the store service (--mode service: the node runs the calls on the
#    client's shared pool memory), the same by a normal client over TCP to a
#    storage node (--mode remote --shm off), and redis-benchmark SET/GET of
#    the same sizes and concurrency (-c 4 -P 1).
# Medians of --reps runs each. Prints the ratios against the targets of the
# shm issue: shm >= 0.7 x memcpy and >= 2 x tcp (transfer engine); service
# Put/Get >= 0.5 x memcpy, >= 2 x tcp, >= 3 x Redis. The machine's load
# matters: run it on a quiet machine for figures to compare.
set -u
# storage nodes take a free HTTP port (several per host here; store.http_port)
export MC_STORE_HTTP_PORT=${MC_STORE_HTTP_PORT:-0}
BUILD=${BUILD:-build}
REPS=3
DUR=3
CONC=4
SEGMENT=2G
while [ $# -gt 0 ]; do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --duration) DUR=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --segment-size) SEGMENT=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_shm.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for f in transfer_bench store_bench mooncake-master mooncake-store-server; do
  [ -x "$BUILD/$f" ] || { echo "compare_shm.sh: $BUILD/$f missing (make)" >&2; exit 1; }
done
for p in redis-server redis-benchmark python3; do
  command -v $p >/dev/null || { echo "compare_shm.sh: $p not found (make deps)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare_shm.XXXXXX")
redis_pid=
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "compare_shm: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPU(s), $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
tb=(--operation write,read --block_size 1M,4M --batch_size 1 --threads "$CONC" --cold
    --reps "$REPS" --duration "$DUR" --warmup 1)
echo "transfer_bench --protocol shm|tcp ${tb[*]}"
"$BUILD/transfer_bench" --protocol shm "${tb[@]}" >"$tmp/shm.txt" ||
  { cat "$tmp/shm.txt"; echo "compare_shm.sh: transfer_bench shm failed" >&2; exit 1; }
"$BUILD/transfer_bench" --protocol tcp "${tb[@]}" >"$tmp/tcp.txt" ||
  { cat "$tmp/tcp.txt"; echo "compare_shm.sh: transfer_bench tcp failed" >&2; exit 1; }

sb=(--sizes 1M,4M,4K --concurrency "$CONC" --replicas 1 --batch 64 --reps "$REPS"
    --duration "$DUR" --segment-size "$SEGMENT")
echo "store_bench --mode service --ops put,get,batch_get ${sb[*]}"
"$BUILD/store_bench" --mode service --ops put,get,batch_get "${sb[@]}" >"$tmp/svc.txt" ||
  { cat "$tmp/svc.txt"; echo "compare_shm.sh: store_bench service failed" >&2; exit 1; }
echo "store_bench --mode remote --shm off --ops put,get,batch_get ${sb[*]}"
"$BUILD/store_bench" --mode remote --shm off --ops put,get,batch_get "${sb[@]}" >"$tmp/rem.txt" ||
  { cat "$tmp/rem.txt"; echo "compare_shm.sh: store_bench remote failed" >&2; exit 1; }

# redis-server on a free port, no persistence
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
    --proto-max-bulk-len 1gb >"$tmp/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  kill -0 "$redis_pid" 2>/dev/null && break
  redis_pid=
done
[ -n "$redis_pid" ] || { echo "compare_shm.sh: cannot start redis-server" >&2; exit 1; }
:> "$tmp/redis.csv"
for b in 1048576 4194304; do
  n=$(( b >= 4194304 ? 1000 : 4000 ))
  redis-benchmark -p "$port" -t set,get -n $((n / 4)) -c "$CONC" -d "$b" -P 1 --csv >/dev/null 2>&1
  for _ in $(seq "$REPS"); do
    redis-benchmark -p "$port" -t set,get -n "$n" -c "$CONC" -d "$b" -P 1 --csv 2>/dev/null |
      tr -d '"' | awk -F, -v b="$b" '$1=="SET"||$1=="GET" {print $1 "," b "," $2}' >>"$tmp/redis.csv"
  done
done
echo "redis-benchmark -t set,get -c $CONC -P 1 -d 1MiB|4MiB, median of $REPS"

python3 - "$tmp" <<'EOF'
import statistics, sys
tmp = sys.argv[1]
med = statistics.median

def tb(name):  # (op, block) -> (GB/s, memcpy GB/s or None)
    out = {}
    for line in open(f"{tmp}/{name}.txt"):
        if not line.startswith("csv,transfer_bench,"):
            continue
        f = line.strip().split(",")[2:]
        op, block, gbps, memcpy = f[1], int(f[3]), float(f[5]), f[14]
        out[(op, block)] = (gbps, float(memcpy) if memcpy else None)
    return out

def sb(name):  # (op, size) -> (gb/s, keys/s)
    out = {}
    for line in open(f"{tmp}/{name}.txt"):
        if not line.startswith("csv,store_bench,"):
            continue
        f = line.strip().split(",")
        out[(f[3], int(f[4]))] = (float(f[10]), float(f[9]))
    return out

redis = {}
for line in open(f"{tmp}/redis.csv"):
    t, b, r = line.strip().split(",")
    redis.setdefault((t, int(b)), []).append(float(r))
redis = {k: med(v) for k, v in redis.items()}

shm, tcp, svc, rem = tb("shm"), tb("tcp"), sb("svc"), sb("rem")
M = {1 << 20: "1M", 4 << 20: "4M"}
ok = lambda v, g: "met" if v >= g else "MISSED"

print()
print("Transfer engine, %s threads x 1 request, cold buffers (GB/s, medians)" % "4")
print(f"{'op':<6}{'block':>6}{'memcpy':>9}{'shm':>9}{'tcp':>9}{'shm/memcpy':>12}{'shm/tcp':>9}")
mc = {}
for op in ("write", "read"):
    for b in (1 << 20, 4 << 20):
        if (op, b) not in shm or (op, b) not in tcp:
            continue
        s, m = shm[(op, b)]
        t = tcp[(op, b)][0]
        mc[b] = max(mc.get(b, 0), m or 0)
        print(f"{op:<6}{M[b]:>6}{m:>9.2f}{s:>9.2f}{t:>9.2f}{s/m:>9.2f} {ok(s/m, 0.7):<3}"
              f"{s/t:>6.2f} {ok(s/t, 2.0)}")
        print(f"csv,compare_shm,te,{op},{b},{m:.3f},{s:.3f},{t:.3f}")

print()
print("Store, %s threads doing sync calls: co-located client via the service vs TCP vs Redis" % "4")
print(f"{'op':<5}{'size':>6}{'service GB/s':>14}{'tcp GB/s':>10}{'memcpy':>8}{'redis GB/s':>12}"
      f"{'x memcpy':>10}{'x tcp':>8}{'x redis':>9}")
for op, rop in (("put", "SET"), ("get", "GET")):
    for b in (1 << 20, 4 << 20):
        if (op, b) not in svc or (op, b) not in rem:
            continue
        v, t = svc[(op, b)][0], rem[(op, b)][0]
        r = redis.get((rop, b), 0) * b / 1e9
        m = mc.get(b, 0)
        xm = v / m if m else 0
        print(f"{op:<5}{M[b]:>6}{v:>14.2f}{t:>10.2f}{m:>8.2f}{r:>12.2f}"
              f"{xm:>6.2f} {ok(xm, 0.5):<3}{v/t:>5.2f} {ok(v/t, 2.0):<3}"
              f"{(v/r if r else 0):>5.2f} {ok(v/r if r else 0, 3.0)}")
        print(f"csv,compare_shm,store,{op},{b},{v:.3f},{t:.3f},{m:.3f},{r:.3f}")
if ("batch_get", 4096) in svc and ("batch_get", 4096) in rem:
    v, t = svc[("batch_get", 4096)][1], rem[("batch_get", 4096)][1]
    print(f"batch get 64 x 4 KiB: service {v:,.0f} keys/s, tcp {t:,.0f} keys/s, x{v/t:.2f}")
    print(f"csv,compare_shm,batch_get,4096,{v:.0f},{t:.0f}")
EOF
