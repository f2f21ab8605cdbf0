/* topology.c - NUMA node discovery and thread binding for reactors. See topology.h. */
#include "reactor/topology.h"

#include <errno.h>
#include <numa.h>
#include <string.h>

#include "reactor/reactor.h"
#include "util/log.h"

unsigned reactor_numa_nodes(int *nodes, unsigned cap)
{
    if (numa_available() < 0)
        return 0;
    struct bitmask *cpus = numa_allocate_cpumask();
    unsigned n = 0;
    int max = numa_max_node();
    for (int node = 0; node <= max; node++) {
        if (!numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node) ||
            numa_node_to_cpus(node, cpus) != 0)
            continue;
        int usable = 0;
        for (unsigned c = 0; c < cpus->size && !usable; c++)
            usable = numa_bitmask_isbitset(cpus, c) && numa_bitmask_isbitset(numa_all_cpus_ptr, c);
        if (!usable)
            continue;
        if (nodes != NULL) {
            if (n == cap)
                break;
            nodes[n] = node;
        }
        n++;
    }
    numa_free_cpumask(cpus);
    return n;
}

void reactor_numa_bind(int node, const char *who)
{
    if (numa_run_on_node(node) != 0) {
        MC_WARN(REACTOR, "%s: cannot pin the thread to NUMA node %d, running unpinned: %s", who,
                node, strerror(errno));
        return;
    }
    numa_set_preferred(node);
    MC_DEBUG(REACTOR, "%s: pinned to NUMA node %d", who, node);
}

unsigned mc_numa_node_count(void)
{
    unsigned n = reactor_numa_nodes(NULL, 0);
    return n > 0 ? n : 1;
}
