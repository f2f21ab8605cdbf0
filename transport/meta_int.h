/*
 * meta_int.h - internals shared by the metadata backends (transport/
 * metadata.c, meta_master.c, meta_redis.c, meta_http.c): the backends' constructors, the
 * set of entries this process published ("own entries", re-published after a
 * service restart or an owner expiry) and the option defaults. Defined in
 * metadata.c except the two *_open functions.
 */
#ifndef MC_TRANSPORT_META_INT_H
#define MC_TRANSPORT_META_INT_H

#include <stddef.h>
#include <stdint.h>

#include "transport/metadata.h"
#include "util/sentinel_url.h"

mc_status_t meta_master_open(const char *host, uint16_t port, mc_reactor_t *r,
                             const mc_meta_opts_t *o, mc_meta_t **out);
/* path: the URL's path ("/metadata"), NUL-terminated. */
mc_status_t meta_http_open(const char *host, uint16_t port, const char *path, mc_reactor_t *r,
                           const mc_meta_opts_t *o, mc_meta_t **out);
mc_status_t meta_redis_open(const char *host, uint16_t port, int db, mc_reactor_t *r,
                            const mc_meta_opts_t *o, mc_meta_t **out);
/* The primary the Sentinels of u watch; u is copied. */
mc_status_t meta_redis_open_sentinel(const mc_sentinel_url_t *u, mc_reactor_t *r,
                                     const mc_meta_opts_t *o, mc_meta_t **out);

typedef struct meta_own meta_own_t;
meta_own_t *meta_own_create(void);
void meta_own_destroy(meta_own_t *s);
/* Remember key = val (copied); *gen (may be NULL) identifies this version. */
mc_status_t meta_own_set(meta_own_t *s, const char *key, const void *val, size_t len,
                         uint64_t *gen);
/* Forget key; with gen != 0 only if it is still at that version. */
void meta_own_forget(meta_own_t *s, const char *key, uint64_t gen);
/* The value remembered for key (borrowed until the next set/forget): 1, or 0
 * when key is not ours. */
int meta_own_get(meta_own_t *s, const char *key, const void **val, size_t *len);
size_t meta_own_count(const meta_own_t *s);
void meta_own_foreach(meta_own_t *s,
                      void (*fn)(void *arg, const char *key, const void *val, size_t len,
                                 uint64_t gen),
                      void *arg);

/* Copy src (NULL = all defaults) with zero durations replaced by defaults. */
void meta_fill_defaults(mc_meta_opts_t *dst, const mc_meta_opts_t *src);

#endif /* MC_TRANSPORT_META_INT_H */
