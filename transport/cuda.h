/*
 * cuda.h - the CUDA driver API (libcuda.so.1), loaded at run time
 * (transport/cuda.c). Any thread. Without the driver or without a GPU every
 * call reports it: no link-time dependency, one binary for both kinds of
 * machine.
 *
 * Why the driver API and not the runtime (libcudart): the driver is one
 * library with a stable C ABI that every GPU machine has (it comes with the
 * kernel driver), its pointer queries return scalars (cuPointerGetAttribute)
 * where the runtime's cudaPointerAttributes struct grew between releases,
 * and it exports GPU memory as dma-buf (cuMemGetHandleForAddressRange) for
 * RDMA registration without nvidia-peermem. Every value the library writes
 * goes into a slot with guard bytes behind it; a library that writes past
 * the documented size is refused, never trusted.
 *
 * Contexts: each GPU's primary context is retained on first use and made
 * current on the calling thread around a copy or an export (what
 * cudaSetDevice does for runtime users); the thread's own current context
 * (a host's, e.g. PyTorch's device) is put back afterwards.
 */
#ifndef MC_TRANSPORT_CUDA_H
#define MC_TRANSPORT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define TE_CUDA_MAX_GPUS 64

/* GPUs visible (0 without the driver or a GPU; *why then says which). */
int te_cuda_gpus(const char **why);
/* The library loaded ("" none). */
const char *te_cuda_library(void);
/* "cuda:N" -> N. MC_ERR_INVALID_ARGUMENT otherwise. */
mc_status_t te_cuda_parse(const char *loc, int *gpu);
/* Where addr lives: *gpu = the device ordinal of GPU memory, -1 for host
 * memory (or memory CUDA does not know, or no driver). MC_OK;
 * MC_ERR_NOT_SUPPORTED when the library misbehaved (wrote past a value). */
mc_status_t te_cuda_ptr_gpu(const void *addr, int *gpu);
/* May [addr, addr+len) be registered as loc ("cuda:N")? MC_OK;
 * MC_ERR_DEVICE_NOT_FOUND (no driver, no GPU N); MC_ERR_INVALID_ARGUMENT
 * (malformed location, not memory of GPU N, or the range runs past its
 * allocation); MC_ERR_NOT_SUPPORTED (the library misbehaved). Logged. */
mc_status_t te_cuda_check(const char *loc, const void *addr, size_t len);
/* cuMemcpy with the direction taken from the pointers (unified addressing),
 * the right GPU's context current. MC_OK, MC_ERR_DEVICE_NOT_FOUND,
 * MC_ERR_TRANSFER_FAIL (logged). */
mc_status_t te_cuda_memcpy(void *dst, const void *src, size_t len);
/* PCI bus id of GPU n ("0000:3d:00.0", lower case). MC_OK,
 * MC_ERR_DEVICE_NOT_FOUND. */
mc_status_t te_cuda_pci_bus_id(int gpu, char *buf, size_t len);
/* Does GPU n export memory as dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
 * and a driver with cuMemGetHandleForAddressRange)? 1 / 0. */
int te_cuda_dmabuf_supported(int gpu);
/* A dma-buf fd for the allocation holding [addr, addr+len) and addr's
 * offset in it; the caller closes *fd. MC_OK; MC_ERR_NOT_SUPPORTED (no
 * dma-buf export), MC_ERR_INVALID_ARGUMENT (not GPU memory), logged. */
mc_status_t te_cuda_dmabuf(const void *addr, size_t len, int *fd, uint64_t *offset);
/* GPU memory for tools and benchmarks (cuMemAlloc_v2 on GPU n, its
 * context made current around it): MC_OK and *out; MC_ERR_DEVICE_NOT_FOUND
 * (no driver, no GPU n), MC_ERR_NOMEM; logged. te_cuda_free(NULL) is a no-op. */
mc_status_t te_cuda_alloc(int gpu, size_t len, void **out);
void te_cuda_free(void *p);
/* For the EMULATED NIC only, which stands for a NIC plus nvidia-peermem: a
 * host view of GPU memory when the loaded library offers one (the tests'
 * fake libcuda does; a real driver does not: NULL). */
void *te_cuda_host_view(const void *addr, size_t len);

#endif /* MC_TRANSPORT_CUDA_H */
