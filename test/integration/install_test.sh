#!/usr/bin/env bash
# make install / make uninstall (issue 14): into a temporary PREFIX, then with
# DESTDIR. Checks what lands where (Debian multiarch libdir, man pages,
# conf files, systemd units that systemd-analyze verify accepts), that an
# edited conf file survives a reinstall and an uninstall, that uninstall
# leaves no file behind, that pkg-config --cflags names only the include
# directory, and that the installed static library exports only mc_*: a
# program defining key_valid, evict_pass and store_remount itself links
# statically against it and runs.
set -u
B=${TEST_BUILD_DIR:-build}
T=$(mktemp -d "${TMPDIR:-/tmp}/mc-install.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# the tree's Makefile, run as a user would (not as a sub-make of make check)
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s --no-print-directory BUILD="$B" "$@"; }

ma=$(cc -print-multiarch)
# a sanitizer build (make asan/ubsan/tsan export SAN): the installed library
# is instrumented, so the programs linked against it here are too
case ${SAN:-} in
address | undefined | thread) sanf=-fsanitize=$SAN ;;
*) sanf= ;;
esac
P=$T/prefix
mk install PREFIX="$P" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "make install"; }

for f in bin/mooncake-master bin/mooncake-store-server bin/mooncake-cli \
  bin/mooncake-http-metadata-server bin/mooncake-topology bin/mooncake_client \
  "lib/$ma/libmooncake.a" "lib/$ma/libmooncake.so.0" "lib/$ma/pkgconfig/mooncake.pc" \
  include/mooncake/store.h include/mooncake/transfer.h \
  share/man/man1/mooncake-master.1 share/man/man1/mooncake-store-server.1 \
  share/man/man1/mooncake-cli.1 share/man/man1/mooncake-http-metadata-server.1 \
  etc/mooncake/mooncake-master.conf etc/mooncake/mooncake-store-server.conf \
  lib/systemd/system/mooncake-master.service lib/systemd/system/mooncake-store-server.service \
  "lib/systemd/system/mooncake-store-server@.service" lib/systemd/system/mooncake-client.service \
  lib/sysusers.d/mooncake.conf; do
  [ -e "$P/$f" ] || fail "make install did not install $f"
done
"$P/bin/mooncake-master" --version | grep -q "^mooncake-master [0-9]" || fail "installed --version"

# man pages: a NAME line and the options of --help
for p in mooncake-master mooncake-store-server mooncake-cli mooncake-http-metadata-server; do
  m=$P/share/man/man1/$p.1
  grep -q '^\.SH NAME' "$m" && grep -q "^$p \\\\- " "$m" || fail "$m has no NAME section"
  grep -q 'version' "$m" || fail "$m lacks the options"
done

# units: the installed paths, accepted by systemd-analyze verify
grep -q "^ExecStart=$P/bin/mooncake-master -c $P/etc/mooncake/mooncake-master.conf" \
  "$P/lib/systemd/system/mooncake-master.service" || fail "unit paths not those of PREFIX"
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify --man=no "$P"/lib/systemd/system/*.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify complains: $out"
  grep -q '^Type=notify' "$P/lib/systemd/system/mooncake-master.service" || fail "not Type=notify"
else
  echo "install_test: systemd-analyze missing, units not verified"
fi

# pkg-config: only the include directory; the static link line is complete
export PKG_CONFIG_PATH=$P/lib/$ma/pkgconfig
[ "$(pkg-config --cflags mooncake | xargs)" = "-I$P/include" ] ||
  fail "pkg-config --cflags leaks: $(pkg-config --cflags mooncake)"

# the static library's namespace: only mc_* defined globally
bad=$(nm -g --defined-only "$P/lib/$ma/libmooncake.a" | awk 'NF == 3 && $3 !~ /^mc_/ {print $3}')
[ -z "$bad" ] || fail "libmooncake.a exports non-mc_ symbols: $(echo $bad | head -c 400)"
cat >"$T/host.c" <<'EOC'
#include <stdio.h>
#include <string.h>
#include <mooncake/version.h>
#include <mooncake/store.h>
/* names the library uses internally: a host program may have its own */
int key_valid(const char *k);
int key_valid(const char *k) { return k != NULL; }
int evict_pass;
void store_remount(void);
void store_remount(void) {}
int main(void)
{
    mc_store_config_t c;
    mc_store_config_init(&c);
    store_remount();
    printf("%s %d %d\n", mc_version(), key_valid("k"), evict_pass);
    return strcmp(mc_version(), "") == 0;
}
EOC
# libmooncake.a linked statically (the system libraries it needs stay shared)
cc $sanf -o "$T/host" "$T/host.c" $(pkg-config --cflags mooncake) \
  -Wl,-Bstatic $(pkg-config --libs-only-L mooncake) -lmooncake -Wl,-Bdynamic \
  $(pkg-config --libs --static mooncake | sed 's/-lmooncake//') >"$T/cc.log" 2>&1 ||
  { cat "$T/cc.log"; fail "a program defining key_valid does not link statically"; }
ldd "$T/host" 2>/dev/null | grep -q libmooncake && fail "host linked libmooncake.so, not the archive"
"$T/host" | grep -q "^$("$P/bin/mooncake-cli" --version | cut -d' ' -f2) 1 0$" || fail "host program output"
# the shared library too: dynamic link through pkg-config
cc $sanf -o "$T/hostso" "$T/host.c" $(pkg-config --cflags --libs mooncake) >"$T/cc.log" 2>&1 ||
  { cat "$T/cc.log"; fail "dynamic link"; }
LD_LIBRARY_PATH=$P/lib/$ma "$T/hostso" >/dev/null || fail "dynamic host program"

# conf files: an edited one is kept by install and by uninstall
echo "; edited" >>"$P/etc/mooncake/mooncake-master.conf"
mk install PREFIX="$P" >"$T/install2.log" 2>&1 || fail "second make install"
grep -q '^; edited' "$P/etc/mooncake/mooncake-master.conf" || fail "install overwrote an edited conf"
mk uninstall PREFIX="$P" >"$T/uninstall.log" 2>&1 || fail "make uninstall"
grep -q 'keeping .*mooncake-master.conf (edited)' "$T/uninstall.log" || fail "uninstall did not say it kept the edited conf"
left=$(find "$P" ! -type d | grep -v 'etc/mooncake/mooncake-master.conf$')
[ -z "$left" ] || fail "make uninstall left: $left"
rm "$P/etc/mooncake/mooncake-master.conf"

# DESTDIR staging (as packagers use it), PREFIX=/usr: /etc and the multiarch libdir
D=$T/dest
mk install DESTDIR="$D" PREFIX=/usr >"$T/install3.log" 2>&1 || { cat "$T/install3.log"; fail "make install DESTDIR"; }
[ -e "$D/usr/lib/$ma/libmooncake.so.0" ] || fail "DESTDIR: library not in /usr/lib/$ma"
[ -e "$D/etc/mooncake/mooncake-master.conf" ] || fail "DESTDIR: conf not in /etc/mooncake"
grep -q '^ExecStart=/usr/bin/mooncake-master -c /etc/mooncake/mooncake-master.conf' \
  "$D/usr/lib/systemd/system/mooncake-master.service" || fail "DESTDIR: unit paths"
mk uninstall DESTDIR="$D" PREFIX=/usr >/dev/null 2>&1 || fail "make uninstall DESTDIR"
left=$(find "$D" ! -type d)
[ -z "$left" ] || fail "make uninstall DESTDIR left: $left"
echo "install_test: all checks passed"
