#!/usr/bin/env bash
# mooncake-cli against a real mooncake-master and one mooncake-store-server,
# through the master's RPC port only: put/get round trip, stat (no lease),
# ls, segments, meta, rm, --json of every command (parsed by python3's json
# module, failures included), the exit codes of a failed operation (1) and of
# bad usage (2).
set -u
. "$(dirname "$0")/helpers/cluster.sh"

# Short leases so that rm after a get does not wait long.
cluster_start_master --set master.lease_ttl=1s
cluster_start_store 64MiB

T=$CLUSTER_TMP
PY=/usr/bin/python3
cli() { timeout 30 "$B/mooncake-cli" --master "$MASTER" "$@"; }

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

# jexpect RC PYEXPR CMD...: --json: stdout is one JSON document (d) for
# which the python expression PYEXPR holds.
jexpect() {
  local want=$1 check=$2
  shift 2
  expect "$want" --json "$@"
  "$PY" - "$T/out" "$check" <<'PY' || { cat "$T/out"; cluster_die "--json $*: '$check' does not hold"; }
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text)                     # exactly one document
assert text.count("\n") == 1, "one line"
assert isinstance(d, dict) and d["command"], d
sys.exit(0 if eval("(" + sys.argv[2] + ")", {"d": d}) else 1)
PY
}

# put a file (not a multiple of any page or slice size) and get it back
head -c 3000001 /dev/urandom >"$T/value"
expect 0 put key1 "$T/value"
has "$T/out" '3000001 bytes'
expect 0 get key1 "$T/back"
cmp "$T/value" "$T/back" || cluster_die "get returned other bytes than put"

# stdin and stdout
echo "small value" | cli put key2 - >/dev/null || cluster_die "put from stdin"
[ "$(cli get key2)" = "small value" ] || cluster_die "get to stdout"

# stat: size, replica on the storage node's segment; it takes no lease
expect 0 stat key1
has "$T/out" '^size +3000001 '
has "$T/out" '^replicas +1'
has "$T/out" "$STORE_NAME .*COMPLETE"
has "$T/out" '^lease .*stat takes none'

# ls over RPC, with a regex
expect 0 ls
has "$T/out" '^key1 +3000001 '
has "$T/out" '^key2 +12 '
has "$T/out" '^2 key\(s\)'
expect 0 ls --regex '^key1$'
has "$T/out" '^1 key\(s\)'
expect 0 ls --limit 1
has "$T/out" '^1 key\(s\).*truncated'
expect 1 ls --regex '('
# the regex of death (glibc's regcomp overflowed its stack: the master died)
# is refused with the reason, for ls and rm; the master lives
expect 1 ls --regex '(.*){1,32767}'
has "$T/err" 'master says: regex error at offset [0-9]+: regular expression is too large'
expect 1 rm --regex '(.*){1,32767}'
has "$T/err" 'too large'
expect 0 ls --regex '^key\d$'
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

# --json for every command
echo "json value!" >"$T/small"
jexpect 0 'd["ok"] and d["key"] == "key3" and d["size"] == 12 and d["replicas_requested"] == 2' \
  put --replicas 2 key3 "$T/small"
jexpect 0 'd["ok"] and d["size"] == 12 and d["file"].endswith("json.back")' get key3 "$T/json.back"
cmp "$T/small" "$T/json.back" || cluster_die "get --json to a file"
jexpect 0 '__import__("base64").b64decode(d["value_base64"]) == b"json value!\n"' get key3
jexpect 0 'd["size"] == 3000001 and d["complete"] and len(d["replicas"]) == 1 and
  d["replicas"][0]["segment"] == "'"$STORE_NAME"'" and d["replicas"][0]["state"] == "COMPLETE"' \
  stat key1
jexpect 0 'd["count"] == 3 and sorted(k["key"] for k in d["keys"]) == ["key1", "key2", "key3"] and
  not d["truncated"] and d["bytes"] == 3000001 + 12 + 12' ls
jexpect 0 'd["count"] == 1 and d["segments"][0]["name"] == "'"$STORE_NAME"'" and
  d["segments"][0]["capacity"] == 64 << 20 and d["segments"][0]["state"] == "MOUNTED"' segments
jexpect 0 'any(e["key"] == "mc/default/seg/'"$STORE_NAME"'" and "tcp" in e["value"]["protocols"]
  for e in d["entries"]) and d["count"] == len(d["entries"])' meta
jexpect 1 'not d["ok"] and d["error"] == "OBJECT_NOT_FOUND" and d["status"] == -704' stat nokey
jexpect 1 'not d["ok"] and d["error"] == "OBJECT_NOT_FOUND"' get nokey
jexpect 1 'not d["ok"] and d["error"] == "IO"' put k "$T/does-not-exist"

# stat takes no lease: rm right after it works (a fresh key: a get's lease
# would refuse it)
expect 0 put key4 "$T/small"
expect 0 stat key4
expect 0 ls
jexpect 0 'd["removed"] == 1 and d["key"] == "key4"' rm key4
sleep 1.2
expect 0 rm key3

# rm: a get's lease protects the key; after it ends rm works, get fails (1)
expect 0 get key1 "$T/back"
expect 1 rm key1
has "$T/err" 'rm key1: OBJECT_HAS_LEASE'
jexpect 1 'd["error"] == "OBJECT_HAS_LEASE"' rm key1
sleep 1.2
expect 0 rm key1
expect 1 get key1
has "$T/err" '^mooncake-cli: get key1: OBJECT_NOT_FOUND \(object not found\)$'
expect 1 stat key1
has "$T/err" 'OBJECT_NOT_FOUND'
sleep 1.2
jexpect 0 'd["removed"] == 1 and d["regex"] == "^key"' rm --regex '^key'
expect 0 ls
has "$T/out" '^0 key\(s\)'
jexpect 0 'd["count"] == 0 and d["keys"] == []' ls

# usage errors exit 2
expect 2
expect 2 frobnicate
has "$T/err" "unknown command 'frobnicate'"
expect 2 put onlykey
expect 2 get
expect 2 rm
expect 2 put --replicas 0 k "$T/value"
expect 2 --master nocolon ls
expect 2 ls --limit 0

# an unreachable master fails the operation (1), within the timeout
"$B/mooncake-cli" --master 127.0.0.1:1 --timeout 2 stat key1 >/dev/null 2>"$T/err"
[ $? = 1 ] || cluster_die "stat against no master should exit 1"
"$B/mooncake-cli" --master 127.0.0.1:1 --timeout 2 --json segments >"$T/out" 2>/dev/null
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert not d["ok"] and d["error"]' \
  "$T/out" || cluster_die "--json of an unreachable master"

echo "cli_test: all checks passed"
