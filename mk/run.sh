#!/usr/bin/env bash
# make run: start the system on its embedded defaults (conf/*.conf) in the
# foreground; Ctrl-C stops it.
set -euo pipefail
BUILD=${1:-build}
conf=conf/mooncake-master.conf

echo "== starting mooncake-master -c $conf (Ctrl-C to stop)"
echo "   metrics:  curl http://127.0.0.1:9003/metrics"
echo "   summary:  curl http://127.0.0.1:9003/metrics/summary"
echo "   segments: curl http://127.0.0.1:9003/segments"
exec "$BUILD/mooncake-master" -c "$conf"
