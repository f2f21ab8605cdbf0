/*
 * metadata.h - transfer metadata: where segment descriptors and RPC
 * addresses of processes are published and looked up (docs/ARCHITECTURE.md §5).
 *
 * One vtable (mc_meta_ops_t), three backends chosen by connection string:
 *   "master://HOST:PORT"           the embedded KV of mooncake-master (Meta RPCs)
 *   "redis://HOST:PORT[/DB]"       Redis, through hiredis' async API on the reactor
 *   "http://HOST[:PORT]/PATH"      upstream's HTTP metadata protocol (mooncake-master's
 *                                  HTTP port, mooncake-http-metadata-server, upstream's
 *                                  mooncake_http_metadata_server), evhttp on the reactor
 * Keys are the caller's ("mc/<cluster>/seg/<name>", "mc/<cluster>/rpc/<name>");
 * values are opaque bytes (msgpack descriptors).
 *
 * Liveness: what a process publishes must not outlive it, and must survive a
 * restart of the metadata service. So each backend remembers the entries this
 * process put (its own keys, until deleted) and
 *  - master: pings the master every ping_interval with the owner id (entries
 *    are owned by it; the master deletes them when the owner expires), and
 *    re-puts its entries when the master's view version changes (a restarted
 *    master) or the ping answers NEED_REMOUNT;
 *  - redis: writes every entry with a TTL (ttl_us) and refreshes it every
 *    ttl/3; on reconnect it re-puts everything.
 *  - http: the protocol has no owners or TTLs (entries stay until deleted,
 *    as with upstream); the backend re-puts its entries every ttl/3, when the
 *    server answers again after a failure and when it restarted (our
 *    servers' X-Mooncake-Instance header).
 * A backend that cannot reach its service keeps retrying with backoff (no
 * crash, no busy loop); calls made meanwhile fail with a clear status
 * (MC_ERR_CONN_CLOSED / MC_ERR_RPC_TIMEOUT / MC_ERR_METADATA) within
 * call_timeout_us.
 *
 * Threads and callbacks: a backend belongs to one reactor. The async calls
 * must be made on that reactor's thread; they return an error (callback never
 * runs) or MC_INPROGRESS (callback runs exactly once, later, on the reactor,
 * never inside the call). The *_sync wrappers are for other threads and
 * block until the answer. mc_meta_close completes pending callbacks with
 * MC_ERR_CANCELED; call it from any thread but not from inside a callback of
 * the same backend.
 */
#ifndef MC_TRANSPORT_METADATA_H
#define MC_TRANSPORT_METADATA_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "reactor/reactor.h"
#include "util/auth.h"
#include "util/buf.h"

typedef struct mc_meta mc_meta_t;

typedef struct mc_meta_opts {
    uint64_t owner_hi, owner_lo;   /* owner id (the process's client id); not 0 */
    uint64_t call_timeout_us;      /* default 5 s */
    uint64_t ping_interval_us;     /* master backend; default 1 s */
    uint64_t ttl_us;               /* redis: entry TTL; http: re-put period x3; default 30 s */
    const char *http_token;        /* http: Bearer token; NULL = $MC_METADATA_HTTP_TOKEN */
    const mc_auth_key_t *auth_key; /* master: authenticate the connection (NULL = no) */
} mc_meta_opts_t;

void mc_meta_opts_init(mc_meta_opts_t *o);

/* value/len valid only during the callback. st: MC_OK, MC_ERR_NOT_FOUND, or
 * a failure. */
typedef void (*mc_meta_get_cb_t)(void *arg, mc_status_t st, const void *val, size_t len);
typedef void (*mc_meta_done_cb_t)(void *arg, mc_status_t st);

typedef struct mc_meta_entry {
    const char *key; /* NUL-terminated */
    const void *val;
    size_t len;
} mc_meta_entry_t;

/* entries valid only during the callback. */
typedef void (*mc_meta_list_cb_t)(void *arg, mc_status_t st, const mc_meta_entry_t *e, size_t n);

typedef struct mc_meta_ops {
    const char *name; /* "master", "redis", "http" */
    mc_status_t (*get)(mc_meta_t *m, const char *key, mc_meta_get_cb_t cb, void *arg);
    /* Publish (and remember as our own, for re-publishing). */
    mc_status_t (*put)(mc_meta_t *m, const char *key, const void *val, size_t len,
                       mc_meta_done_cb_t cb, void *arg);
    /* Delete (and forget). Deleting a missing key is MC_OK. */
    mc_status_t (*del)(mc_meta_t *m, const char *key, mc_meta_done_cb_t cb, void *arg);
    mc_status_t (*list)(mc_meta_t *m, const char *prefix, mc_meta_list_cb_t cb, void *arg);
    void (*close)(mc_meta_t *m);
    /* Optional (NULL: not supported): talk to another server from now on
     * (the master backend following a new HA leader). */
    mc_status_t (*retarget)(mc_meta_t *m, const char *host, uint16_t port);
} mc_meta_ops_t;

/* Every backend's struct starts with this. */
struct mc_meta {
    const mc_meta_ops_t *ops;
    mc_reactor_t *r;
};

/* Open the backend named by conn on reactor r. Returns at once (the
 * connection is made in the background); MC_ERR_INVALID_ARGUMENT for a
 * malformed or unknown connection string (logged naming it). Any thread. */
mc_status_t mc_meta_open(const char *conn, mc_reactor_t *r, const mc_meta_opts_t *o,
                         mc_meta_t **out);

/* Stop, cancel pending calls, and free. Safe on NULL. */
void mc_meta_close(mc_meta_t *m);

/* Point a master:// backend at another master (a new leader of HA masters;
 * the new leader has the entries from its journal, and the backend puts its
 * own again when it sees the new view version). Calls in flight fail with
 * MC_ERR_CONN_CLOSED. m's reactor thread. MC_OK; MC_ERR_NOT_SUPPORTED (a
 * backend without servers to move between: redis); the resolver's errors. */
mc_status_t mc_meta_retarget(mc_meta_t *m, const char *host, uint16_t port);

/* Blocking forms, from threads that are not m's reactor. get appends the
 * value to *val (MC_ERR_NOT_FOUND if absent); list calls fn for each entry
 * on the calling thread after the answer arrived. */
mc_status_t mc_meta_get_sync(mc_meta_t *m, const char *key, mc_buf_t *val);
mc_status_t mc_meta_put_sync(mc_meta_t *m, const char *key, const void *val, size_t len);
mc_status_t mc_meta_del_sync(mc_meta_t *m, const char *key);
mc_status_t mc_meta_list_sync(mc_meta_t *m, const char *prefix,
                              void (*fn)(void *arg, const char *key, const void *val, size_t len),
                              void *arg);

#endif /* MC_TRANSPORT_METADATA_H */
