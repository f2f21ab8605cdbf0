/*
 * regex.h - the one wrapper around PCRE2 (Debian libpcre2-8): patterns that
 * cannot hurt the process that runs them.
 *
 * Dialect: PCRE2 (Perl-compatible), bytes, no UTF: a pattern and a subject are
 * byte strings and `.` matches any one byte but newline. A match is a search
 * (unanchored unless the pattern says ^ or $), like upstream Mooncake's
 * std::regex_search with the ECMAScript grammar. Everything ECMAScript has
 * (classes \d \w \s, lazy quantifiers, lookahead, backreferences,
 * non-capturing groups) means the same here; PCRE2 adds lookbehind,
 * possessive quantifiers, atomic groups, \Q..\E and POSIX classes
 * ([[:alpha:]]). The POSIX extended regexes used before differ in bracket
 * escapes: "[\d]" is a digit here, a backslash or a d in POSIX.
 *
 * Limits (mc_regex_limits_t): a pattern longer than max_len bytes is refused
 * before it is compiled; compiling may allocate at most compile_mem bytes
 * (PCRE2 itself also refuses a compiled pattern over 64 KiB, e.g. `(.*){1,32767}`);
 * one match may take at most match_limit backtracking steps, nest
 * depth_limit deep and use heap_limit_kib KiB. A pattern cannot raise these
 * ((*LIMIT_MATCH=N) in a pattern can only lower them). Every refusal comes
 * with a sentence naming why.
 *
 * Threads: a compiled mc_regex_t carries its own match scratch, so it is used
 * by one thread at a time; different ones may run in parallel.
 */
#ifndef MC_UTIL_REGEX_H
#define MC_UTIL_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

typedef struct mc_regex mc_regex_t;

typedef struct mc_regex_limits {
    uint32_t max_len;        /* pattern bytes (1024) */
    uint32_t match_limit;    /* backtracking steps per subject (100000) */
    uint32_t depth_limit;    /* nesting of backtracking per subject (10000) */
    uint32_t heap_limit_kib; /* heap one match may use, KiB (4096) */
    size_t compile_mem;      /* bytes compiling may allocate (1 MiB) */
} mc_regex_limits_t;

/* Fills the defaults above. */
void mc_regex_limits_init(mc_regex_limits_t *l);

/* Compile pattern[0..len) (NUL bytes allowed; lim NULL = defaults).
 * MC_OK with *out; MC_ERR_INVALID_PARAMS with a sentence in why[0..whylen)
 * ("regex longer than 1024 bytes", "regex error at offset 3: missing
 * closing parenthesis", "regex needs more than ... to compile");
 * MC_ERR_NOMEM. */
mc_status_t mc_regex_compile(const char *pattern, size_t len, const mc_regex_limits_t *lim,
                             mc_regex_t **out, char *why, size_t whylen);

/* Search subject[0..len). MC_OK with *matched 0 or 1; MC_ERR_LIMIT when the
 * match went over one of its limits (why names which); MC_ERR_NOMEM;
 * MC_ERR_INTERNAL_ERROR (PCRE2 reported something else: in why). */
mc_status_t mc_regex_match(mc_regex_t *re, const char *subject, size_t len, int *matched, char *why,
                           size_t whylen);

/* Accepts NULL. */
void mc_regex_free(mc_regex_t *re);

#endif /* MC_UTIL_REGEX_H */
