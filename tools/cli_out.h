/*
 * cli_out.h - mooncake-cli's output helpers (cli_out.c): a writer of one JSON
 * document on stdout (--json: keys and values in order, commas and nesting
 * tracked; strings are bytes, valid UTF-8 passes and anything else is
 * escaped \u00XX), human sizes and escaped bytes for the tables, and the
 * decoders of msgpack metadata values (text for humans, JSON for --json).
 */
#ifndef MC_TOOLS_CLI_OUT_H
#define MC_TOOLS_CLI_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rpc/msgpack.h"

/* JSON: j_begin('{' or '['), j_key before each member, a value, j_end. */
void j_begin(char c);
void j_end(char c);
void j_key(const char *k);
void j_str(const void *p, size_t n);
void j_cstr(const char *s);
void j_u64(uint64_t v);
void j_i64(int64_t v);
void j_bool(int v);
void j_double(double v);
void jk_cstr(const char *k, const char *v);
void jk_u64(const char *k, uint64_t v);
void jk_bool(const char *k, int v);
void j_base64(const void *v, size_t n);
/* Depth of the document being written (0: none or finished). */
int j_depth(void);

/* "3 B", "16.0 MiB" into buf. */
const char *human(uint64_t v, char *buf, size_t len);
void put_escaped(FILE *f, const void *p, size_t len);
size_t escaped_len(const char *p, size_t len);
void print_cell(const char *k, size_t klen, size_t width);
const char *field_name(uint64_t id);
/* A metadata value for humans: our msgpack maps decoded, else raw bytes. */
void print_meta_value(const uint8_t *v, size_t len);
/* A msgpack value as JSON: maps keyed by field ids get the fields' names. */
void j_mp_value(mc_mp_reader_t *r, int depth);

#endif /* MC_TOOLS_CLI_OUT_H */
