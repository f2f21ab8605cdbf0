#!/usr/bin/env bash
# Install the Debian packages mooncake-c needs, only those missing.
# A no-op (no apt-get at all) when everything is present.
set -euo pipefail

pkgs=(
  build-essential pkg-config clang clang-format
  libevent-dev libhiredis-dev libnuma-dev libxxhash-dev libpcre2-dev libsodium-dev
  libibverbs-dev librdmacm-dev liburing-dev
  libmsgpack-dev libcmocka-dev
  redis-server redis-tools redis-sentinel
  iperf3 gnuplot-nox procps curl valgrind
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
