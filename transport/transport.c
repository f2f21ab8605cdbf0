/*
 * transport.c - the table of transports (transport.h), in the order of
 * preference. A new transport adds its row here.
 */
#include <string.h>

#include "transport/transport.h"

const te_transport_ops_t *const te_transports[TE_TP_COUNT] = {
    [TE_TP_LOCAL] = &te_local_ops,
    [TE_TP_SHM] = &te_shm_ops,
    [TE_TP_RDMA] = &te_rdma_ops,
    [TE_TP_TCP] = &te_tcp_ops,
};

int te_tp_find(const char *name)
{
    for (int i = 0; i < TE_TP_COUNT; i++)
        if (strcmp(te_transports[i]->name, name) == 0)
            return i;
    return -1;
}
