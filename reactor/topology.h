/*
 * topology.h - the few libnuma calls the reactors need (internal to reactor/).
 *
 * A "usable" node is one on which this process may allocate memory and that
 * has at least one CPU this process may run on (cpusets and containers can
 * hide nodes). Without libnuma support (numa_available() < 0) there are none,
 * and reactors run unpinned.
 */
#ifndef MC_REACTOR_TOPOLOGY_H
#define MC_REACTOR_TOPOLOGY_H

/* Usable nodes in ascending order: fills nodes[0 .. min(n, cap)) when nodes is
 * not NULL and returns that count; with nodes NULL returns n. Any thread. */
unsigned reactor_numa_nodes(int *nodes, unsigned cap);

/* Run the calling thread on node's CPUs and prefer node for its allocations.
 * Failures are logged (WARN) and otherwise ignored: an unpinned reactor still
 * works. */
void reactor_numa_bind(int node, const char *who);

#endif /* MC_REACTOR_TOPOLOGY_H */
