#!/usr/bin/env bash
# Install the Debian packages mooncake-c needs, only those missing.
# A no-op (no apt-get at all) when everything is present.
#
#   mk/deps.sh [build|test|bench|all]     (default all: what CI needs)
#
#   build  compile the library, the programs and their man pages
#   test   what make check runs besides (cmocka, redis, promtool, python3
#          modules, systemd-analyze, curl)
#   bench  what perf/ compares against or plots with
set -euo pipefail

build=(
  build-essential pkg-config help2man
  libevent-dev libhiredis-dev libnuma-dev libxxhash-dev libpcre2-dev libsodium-dev
  libibverbs-dev libsystemd-dev liburing-dev
)
test=(
  clang clang-format libmsgpack-dev libcmocka-dev
  redis-server redis-tools redis-sentinel prometheus systemd procps curl iproute2 nftables
  python3-dev python3-setuptools python3-pip python3-pytest python3-numpy python3-redis
)
bench=(iperf3 gnuplot-nox valgrind fio)

case "${1:-all}" in
build) pkgs=("${build[@]}") ;;
test) pkgs=("${test[@]}") ;;
bench) pkgs=("${bench[@]}") ;;
all) pkgs=("${build[@]}" "${test[@]}" "${bench[@]}") ;;
*)
  echo "usage: $0 [build|test|bench|all]" >&2
  exit 2
  ;;
esac

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
