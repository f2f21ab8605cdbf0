#!/usr/bin/env bash
# compare_redis.sh - Mooncake Store vs Redis on this machine, in one run.
#
#   perf/compare_redis.sh [--sizes 4K,1M,4M] [--concurrency 4] [--reps 3] [--duration 2] [--segment-size 6G]
#
# Starts redis-server on a free port (persistence off: --save "" --appendonly
# no), runs `redis-benchmark -t set,get -c C -d SIZE -P 1 --csv` --reps times
# per size (median rps), then build/store_bench with the same sizes and
# concurrency (C threads doing sync calls, as -c C -P 1 keeps C requests in
# flight): Put/Get with the data on a separate storage-node process over TCP
# (mode remote), Get from the client's own segment (mode local) and
# BatchPut/BatchGet of 4 KiB values. Prints both, the ratios, and the
# targets of the store_bench issue, and what loopback TCP carries with as
# many streams (iperf3, when installed), the ceiling of the big-value
# figures. Needs redis-server and redis-benchmark.
set -u
BUILD=${BUILD:-build}
SIZES=4K,1M,4M
CONC=4
REPS=3
DURATION=2
SEGMENT=6G # per storage node (and the client in local mode): put runs stop at half of it (a 4 MiB run in 1 GiB lasted 0.1 s)
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --segment-size) SEGMENT=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "compare_redis.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for p in redis-server redis-benchmark; do
  command -v $p >/dev/null || { echo "compare_redis.sh: $p not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
[ -x "$BUILD/store_bench" ] || { echo "compare_redis.sh: $BUILD/store_bench missing (make)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare_redis.XXXXXX")
redis_pid=
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

bytes() { # 4K -> 4096
  local v=${1%[KkMmGg]*} u=${1##*[0-9]}
  case $u in K|k|KiB) echo $((v << 10)) ;; M|m|MiB) echo $((v << 20)) ;; G|g|GiB) echo $((v << 30)) ;; *) echo "$v" ;; esac
}

