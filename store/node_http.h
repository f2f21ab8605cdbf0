/*
 * node_http.h - the HTTP port of a storage node or standalone service
 * (mooncake-store-server's store.http_port, upstream's client port 9300):
 *
 *   /metrics   Prometheus text: what the node's transfer engine moved and
 *              served (per transport, per op), transfer latency histograms,
 *              its segment, its connections, process_* and
 *              mooncake_build_info (store/README.md lists the families)
 *   /health    "OK" (200) while the process serves
 *
 * The server runs on a thread of its own (its own libevent base), so a
 * scrape never waits behind transfers on the store's reactors.
 */
#ifndef MC_STORE_NODE_HTTP_H
#define MC_STORE_NODE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "mooncake/store.h"
#include "util/buf.h"

typedef struct mc_node_http mc_node_http_t;

/* Listen on bind:port (0 = a free port, written to *bound) and serve s
 * (which must outlive the server). MC_ERR_SOCKET with the reason in err
 * when the port cannot be bound, MC_ERR_NOMEM. */
mc_status_t mc_node_http_start(mc_store_t *s, const char *bind, uint16_t port, uint16_t *bound,
                               mc_node_http_t **out, char *err, size_t errlen);

/* Stop serving and free. NULL ok. */
void mc_node_http_stop(mc_node_http_t *h);

/* Append what /metrics serves of s's gets of disk-only objects
 * (mooncake_store_get_load_stage_seconds, by stage on the reader), for a
 * process without the port (perf/tier_bench). Any thread. */
void mc_node_get_load_stages(mc_store_t *s, mc_buf_t *b);

#endif /* MC_STORE_NODE_HTTP_H */
