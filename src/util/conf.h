/*
 * conf.h - table-driven configuration: INI file, environment, --set.
 *
 * Each module describes its options as a table of mc_conf_key_t rows (name,
 * type, default, range, help, offset of the field in the module's options
 * struct) and registers it under a section name together with a pointer to
 * its options struct. The conf object then writes parsed values straight into
 * that struct. Sources are layered, later wins:
 *
 *     table defaults < config file < MC_<SECTION>_<KEY> environment < --set
 *
 * mc_conf_parse_args() applies them in that order whatever the order of the
 * arguments; the individual loaders apply one source each, in call order.
 *
 * Field types (the struct member a row points at must have this C type; the
 * MC_CONF_ROW macro records sizeof the member and mc_conf_add_section checks it):
 *   MC_CONF_BOOL      bool      true/false, yes/no, on/off, 1/0 (any case)
 *   MC_CONF_INT       int64_t   decimal, optional sign
 *   MC_CONF_UINT      uint64_t  decimal, no sign
 *   MC_CONF_DOUBLE    double    strtod syntax, finite
 *   MC_CONF_SIZE      uint64_t  bytes: "4096", "64MiB", "1.5 GiB", "10MB";
 *                               K M G T KiB MiB GiB TiB are binary, KB MB GB TB
 *                               decimal, B is bytes; units are case-insensitive;
 *                               a decimal must come out as whole bytes
 *   MC_CONF_DURATION  uint64_t  microseconds: "250us", "500ms", "1.5s", "2m", "1h";
 *                               a bare number must be 0 (anything else "needs a
 *                               unit"); must come out as whole microseconds
 *   MC_CONF_STRING    char *    owned by the conf object (see lifetimes)
 *   MC_CONF_ENUM      int       index into the row's NULL-terminated choices,
 *                               matched case-insensitively
 * Ranges [min, max] apply to INT, UINT, DOUBLE, SIZE and DURATION (in bytes and
 * microseconds); min == max == 0 means unbounded; use -INFINITY/INFINITY for a
 * one-sided range. Bounds are doubles, so they are exact up to 2^53.
 *
 * File syntax: "[section]" lines, "key = value" lines, comment lines starting
 * with ';' or '#', and inline comments starting at a ';' that follows
 * whitespace. A value may be written in double quotes (with \" and \\ escapes)
 * to keep leading/trailing spaces, ';' or '#'; quotes mean nothing in the
 * environment or in --set, whose values are taken literally. Sections may be
 * repeated; a key given twice in one file is an error (almost always a
 * copy-paste mistake; layering is the way to override). Section and key names
 * are case-sensitive in files and --set; the environment name is the
 * upper-cased section and key with '-' and '.' turned into '_'.
 *
 * Errors: every loader returns MC_ERR_CONFIG with one line in the caller's
 * err buffer naming the source, the key and what was wrong, e.g.
 *     conf/master.conf:12: rpc.port: value 70000 out of range [1, 65535]
 *     environment MC_RPC_PORT: rpc.port: bad value "x": expected an integer
 *     --set: rpc.prot: unknown key
 * and does not log it (the caller decides). A loader that fails changes
 * nothing: a source is parsed completely before any field is written. err may
 * be NULL or errlen 0; the message is truncated to fit otherwise. MC_ERR_NOMEM
 * is returned (also with a message) when an allocation fails.
 *
 * Lifetimes: key tables are borrowed and must outlive the conf object (they
 * are normally static const). The options struct is borrowed: it must stay
 * valid while loaders run. String fields point at memory owned by the conf
 * object, valid until it is replaced by a later source or until
 * mc_conf_destroy(); the conf never reads string fields back from the struct,
 * so the struct may be freed before the conf.
 *
 * Threads: a conf object is used by one thread at a time (normally main(),
 * before the reactors start). The parse and format helpers are pure and safe
 * from any thread.
 */
#ifndef MC_UTIL_CONF_H
#define MC_UTIL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mooncake/status.h"

typedef enum mc_conf_type {
    MC_CONF_BOOL,
    MC_CONF_INT,
    MC_CONF_UINT,
    MC_CONF_DOUBLE,
    MC_CONF_SIZE,
    MC_CONF_DURATION,
    MC_CONF_STRING,
    MC_CONF_ENUM,
} mc_conf_type_t;

typedef struct mc_conf_key {
    const char *name; /* key inside the section, e.g. "port" */
    mc_conf_type_t type;
    size_t offset;              /* of the field in the options struct */
    size_t size;                /* sizeof the field, checked against type */
    const char *def;            /* default, as a value is written; NULL = "" (strings) */
    double min, max;            /* range; both 0 = unbounded */
    const char *const *choices; /* MC_CONF_ENUM: names, NULL-terminated */
    const char *help;           /* one sentence, for --help and --dump-config */
} mc_conf_key_t;

/* One table row for field `field` of struct type `st`. */
#define MC_CONF_ROW(st, field, name, type, def, min, max, help)                                    \
    {                                                                                              \
        (name), (type), offsetof(st, field), sizeof(((st *)0)->field), (def), (min), (max), NULL,  \
            (help)                                                                                 \
    }

/* One MC_CONF_ENUM row; `field` is an int holding the index into choices. */
#define MC_CONF_ENUM_ROW(st, field, name, choices, def, help)                                      \
    {                                                                                              \
        (name), MC_CONF_ENUM, offsetof(st, field), sizeof(((st *)0)->field), (def), 0, 0,          \
            (choices), (help)                                                                      \
    }

typedef struct mc_conf mc_conf_t;

/* NULL when out of memory. */
mc_conf_t *mc_conf_create(void);

