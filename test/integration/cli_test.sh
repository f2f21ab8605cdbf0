#!/usr/bin/env bash
# mooncake-cli against a real mooncake-master and one mooncake-store-server:
# put/get round trip, stat, ls (HTTP and RPC), rm, the exit codes of a failed
# operation (1) and of bad usage (2), segments, meta.
set -u
. "$(dirname "$0")/helpers/cluster.sh"

# Short leases so that rm after a get does not wait long.
cluster_start_master --set master.lease_ttl=1s
cluster_start_store 64MiB

T=$CLUSTER_TMP
cli() { timeout 30 "$B/mooncake-cli" --master "$MASTER" --http "$HTTP" "$@"; }

# expect RC CMD...: run the cli, keep stdout/stderr in $T/out, $T/err.
expect() {
  local want=$1 rc
  shift
  cli "$@" >"$T/out" 2>"$T/err"
  rc=$?
  if [ "$rc" != "$want" ]; then
    echo "--- stdout"; head -c 2000 "$T/out"; echo "--- stderr"; cat "$T/err"
    cluster_die "mooncake-cli $* exited $rc, expected $want"
  fi
}
has() { grep -E -q -- "$2" "$1" || { cat "$1"; cluster_die "$1 lacks /$2/"; }; }

# put a file (not a multiple of any page or slice size) and get it back
head -c 3000001 /dev/urandom >"$T/value"
expect 0 put key1 "$T/value"
has "$T/out" '3000001 bytes'
expect 0 get key1 "$T/back"
cmp "$T/value" "$T/back" || cluster_die "get returned other bytes than put"

# stdin and stdout
echo "small value" | cli put key2 - >/dev/null || cluster_die "put from stdin"
[ "$(cli get key2)" = "small value" ] || cluster_die "get to stdout"

# stat: size, replica on the storage node's segment, lease
expect 0 stat key1
has "$T/out" '^size +3000001 '
has "$T/out" '^replicas +1'
has "$T/out" "$STORE_NAME .*COMPLETE"
has "$T/out" '^lease '

# ls over HTTP and over RPC, with a regex
expect 0 ls
has "$T/out" '^key1 +3000001 '
has "$T/out" '^key2 +12 '
has "$T/out" '^2 key\(s\)'
expect 0 ls --regex '^key1$'
has "$T/out" '^1 key\(s\)'
expect 0 ls --rpc --regex 'key'
has "$T/out" '^key1 +3000001 '
has "$T/out" '^2 key\(s\)'
expect 1 ls --regex '('
# the regex of death (glibc's regcomp overflowed its stack: the master died)
# is refused with the reason, over HTTP and RPC, and for rm; the master lives
expect 1 ls --regex '(.*){1,32767}'
has "$T/err" 'too large'
expect 1 ls --rpc --regex '(.*){1,32767}'
has "$T/err" 'master says: regex error at offset [0-9]+: regular expression is too large'
expect 1 rm --regex '(.*){1,32767}'
has "$T/err" 'too large'
expect 0 ls --rpc --regex '^key\d$'
has "$T/out" '^2 key\(s\)'

# segments: one, 64 MiB, with our bytes in use
expect 0 segments
has "$T/out" "^$STORE_NAME .*64.0 MiB .*MOUNTED"
has "$T/out" '^1 segment\(s\)'

# meta: the storage node's descriptor, decoded
expect 0 meta
has "$T/out" "^mc/default/seg/$STORE_NAME\$"
has "$T/out" '^  protocols +tcp'
has "$T/out" '^    \[0\] addr 0x[0-9a-f]+ length 67108864 '
has "$T/out" "^mc/default/rpc/$STORE_NAME\$"

# rm: a fresh lease protects the key; after it ends rm works, get fails (1)
expect 0 stat key1
expect 1 rm key1
has "$T/err" 'rm key1: OBJECT_HAS_LEASE'
sleep 1.2
expect 0 rm key1
expect 1 get key1
has "$T/err" '^mooncake-cli: get key1: OBJECT_NOT_FOUND \(object not found\)$'
expect 1 stat key1
has "$T/err" 'OBJECT_NOT_FOUND'
sleep 1.2
expect 0 rm --regex '^key'
has "$T/out" 'removed 1 key'
expect 0 ls
has "$T/out" '^0 key\(s\)'

# usage errors exit 2
expect 2
expect 2 frobnicate
has "$T/err" "unknown command 'frobnicate'"
expect 2 put onlykey
expect 2 get
expect 2 rm
expect 2 put --replicas 0 k "$T/value"
expect 2 --master nocolon ls

# an unreachable master fails the operation (1), within the timeout
"$B/mooncake-cli" --master 127.0.0.1:1 --timeout 2 stat key1 >/dev/null 2>"$T/err"
[ $? = 1 ] || cluster_die "stat against no master should exit 1"

echo "cli_test: all checks passed"
