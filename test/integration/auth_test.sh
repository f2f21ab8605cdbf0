#!/usr/bin/env bash
# Authentication end to end (issue 13, finding 6): a master and a node with
# the cluster's secret; mooncake-cli with it stores and reads; without it, or
# with another secret, it is refused with the reason; a node with another
# secret cannot join; the HTTP endpoints that tell keys (/keys, /get_all_keys,
# /query_key) or change metadata (PUT and DELETE /metadata) need a proof over
# a single-use challenge (missing, another secret's, replayed: 401 with the
# reason), on the master and on mooncake-http-metadata-server with the secret; without any secret a port bound beyond loopback says so once at
# start. The other ports (node data, service control): auth_ports_test.c.
set -u
. "$(dirname "$0")/helpers/cluster.sh"
T=$CLUSTER_TMP
printf 'the cluster secret, long enough\n' >"$T/secret"
printf 'another secret, also long enough\n' >"$T/other"
chmod 600 "$T/secret" "$T/other"

cluster_start_master --set "security.secret_file=$T/secret"
cluster_start_store 16MiB --set "security.secret_file=$T/secret"
cli() { timeout 30 "$B/mooncake-cli" --master "$MASTER" --http "$HTTP" "$@"; }

head -c 100000 /dev/urandom >"$T/v"
cli --secret-file "$T/secret" put k1 "$T/v" >"$T/out" 2>&1 || cluster_die "put with the secret: $(cat "$T/out")"
cli --secret-file "$T/secret" get k1 "$T/back" >"$T/out" 2>&1 || cluster_die "get with the secret"
cmp -s "$T/v" "$T/back" || cluster_die "get returned other bytes"
MOONCAKE_SECRET_FILE="$T/secret" cli ls --rpc >"$T/out" 2>&1 || cluster_die "ls --rpc with the secret"
grep -q '^k1 ' "$T/out" || cluster_die "ls does not list k1"

# no secret: refused, with the reason
cli ls --rpc >"$T/out" 2>&1 && cluster_die "ls without the secret succeeded"
grep -q 'REJECT_HANDSHAKE' "$T/out" || cluster_die "no refusal: $(cat "$T/out")"
grep -q 'authentication required' "$T/out" || cluster_die "no reason: $(cat "$T/out")"
# another secret: refused
cli --secret-file "$T/other" ls --rpc >"$T/out" 2>&1 && cluster_die "ls with another secret succeeded"
grep -q 'REJECT_HANDSHAKE' "$T/out" || cluster_die "no refusal: $(cat "$T/out")"
# a secret file others can read is refused at start
chmod 644 "$T/other"
cli --secret-file "$T/other" ls --rpc >"$T/out" 2>&1
[ $? = 2 ] || cluster_die "a group/world-readable secret file was accepted"
grep -q 'chmod 600' "$T/out" || cluster_die "no hint: $(cat "$T/out")"
chmod 600 "$T/other"

# a node with another secret cannot mount
"$B/mooncake-store-server" --set "store.master=$MASTER" --set store.global_segment_size=16MiB \
  --set store.reactors=1 --set store.http_port=0 --set "security.secret_file=$T/other" >"$T/bad.out" 2>"$T/bad.log"
[ $? != 0 ] || cluster_die "a node with another secret started"
grep -q 'authentication with .* failed' "$T/bad.log" || cluster_die "no reason: $(tail -3 "$T/bad.log")"

