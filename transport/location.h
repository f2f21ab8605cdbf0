/*
 * location.h - where a range of this process's memory lives, as a location
 * string of the transfer engine ("cpu:N", "cuda:N"), for registrations that
 * do not say (mc_te_register with NULL or "*"; the store client's
 * register_buffer). Any thread.
 */
#ifndef MC_TRANSPORT_LOCATION_H
#define MC_TRANSPORT_LOCATION_H

#include <stddef.h>

/* Write the location of [addr, addr+len) into out (room >= 16 bytes):
 * "cuda:N" when the CUDA driver says it is memory of GPU N (te_gpu_of),
 * else "cpu:N" with N the NUMA node of the first page (faulting it in if
 * it was never touched), "cpu:0" when that cannot be told. */
void te_location_detect(const void *addr, size_t len, char *out, size_t room);

#endif /* MC_TRANSPORT_LOCATION_H */
