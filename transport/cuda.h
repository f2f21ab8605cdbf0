/*
 * cuda.h - the CUDA runtime loaded at run time (transport/cuda.c). Any
 * thread. Without libcudart or without a GPU every call reports it: no
 * link-time dependency, one binary for both kinds of machine.
 */
#ifndef MC_TRANSPORT_CUDA_H
#define MC_TRANSPORT_CUDA_H

#include <stddef.h>

#include "mooncake/status.h"

/* GPUs visible (0 without the runtime or a GPU; *why then says which). */
int te_cuda_gpus(const char **why);
/* "cuda:N" -> N. MC_ERR_INVALID_ARGUMENT otherwise. */
mc_status_t te_cuda_parse(const char *loc, int *gpu);
/* May [addr, addr+len) be registered as loc ("cuda:N")? MC_OK;
 * MC_ERR_DEVICE_NOT_FOUND (no runtime, no GPU N); MC_ERR_INVALID_ARGUMENT
 * (malformed location, or not memory of GPU N). Logged with the reason. */
mc_status_t te_cuda_check(const char *loc, const void *addr, size_t len);
/* cudaMemcpy with the direction taken from the pointers. MC_OK,
 * MC_ERR_DEVICE_NOT_FOUND, MC_ERR_TRANSFER_FAIL (logged). */
mc_status_t te_cuda_memcpy(void *dst, const void *src, size_t len);
/* NUMA node of GPU N's PCI device, -1 unknown. */
int te_cuda_numa_node(int gpu);

#endif /* MC_TRANSPORT_CUDA_H */
