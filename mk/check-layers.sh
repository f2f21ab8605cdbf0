#!/usr/bin/env bash
# make check-layers: who includes whom, against the rule of each folder.
#
# Every folder's README.md states what its files may include, in a block
#
#   ```layers
#   FILES...  : ENTRIES...
#   ```
#
# FILES are globs relative to the README's folder (`*` also matches `/`).
# ENTRIES are what those files may include:
#   - a repository path: a folder allows everything under it, a file or a
#     glob (`store/master*.h`) what it names;
#   - `<lib/*>`: a foreign library's headers (a glob over `<name>`);
#   - `!PATTERN`: never this, whatever else allows it (`!*_int.h`).
# A file is ruled by the nearest README.md above it that has a layers block;
# it may include what the lines whose FILES match it allow (their union,
# minus the `!` entries), plus the C, POSIX and Linux system headers listed
# below. A file no line matches is a violation: new files need a rule.
# Quoted includes are resolved as the compiler does (the file's folder,
# include/, src/, the root); one that resolves to no file is a violation.
#
#   mk/check-layers.sh [ROOT]   checks git ls-files '*.c' '*.h' of ROOT
#                               (default: the repository this script is in);
#                               prints one line per violation, exit 1 if any.
set -euo pipefail
set -f # globs in rules are patterns, never file names

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# System headers: C11, POSIX, glibc and Linux. Anything else in <> is a
# foreign library and needs an entry.
std_re='^(assert|complex|ctype|errno|fenv|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype|aio|cpio|dirent|dlfcn|fcntl|fnmatch|ftw|getopt|glob|grp|iconv|langinfo|libgen|monetary|mqueue|netdb|nl_types|poll|pthread|pwd|regex|sched|search|semaphore|spawn|strings|syslog|tar|termios|unistd|utime|utmpx|wordexp|alloca|byteswap|endian|err|execinfo|features|malloc|(sys|arpa|net|netinet|linux|asm)/[a-z0-9_/]+)\.h$'

declare -A rules # folder -> rule lines ("FILES : ENTRIES"), newline separated
while IFS= read -r readme; do
    dir=$(dirname "$readme")
    block=$(awk '/^```layers[[:space:]]*$/ {on = 1; next} on && /^```/ {on = 0} on' "$readme" |
        sed -e 's/#.*//' -e '/^[[:space:]]*$/d')
    [ -n "$block" ] && rules[$dir]=$block
done < <(git ls-files 'README.md' '*/README.md')

bad=0
violation() {
    echo "check-layers: $*"
    bad=1
}

# in_entry PATH ENTRY: PATH is ENTRY, under the folder ENTRY, or matches the glob ENTRY
in_entry() {
    # shellcheck disable=SC2053 # ENTRY is a glob on purpose
    [[ $1 == "$2" || $1 == "$2"/* || $1 == $2 ]]
}

# resolve FILE NAME: sets `what` to the repository path a quoted include of
# FILE names (no subshell: this runs for every include)
resolve() {
    local d=. c
    [[ $1 == */* ]] && d=${1%/*}
    for c in "$d/$2" "include/$2" "src/$2" "$2"; do
        c=${c#./}
        if [ -f "$c" ]; then
            what=$c
            return 0
        fi
    done
    return 1
}

while IFS= read -r f; do
    # the nearest folder above f with rules
    dir=.
    [[ $f == */* ]] && dir=${f%/*}
    while [ -z "${rules[$dir]+x}" ] && [ "$dir" != . ]; do
        if [[ $dir == */* ]]; then dir=${dir%/*}; else dir=.; fi
    done
    if [ -z "${rules[$dir]+x}" ]; then
        violation "$f: no README.md above it has a layers block"
        continue
    fi
    rel=${f#"$dir"/}
    allow=() deny=() matched=0
    while IFS= read -r line; do
        files=${line%%:*} entries=${line#*:}
        for g in $files; do
            # shellcheck disable=SC2053
            if [[ $rel == $g ]]; then
                matched=1
                for e in $entries; do
                    if [[ $e == !* ]]; then deny+=("${e#!}"); else allow+=("$e"); fi
                done
                break
            fi
        done
    done <<<"${rules[$dir]}"
    if [ $matched = 0 ]; then
        violation "$f: no line of $dir/README.md's layers block names it"
        continue
    fi
    while IFS= read -r inc; do
        [ -n "$inc" ] || continue
        if [[ $inc == \<* ]]; then
            name=${inc#<} name=${name%>}
            [[ $name =~ $std_re ]] && continue
            what=$inc
        else
            name=${inc#\"} name=${name%\"}
            if ! resolve "$f" "$name"; then
                violation "$f: includes \"$name\", which is no file of the repository"
                continue
            fi
        fi
        ok=0
        for e in "${allow[@]}"; do
            if in_entry "$what" "$e"; then ok=1 && break; fi
        done
        for e in "${deny[@]}"; do
            if in_entry "$what" "$e"; then ok=0 && break; fi
        done
        [ $ok = 1 ] || violation "$f: includes $what, which $dir/README.md does not allow"
    done < <(sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"][^>"]*[>"]).*/\1/p' "$f")
done < <(git ls-files '*.c' '*.h')

exit $bad
