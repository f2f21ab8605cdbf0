/*
 * service.h - the store service: upstream's "real client" role in
 * mooncake-store-server. The node's store client (its segment, its master
 * connection, its transfer engine) serves the co-located ("dummy") clients
 * of its host: they share their buffers with it (memfd over the unix socket
 * "@mooncake_client_<port>.sock") and call it over the TCP control port
 * (127.0.0.1:<port>, 50052 by default); it runs their puts and gets with
 * its own client, reading and writing their shared buffers directly.
 * Protocol: svc_proto.h.
 *
 * Threads: start/stop from a thread that is not one of the store's
 * reactors. The service runs its RPC server on a reactor of its own, the
 * unix socket on a thread, and the calls on `threads` worker threads (the
 * store's sync API); stop waits for them all.
 */
#ifndef MC_STORE_SERVICE_H
#define MC_STORE_SERVICE_H

#include <stdint.h>

#include "mooncake/store.h"

typedef struct mc_store_service mc_store_service_t;

typedef struct mc_store_service_opts {
    const char *bind;        /* control port address; "127.0.0.1" */
    uint16_t port;           /* 50052 (as upstream's mooncake_client) */
    unsigned threads;        /* worker threads running the calls; 4 */
    unsigned max_sessions;   /* co-located clients at once; 256 */
    const char *group;       /* group admitted besides our user (name or number); NULL none */
    int prefer_local;        /* puts without preferred segments prefer our segment; 1 */
    const char *secret_file; /* the cluster's secret ([security] secret_file): every
                                control connection completes the challenge-response
                                first (rpc/README.md); NULL or "" = none */
} mc_store_service_opts_t;

void mc_store_service_opts_init(mc_store_service_opts_t *o);

/* Serve store's co-located clients. store must outlive the service. MC_OK;
 * MC_ERR_EXISTS (another service holds the port's unix socket: one service
 * per port and host), MC_ERR_SOCKET (the control port is taken, or cannot
 * listen), MC_ERR_INVALID_ARGUMENT (a bad option or group, a secret file that
 * cannot be used), MC_ERR_NOMEM;
 * each logged with the reason. */
mc_status_t mc_store_service_start(mc_store_t *store, const mc_store_service_opts_t *o,
                                   mc_store_service_t **out);

/* Stop: no new calls or sessions, wait for the calls in flight, end every
 * session (unmapping the clients' memory). NULL is fine. */
void mc_store_service_stop(mc_store_service_t *svc);

/* Counters (tests, benchmarks): sessions open now, and opened since start. */
void mc_store_service_sessions(mc_store_service_t *svc, unsigned *open, uint64_t *total);

#endif /* MC_STORE_SERVICE_H */