# ls (an RPC) with and without the secret
cli --secret-file "$T/secret" ls >"$T/out" 2>&1 || cluster_die "ls with the secret: $(cat "$T/out")"
grep -q '^k1 ' "$T/out" || cluster_die "ls does not list k1"
cli ls >"$T/out" 2>&1 && cluster_die "ls without the secret succeeded"
# HTTP endpoints that tell keys need a proof too; the reason is given
for ep in keys get_all_keys 'query_key?key=k1'; do
  [ "$(curl -s -o "$T/out" -w '%{http_code}' "http://$HTTP/$ep")" = 401 ] ||
    cluster_die "/$ep without a proof was not refused"
  grep -q 'authentication required' "$T/out" || cluster_die "/$ep: no reason: $(cat "$T/out")"
done
# a valid header works once; replayed, its challenge is used up
# proof SECRET_FILE [HOST:PORT]: a fresh X-Mooncake-Auth value over a challenge of /auth
proof() {
  /usr/bin/python3 - "$1" "${2:-$HTTP}" <<'PY'
import hashlib, hmac, json, os, sys, urllib.request
secret = open(sys.argv[1], 'rb').read().rstrip(b'\r\n')
key = hashlib.sha256(secret).digest()
ns = bytes.fromhex(json.load(urllib.request.urlopen('http://%s/auth' % sys.argv[2]))['nonce'])
nc = os.urandom(32)
proof = hmac.new(key, b'mc-auth-client' + ns + nc, hashlib.sha256).hexdigest()
print('%s.%s.%s' % (ns.hex(), nc.hex(), proof))
PY
}
hdr=$(proof "$T/secret") || cluster_die "cannot compute a proof"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" "http://$HTTP/keys")" = 200 ] ||
  cluster_die "a valid proof was refused"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" "http://$HTTP/keys")" = 401 ] ||
  cluster_die "a replayed proof was accepted"
# a proof made with another secret
hdr=$(proof "$T/other") || cluster_die "cannot compute a proof"
[ "$(curl -s -o "$T/out" -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" "http://$HTTP/keys")" = 401 ] ||
  cluster_die "a proof with another secret was accepted"
grep -q 'wrong proof' "$T/out" || cluster_die "/keys with another secret: no reason: $(cat "$T/out")"

# /metadata: a PUT or DELETE changes the metadata only with a proof; a GET
# stays open. On the master's HTTP port, then on the standalone server.
# check_metadata HOST:PORT
check_metadata() {
  local at=$1 how hdr
  local M="http://$at/metadata?key=auth_test_entry"
  for how in "-X PUT --data-binary v1" "-X DELETE"; do
    # shellcheck disable=SC2086
    [ "$(curl -s -o "$T/out" -w '%{http_code}' $how "$M")" = 401 ] ||
      cluster_die "$at: /metadata $how without a proof was not refused"
    grep -q 'authentication required' "$T/out" || cluster_die "$at: /metadata $how: no reason: $(cat "$T/out")"
    hdr=$(proof "$T/other" "$at") || cluster_die "cannot compute a proof"
    # shellcheck disable=SC2086
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" $how "$M")" = 401 ] ||
      cluster_die "$at: /metadata $how with another secret was not refused"
  done
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$M")" = 404 ] || cluster_die "$at: a refused PUT stored the entry"
  hdr=$(proof "$T/secret" "$at") || cluster_die "cannot compute a proof"
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" -X PUT --data-binary v1 "$M")" = 200 ] ||
    cluster_die "$at: /metadata PUT with a proof was refused"
  [ "$(curl -s "$M")" = v1 ] || cluster_die "$at: /metadata GET (open) does not return the entry"
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" -X DELETE "$M")" = 401 ] ||
    cluster_die "$at: /metadata DELETE with a used proof was accepted"
  [ "$(curl -s "$M")" = v1 ] || cluster_die "$at: a refused DELETE removed the entry"
  hdr=$(proof "$T/secret" "$at") || cluster_die "cannot compute a proof"
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Mooncake-Auth: $hdr" -X DELETE "$M")" = 200 ] ||
    cluster_die "$at: /metadata DELETE with a proof was refused"
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$M")" = 404 ] || cluster_die "$at: the DELETE left the entry"
}
check_metadata "$HTTP"
"$B/mooncake-http-metadata-server" --set server.bind_address=127.0.0.1 --set server.port=0 \
  --set "security.secret_file=$T/secret" >"$T/hms.out" 2>"$T/hms.log" &
hms=$!
CLUSTER_PIDS+=("$hms")
for _ in $(seq 100); do grep -q '^listening ' "$T/hms.out" && break; sleep 0.1; done
hport=$(sed -n 's/^listening //p' "$T/hms.out")
[ -n "$hport" ] || { kill -KILL $hms; cluster_die "mooncake-http-metadata-server did not start: $(cat "$T/hms.log")"; }
check_metadata "127.0.0.1:$hport"
kill -TERM $hms
wait $hms
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP/metrics")" = 200 ] ||
  cluster_die "/metrics needs no proof"

# without a secret the standalone server keeps upstream's open protocol
"$B/mooncake-http-metadata-server" --set server.bind_address=127.0.0.1 --set server.port=0 \
  >"$T/hms.out" 2>"$T/hms.log" &
hms=$!
CLUSTER_PIDS+=("$hms")
for _ in $(seq 100); do grep -q '^listening ' "$T/hms.out" && break; sleep 0.1; done
hport=$(sed -n 's/^listening //p' "$T/hms.out")
[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary v "http://127.0.0.1:$hport/metadata?key=k")" = 200 ] ||
  { kill -KILL $hms; cluster_die "the standalone server without a secret refused a PUT"; }
kill -TERM $hms
wait $hms

# the first node still serves
cli --secret-file "$T/secret" get k1 "$T/back" >/dev/null 2>&1 || cluster_die "get after the refused node"
# without a secret, a port reachable beyond this host is said once at start
"$B/mooncake-master" --set server.bind_address=0.0.0.0 --set server.rpc_port=0 \
  --set server.http_port=0 --set server.reactors=1 >"$T/open.out" 2>"$T/open.log" &
pid=$!
cluster_wait_line "$T/open.log" 'ready: rpc' >/dev/null || { kill -KILL $pid; cluster_die "open master did not start"; }
kill -TERM $pid
wait $pid
[ "$(grep -c 'without a secret: anyone who reaches it is trusted' "$T/open.log")" = 1 ] ||
  cluster_die "no single warning: $(grep -i secret "$T/open.log")"
grep -q 'without a secret' "$CLUSTER_TMP/master.log" && cluster_die "warned with a secret set"

echo "auth_test: all checks passed"
