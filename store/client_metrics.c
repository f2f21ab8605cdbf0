/*
 * client_metrics.c - a storage node's or standalone service's Prometheus
 * families (store/node_http.h serves them): its segment, whether the master
 * answers, and what its transfer engine moved and served (te_metrics).
 */
#include <stdatomic.h>

#include "store/client_int.h"
#include "transport/te.h"
#include "util/prom.h"

void store_node_metrics(mc_store_t *s, mc_buf_t *b)
{
    mc_prom_gauge(b, "mooncake_store_segment_capacity_bytes",
                  "Bytes of memory this process contributes to the pool (its segment; the "
                  "master's segment_allocated_bytes tells its use).",
                  s->cfg.global_segment_size);
    mc_prom_gauge(b, "mooncake_store_local_buffer_bytes",
                  "Bytes of this process's registered staging buffer.", s->cfg.local_buffer_size);
    mc_prom_gauge(b, "mooncake_store_master_up",
                  "1 while the master answers this process's pings, 0 after one failed.",
                  !atomic_load_explicit(&s->master_down, memory_order_relaxed));
    if (s->te != NULL)
        te_metrics(s->te, "mooncake_store", b);
}