# redis-server on a free port (retry if another process takes it first)
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
[ -n "$redis_pid" ] || { echo "compare_redis.sh: cannot start redis-server" >&2; cat "$tmp/redis.log" >&2; exit 1; }
echo "redis-server $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/') on 127.0.0.1:$port (no persistence); redis-benchmark -c $CONC -P 1, median of $REPS"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A R # R[SET,size] R[GET,size]: rps
for s in ${SIZES//,/ }; do
  b=$(bytes "$s")
  # requests: about 2 s of work at the rates seen here, at least 1000
  n=$(( b >= 4194304 ? 1000 : b >= 1048576 ? 4000 : 100000 ))
  for t in SET GET; do :> "$tmp/$t"; done
  redis-benchmark -p "$port" -t set,get -n $((n / 4)) -c "$CONC" -d "$b" -P 1 --csv >/dev/null 2>&1 # warm-up
  for _ in $(seq "$REPS"); do
    redis-benchmark -p "$port" -t set,get -n "$n" -c "$CONC" -d "$b" -P 1 --csv 2>/dev/null |
      tr -d '"' | awk -F, -v d="$tmp" '$1=="SET"||$1=="GET" {print $2 >> (d "/" $1)}'
  done
  for t in SET GET; do R[$t,$b]=$(median <"$tmp/$t"); done
  printf '  redis %-4s SET %10.0f/s  GET %10.0f/s\n' "$s" "${R[SET,$b]}" "${R[GET,$b]}"
done
kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; redis_pid=

# What loopback TCP itself carries here with as many streams (iperf3 -P C,
# 1 MiB writes): the ceiling of any store or redis figure above ~1 GB/s.
CAP=
if command -v iperf3 >/dev/null; then
  :> "$tmp/cap"
  for _ in $(seq "$REPS"); do
    ip=$((20000 + RANDOM % 40000))
    iperf3 -s -1 -p "$ip" >/dev/null 2>&1 &
    sp=$!
    sleep 0.3
    iperf3 -c 127.0.0.1 -p "$ip" -P "$CONC" -l 1M -t "$DURATION" -f m 2>/dev/null |
      awk '/receiver/ { v = $(NF-2) } END { if (v != "") printf "%.3f\n", v / 8000 }' >> "$tmp/cap"
    wait "$sp" 2>/dev/null
  done
  CAP=$(median <"$tmp/cap")
  echo "loopback TCP: iperf3 -P $CONC -l 1M -t $DURATION: ${CAP:-?} GB/s (median of $REPS)"
fi

# --shm off: the storage node is on this host, and shared memory would carry
# the data; this comparison is the TCP path's (perf/compare_shm.sh has shm's)
echo "store_bench --sizes $SIZES --concurrency $CONC --replicas 1 --mode remote,local --shm off --reps $REPS --duration $DURATION"
"$BUILD/store_bench" --ops put,get,batch_put,batch_get --sizes "$SIZES" --concurrency "$CONC" \
  --replicas 1 --mode remote,local --shm off --reps "$REPS" --duration "$DURATION" --segment-size "$SEGMENT" \
  | tee "$tmp/store.out" | grep -v '^csv,'
[ "${PIPESTATUS[0]}" = 0 ] || { echo "compare_redis.sh: store_bench failed" >&2; exit 1; }

# csv,store_bench,mode,op,size,replicas,conc,batch,ops_s,keys_s,gb_s,p50_us,p99_us,errors
get() { awk -F, -v m="$1" -v o="$2" -v s="$3" -v col="$4" \
  '$1=="csv" && $3==m && $4==o && $5==s {print $col; exit}' "$tmp/store.out"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.2f", a / b; else printf "-" }'; }

echo
echo "Mooncake Store (data on a separate storage-node process, TCP) vs redis-benchmark, concurrency $CONC"
printf '%-6s %12s %12s %7s   %12s %12s %7s\n' size "redis SET/s" "store Put/s" ratio "redis GET/s" "store Get/s" ratio
for s in ${SIZES//,/ }; do
  b=$(bytes "$s")
  put=$(get remote put "$b" 9) getv=$(get remote get "$b" 9)
  printf '%-6s %12.0f %12.0f %7s   %12.0f %12.0f %7s\n' "$s" "${R[SET,$b]}" "${put:-0}" \
    "$(ratio "$put" "${R[SET,$b]}")" "${R[GET,$b]}" "${getv:-0}" "$(ratio "$getv" "${R[GET,$b]}")"
  echo "csv,compare_redis,$b,$CONC,${R[SET,$b]},${put:-},${R[GET,$b]},${getv:-}"
done

echo
echo "targets (store_bench issue):"
target() { # name value goal unit
  awk -v n="$1" -v v="$2" -v g="$3" -v u="$4" 'BEGIN {
    if (v == "") { printf "  %-44s %10s   (goal >= %s %s)  not measured\n", n, "-", g, u; exit }
    printf "  %-44s %10.2f   (goal >= %s %s)  %s\n", n, v, g, u, (v + 0 >= g + 0) ? "met" : "MISSED" }'
}
for s in 1M 4M; do
  b=$(bytes "$s")
  case ",$SIZES," in *",$s,"*) ;; *) continue ;; esac
  target "Put $s / redis SET $s" "$(ratio "$(get remote put "$b" 9)" "${R[SET,$b]}")" 1.5 x
  target "Get $s / redis GET $s" "$(ratio "$(get remote get "$b" 9)" "${R[GET,$b]}")" 1.0 x
  if [ -n "$CAP" ]; then
    for op in put get; do
      t=$([ $op = put ] && echo SET || echo GET) k=$([ $op = put ] && echo 1.5 || echo 1.0)
      awk -v s="$s" -v op="$op" -v v="$(get remote $op "$b" 11)" -v cap="$CAP" \
          -v want="$(awk -v r="${R[$t,$b]}" -v k="$k" -v b="$b" 'BEGIN{print r*k*b/1e9}')" 'BEGIN {
        printf "    %s %s: %.2f GB/s = %.0f%% of loopback TCP (%.2f GB/s); the goal needs %.2f GB/s%s\n",
          op, s, v, 100 * v / cap, cap, want, (want > cap ? ": above what loopback carries" : "") }'
    done
  fi
done
target "Get 4M from the client's own segment" "$(get local get 4194304 11)" 5 GB/s
target "BatchPut 4K (remote) keys/s / 1000" "$(awk -v v="$(get remote batch_put 4096 10)" 'BEGIN{if(v!="")print v/1000}')" 100 kkeys/s
target "BatchGet 4K (remote) keys/s / 1000" "$(awk -v v="$(get remote batch_get 4096 10)" 'BEGIN{if(v!="")print v/1000}')" 300 kkeys/s
