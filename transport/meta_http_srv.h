/*
 * meta_http_srv.h - the server side of upstream Mooncake's HTTP metadata
 * protocol, for an evhttp that something else owns (mooncake-master's HTTP
 * port, mooncake-http-metadata-server). The store behind it is a small
 * vtable, so the master serves its embedded metadata KV and the standalone
 * server a map of its own.
 *
 * The protocol (upstream's mooncake_http_metadata_server and the master's
 * embedded HTTP metadata server), on one path, "/metadata":
 *
 *   GET    /metadata?key=K   200 and the value as the body
 *                            (Content-Type: application/json, the value's
 *                            bytes whatever they are); 404 "metadata not found"
 *   PUT    /metadata?key=K   body = the value; 200 "metadata updated".
 *                            A key containing "rpc_meta" that exists already:
 *                            200 "metadata unchanged" for the same value, 400
 *                            "Duplicate rpc_meta key not allowed" otherwise
 *   DELETE /metadata?key=K   200 "metadata deleted"; 404 "metadata not found"
 *   no key / empty key       400 "Missing key parameter"
 *   other methods            405 "Method not allowed"
 *   with a token set         401 "unauthorized" unless the request carries
 *                            "Authorization: Bearer <token>"
 *                            (upstream's MC_METADATA_HTTP_TOKEN)
 *   with the cluster secret  PUT and DELETE answer 401 with the reason
 *                            unless they carry the proof of mc_http_auth_t
 *                            (X-Mooncake-Auth); GET stays open
 *   a budget exhausted       507 (the store's key or byte limit)
 *
 * One extension of ours (upstream's servers answer it 400, which our client
 * reports as NOT_SUPPORTED): GET /metadata?prefix=P lists the entries whose
 * key starts with P, as a msgpack array of [key bin, value bin] pairs
 * (Content-Type: application/x-msgpack).
 *
 * Every response carries "X-Mooncake-Instance: <hex>", an id of this server
 * run: a client seeing it change knows the server restarted (and lost what
 * it held) and publishes its entries again.
 *
 * All on the thread that runs the evhttp's event_base.
 */
#ifndef MC_TRANSPORT_META_HTTP_SRV_H
#define MC_TRANSPORT_META_HTTP_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "util/auth.h"

struct evhttp_request;
struct evbuffer;

/* HTTP authentication with the cluster's secret (util/auth.h), for the
 * endpoints that tell keys or change metadata. GET /auth (the callback
 * mc_http_auth_serve) answers {"nonce": HEX}: a fresh server nonce, valid
 * 30 s and once. The client picks its own nonce and sends
 * "X-Mooncake-Auth: SERVER_NONCE.CLIENT_NONCE.PROOF" (hex; PROOF = the
 * client proof of util/auth.h over the two nonces); the answer carries
 * "X-Mooncake-Auth-Server: PROOF" (the server's proof over the same nonces)
 * so the client knows whom it talked to. Anything else is 401 with the
 * reason; a replayed header finds its nonce used. The evhttp's thread only. */
typedef struct mc_http_auth mc_http_auth_t;

/* key is copied. NULL when out of memory. */
mc_http_auth_t *mc_http_auth_create(const mc_auth_key_t *key);
void mc_http_auth_destroy(mc_http_auth_t *a);
/* The "/auth" callback: evhttp_set_cb(http, "/auth", mc_http_auth_serve, a). */
void mc_http_auth_serve(struct evhttp_request *req, void *a);
/* 1 when req carries a valid proof (its challenge is used up) or a is NULL;
 * otherwise 0, after answering 401 with the reason. */
int mc_http_auth_admit(mc_http_auth_t *a, struct evhttp_request *req);