/* Partial mode, for reading one section again (a daemon's SIGHUP re-reads
 * [log]): sections that are not registered are skipped in files, the
 * environment and --set, instead of being errors. Off by default. */
void mc_conf_set_partial(mc_conf_t *conf, int on);

/* Frees every string the conf owns (string fields of registered structs then
 * dangle). Accepts NULL. */
void mc_conf_destroy(mc_conf_t *conf);

/* Register `nkeys` rows of `keys` as [section], writing into `opts`, and
 * apply every default to `opts` now. `section` is copied; `keys` and `opts`
 * are borrowed (see lifetimes above).
 * Returns MC_OK; MC_ERR_NOMEM; MC_ERR_INVALID_PARAMS for a broken table
 * (duplicate section or key, field size not matching the type, default that
 * does not parse or is out of range, enum without choices, two keys with the
 * same environment name) - a programming error, so it is logged at ERR and
 * nothing is registered. */
mc_status_t mc_conf_add_section(mc_conf_t *conf, const char *section, const mc_conf_key_t *keys,
                                size_t nkeys, void *opts);

/* Load an INI file. Returns MC_OK; MC_ERR_CONFIG (file cannot be read, syntax
 * error, unknown section or key, bad or out-of-range value, duplicate key);
 * MC_ERR_NOMEM. */
mc_status_t mc_conf_load_file(mc_conf_t *conf, const char *path, char *err, size_t errlen);

/* Apply MC_<SECTION>_<KEY>=value entries of envp (NULL-terminated, as main's
 * third argument or `environ`; NULL means none). Variables starting with MC_
 * that match no key are logged at WARN and otherwise ignored, because other
 * programs share the environment. Returns MC_OK; MC_ERR_CONFIG; MC_ERR_NOMEM. */
mc_status_t mc_conf_load_env(mc_conf_t *conf, char **envp, char *err, size_t errlen);

/* Apply one "section.key=value" assignment (the argument of --set; the
 * section is everything before the first '.'). Returns MC_OK; MC_ERR_CONFIG;
 * MC_ERR_NOMEM. */
mc_status_t mc_conf_set(mc_conf_t *conf, const char *assignment, char *err, size_t errlen);

/* Print the effective configuration as an INI file that mc_conf_load_file
 * reads back to the same values: each key preceded by "; help (type, default
 * X, range [a, b])" and, when not at its default, followed by its origin
 * ("; from conf/x.conf:3", "; from env MC_RPC_PORT", "; from --set"). */
void mc_conf_dump(const mc_conf_t *conf, FILE *out);

/* Print `usage` (may be NULL), the options of mc_conf_parse_args and every
 * key with its type, default, range and help. */
void mc_conf_help(const mc_conf_t *conf, const char *usage, FILE *out);

/* Command line of a daemon. argv[0] is skipped; accepted arguments:
 *   -c FILE | --config FILE | --config=FILE   load FILE (at most once)
 *   --set section.key=value | --set=...       repeatable, applied in order
 *   --dump-config                             print the result to stdout
 *   -h | --help                               print help to stdout
 * (-V / --version is the daemons' own, answered before this: src/daemon.h;
 * the help text lists it.)
 * Any other argument is an error naming it. The layers are applied as file,
 * then envp (see mc_conf_load_env), then every --set, whatever the argument
 * order. *exit_now is set to 1 when --help or --dump-config was handled (the
 * caller should exit 0), else 0. --help prints and returns without loading
 * anything. Returns MC_OK; MC_ERR_CONFIG (bad argument or any loader error; the
 * conf may then be partly updated, so treat it as fatal); MC_ERR_NOMEM. */
mc_status_t mc_conf_parse_args(mc_conf_t *conf, int argc, char **argv, char **envp,
                               const char *usage, int *exit_now, char *err, size_t errlen);

/* Pure helpers, for command-line flags of tools too. Each returns MC_OK or
 * MC_ERR_INVALID_PARAMS; the output is written only on success. */
mc_status_t mc_conf_parse_bool(const char *s, bool *out);
mc_status_t mc_conf_parse_size(const char *s, uint64_t *bytes);
/* The decimal digits in [p, end) (1..10 of them, nothing else) as a value
 * <= max: 1 and *out set, or 0. For ports and numbers inside URLs. */
int mc_conf_parse_digits(const char *p, const char *end, unsigned long max, unsigned long *out);
mc_status_t mc_conf_parse_duration(const char *s, uint64_t *us);

/* Room for any formatted size, duration or value of a numeric type. */
#define MC_CONF_FMT_LEN 32

/* Size in the largest binary unit that is exact ("64MiB", "1536KiB", "1000",
 * "0"), duration in the largest exact unit ("1h", "90s", "1500us", "0"). Both
 * write at most len bytes (MC_CONF_FMT_LEN always suffices) and return buf. */
char *mc_conf_format_size(uint64_t bytes, char *buf, size_t len);
char *mc_conf_format_duration(uint64_t us, char *buf, size_t len);

/* "bool", "int", "uint", "double", "size", "duration", "string", "enum". */
const char *mc_conf_type_name(mc_conf_type_t type);

/* The library's own environment variables (transport/README.md: they win
 * over the options they name). Read only where options are resolved (the
 * rdma transport's install, the emulated provider's defaults, the CUDA
 * loader, the store client's open) and passed down from there: leaf code
 * never reads the environment. */
/* name's value; NULL when unset or empty. */
const char *mc_conf_env_str(const char *name);
/* name's value as a decimal number in lo..hi; def when unset or empty, and
 * def with a WARN naming the variable and the range when it is not one. */
uint64_t mc_conf_env_uint(const char *name, uint64_t def, uint64_t lo, uint64_t hi);

#endif /* MC_UTIL_CONF_H */
