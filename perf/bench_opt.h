/*
 * bench_opt.h - the benchmarks' command lines, on the configuration tables
 * of the daemons (src/util/conf.h): a program describes its flags once, as
 * mc_conf_key_t rows of an options struct (MC_CONF_ROW), and gets
 *   --name VALUE, --name=VALUE, --set name=VALUE (or bench.name=VALUE),
 *   bare --name for a bool row (true), -x for a one-letter row "x",
 *   sizes with units ("64MiB", "4K"), durations ("500ms"), checked numbers
 *   (a value that does not parse or is out of the row's range is refused,
 *   the message names the flag and the range),
 *   --help generated from the rows (flag, placeholder, help, default,
 *   range), and --dump-config (the values in effect, as an INI file).
 * Comma lists ("4K,64K,1M", "1,4,16") are STRING rows read afterwards with
 * bench_list, which checks every element the same way. -c FILE loads an INI
 * file (a [bench] section, as --dump-config writes) where it stands.
 *
 * The environment is not read: a benchmark's flags come from its command
 * line only. String fields stay valid until the program exits.
 */
#ifndef MC_PERF_BENCH_OPT_H
#define MC_PERF_BENCH_OPT_H

#include <stddef.h>
#include <stdint.h>

#include "util/conf.h"

/* Parse argv (argv[0] is the program) into opts, whose defaults the rows
 * set first. usage: one or more lines printed before the flags by --help.
 * Returns 0: go on; 1: --help or --dump-config was answered (exit 0);
 * 2: a bad command line, its message printed on stderr (exit 2). */
int bench_opts_parse(const char *usage, const mc_conf_key_t *keys, size_t nkeys, void *opts,
                     int argc, char **argv);

/* The same, where the STRING rows named in repeatable (NULL-terminated) may
 * be given several times: their values are joined with '\n'. */
int bench_opts_parse_ex(const char *usage, const mc_conf_key_t *keys, size_t nkeys, void *opts,
                        const char *const *repeatable, int argc, char **argv);

/* Read the comma list s of --flag into out[0..max): sizes with units when
 * sizes is 1, else decimal integers; each in lo..hi. The count (>= 1), or 0
 * with the reason printed on stderr. */
unsigned bench_list(const char *flag, const char *s, int sizes, uint64_t lo, uint64_t hi,
                    uint64_t *out, unsigned max);

/* 1 when the last parse's command line gave the row name (--name, -x or
 * --set; not -c FILE), else 0: a default that depends on other flags. */
int bench_opt_given(const char *name);

#endif /* MC_PERF_BENCH_OPT_H */