/* The store behind /metadata. Keys are byte strings without NUL. */
typedef struct mc_meta_http_store {
    void *ctx;
    /* Optional: 0 to serve the request, or 1 when it has been answered
     * already (a standby master answers 503). */
    int (*admit)(void *ctx, struct evhttp_request *req);
    /* *val is mc_malloc'd (NULL when len is 0): MC_OK, MC_ERR_NOT_FOUND, or an
     * error. */
    mc_status_t (*get)(void *ctx, const char *key, size_t klen, void **val, size_t *len);
    /* MC_OK; MC_ERR_LIMIT (a budget: 507); MC_ERR_INVALID_KEY /
     * MC_ERR_INVALID_PARAMS (400); other errors 500. */
    mc_status_t (*put)(void *ctx, const char *key, size_t klen, const void *val, size_t len);
    /* MC_OK, MC_ERR_NOT_FOUND, or an error. */
    mc_status_t (*del)(void *ctx, const char *key, size_t klen);
    /* Call fn for each entry under prefix (fn returns non-zero to stop). */
    mc_status_t (*list)(void *ctx, const char *prefix, size_t plen,
                        int (*fn)(void *arg, const char *key, size_t klen, const void *val,
                                  size_t len),
                        void *arg);
    /* Optional: send the answer of a PUT or DELETE (the master holds it
     * until its journal records are durable). NULL: sent at once. body is
     * the handler's; the callee sends or copies it before returning. */
    void (*reply_change)(void *ctx, struct evhttp_request *req, int code, const char *reason,
                         struct evbuffer *body);
    const char *token;    /* Bearer token required; NULL or "" = none */
    mc_http_auth_t *auth; /* the cluster secret: PUT and DELETE need its proof; NULL = none */
    uint64_t instance;    /* this run's id (X-Mooncake-Instance) */
} mc_meta_http_store_t;

/* The evhttp callback of "/metadata": evhttp_set_cb(http, "/metadata",
 * mc_meta_http_serve, store). The store must outlive the evhttp. */
void mc_meta_http_serve(struct evhttp_request *req, void *store);

/* Methods to allow on an evhttp that serves /metadata (GET, HEAD, PUT,
 * DELETE, and POST so that it gets upstream's 405 rather than evhttp's 501),
 * for evhttp_set_allowed_methods. Other paths of the same evhttp
 * should refuse PUT and DELETE themselves (mc_meta_http_read_only). */
uint16_t mc_meta_http_methods(void);

/* For the other handlers of such an evhttp: 1 when req is not a GET or HEAD,
 * after answering it 405. */
int mc_meta_http_read_only(struct evhttp_request *req);

/* A fresh instance id (time and pid mixed; not 0). */
uint64_t mc_meta_http_instance_id(void);

/* A store of its own for a standalone server: an in-memory map bounded by
 * max_keys entries and max_bytes bytes of values (upstream's
 * MC_METADATA_MAX_KEYS, 65536, and MC_METADATA_MAX_TOTAL_BYTES, 1 GiB; a
 * PUT beyond them answers 507). Not thread-safe: one evhttp's thread. token
 * is copied (NULL = none). NULL when out of memory. */
mc_meta_http_store_t *mc_meta_http_mem_create(uint64_t max_keys, uint64_t max_bytes,
                                              const char *token);
void mc_meta_http_mem_destroy(mc_meta_http_store_t *st);
/* Entries and bytes of values held. */
void mc_meta_http_mem_usage(const mc_meta_http_store_t *st, uint64_t *keys, uint64_t *bytes);

/* The standalone server (mooncake-http-metadata-server): its own reactor
 * thread, an evhttp serving /metadata on an in-memory store, /health, and
 * /auth with a key. */
typedef struct mc_meta_http_server mc_meta_http_server_t;

typedef struct mc_meta_http_server_opts {
    const char *bind_address;      /* "0.0.0.0" */
    uint16_t port;                 /* 8080; 0 = any free port */
    const char *token;             /* Bearer token required; NULL/"" = none */
    const mc_auth_key_t *auth_key; /* the cluster secret (copied): /auth, and PUT and
                                      DELETE need its proof; NULL = none */
    uint64_t max_keys;             /* 65536 */
    uint64_t max_bytes;            /* bytes of values, 1 GiB */
    uint64_t max_value;            /* longest PUT body, 16 MiB */
} mc_meta_http_server_opts_t;

void mc_meta_http_server_opts_init(mc_meta_http_server_opts_t *o);

/* Start serving. MC_OK; MC_ERR_SOCKET (the port cannot be bound: logged);
 * MC_ERR_NOMEM; the reactor's errors. Any thread but the server's. */
mc_status_t mc_meta_http_server_start(const mc_meta_http_server_opts_t *o,
                                      mc_meta_http_server_t **out);
uint16_t mc_meta_http_server_port(const mc_meta_http_server_t *s);
/* Stop and free. Safe on NULL. */
void mc_meta_http_server_stop(mc_meta_http_server_t *s);

#endif /* MC_TRANSPORT_META_HTTP_SRV_H */
