/*
 * cuda.c - the CUDA runtime, loaded at run time (dlopen), so one binary
 * runs with and without GPUs. The one place CUDA's error convention
 * (cudaError_t + cudaGetErrorString) becomes mc_status_t.
 *
 * The library is looked up once (thread-safe): $MC_CUDA_LIBRARY when set,
 * else libcudart.so, libcudart.so.12, libcudart.so.11.0. Without it, or
 * without a GPU, every CUDA request fails with MC_ERR_DEVICE_NOT_FOUND and
 * a message saying which of the two is missing.
 *
 * Nothing here has run on a GPU (none on the build machines): the absence
 * path is what the tests exercise.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cuda.h"
#include "util/conf.h"
#include "util/log.h"

/* The few runtime entry points used, by their C ABI (cuda_runtime_api.h):
 * int is cudaError_t (0 = cudaSuccess). */
typedef int (*get_count_fn)(int *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*bus_id_fn)(char *, int, int);
typedef const char *(*err_str_fn)(int);
typedef int (*ptr_attr_fn)(void *, const void *);

/* cudaPointerAttributes as of CUDA 10+: {type, device, devicePointer,
 * hostPointer}; only type and device are read. */
typedef struct cuda_ptr_attr {
    int type; /* 0 unregistered, 1 host, 2 device, 3 managed */
    int device;
    void *device_ptr, *host_ptr;
} cuda_ptr_attr_t;

#define CUDA_MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: direction from the pointers (UVA) */

static struct {
    pthread_once_t once;
    void *lib;
    int ngpus;
    char why[200]; /* why CUDA is unusable, "" when usable */
    get_count_fn get_count;
    memcpy_fn memcpy;
    bus_id_fn bus_id;
    err_str_fn err_str;
    ptr_attr_fn ptr_attr;
} g = {.once = PTHREAD_ONCE_INIT};

static void load(void)
{
    const char *env = mc_conf_env_str("MC_CUDA_LIBRARY"); /* the loader's configuration */
    static const char *const names[] = {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"};
    if (env != NULL) {
        g.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && g.lib == NULL; i++)
            g.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (g.lib == NULL) {
        snprintf(g.why, sizeof(g.why), "the CUDA runtime (%s) is not installed",
                 env && *env ? env : "libcudart.so");
        return;
    }
    g.get_count = (get_count_fn)dlsym(g.lib, "cudaGetDeviceCount");
    g.memcpy = (memcpy_fn)dlsym(g.lib, "cudaMemcpy");
    g.bus_id = (bus_id_fn)dlsym(g.lib, "cudaDeviceGetPCIBusId");
    g.err_str = (err_str_fn)dlsym(g.lib, "cudaGetErrorString");
    g.ptr_attr = (ptr_attr_fn)dlsym(g.lib, "cudaPointerGetAttributes");
    if (!g.get_count || !g.memcpy || !g.bus_id || !g.err_str || !g.ptr_attr) {
        snprintf(g.why, sizeof(g.why), "the CUDA runtime lacks an expected symbol");
        return;
    }
    int n = 0, rc = g.get_count(&n);
    if (rc != 0 || n <= 0) {
        snprintf(g.why, sizeof(g.why), "no GPU (cudaGetDeviceCount: %s)",
                 rc != 0 ? g.err_str(rc) : "0 devices");
        return;
    }
    g.ngpus = n;
    MC_INFO(TRANSPORT, "CUDA runtime loaded: %d GPU(s)", n);
}

int te_cuda_gpus(const char **why)
{
    pthread_once(&g.once, load);
    if (why != NULL)
        *why = g.why;
    return g.ngpus;
}

mc_status_t te_cuda_parse(const char *loc, int *gpu)
{
    if (strncmp(loc, "cuda:", 5) != 0)
        return MC_ERR_INVALID_ARGUMENT;
    char *end = NULL;
    long n = strtol(loc + 5, &end, 10);
    if (end == loc + 5 || *end != '\0' || n < 0 || n > 1023)
        return MC_ERR_INVALID_ARGUMENT;
    *gpu = (int)n;
    return MC_OK;
}

mc_status_t te_cuda_check(const char *loc, const void *addr, size_t len)
{
    int gpu;
    if (te_cuda_parse(loc, &gpu) != MC_OK) {
        MC_ERROR(TRANSPORT, "bad memory location '%s' (expected cuda:N)", loc);
        return MC_ERR_INVALID_ARGUMENT;
    }
    const char *why;
    int n = te_cuda_gpus(&why);
    if (n == 0) {
        MC_ERROR(TRANSPORT, "cannot register %s memory: %s", loc, why);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    if (gpu >= n) {
        MC_ERROR(TRANSPORT, "cannot register %s memory: there are %d GPU(s)", loc, n);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    cuda_ptr_attr_t a;
    memset(&a, 0, sizeof(a));
    int rc = g.ptr_attr(&a, addr);
    if (rc != 0 || a.type != 2 || a.device != gpu) {
        MC_ERROR(TRANSPORT, "cannot register %p+%zu as %s: it is not memory of GPU %d (%s)", addr,
                 len, loc, gpu, rc != 0 ? g.err_str(rc) : "pointer attributes differ");
        return MC_ERR_INVALID_ARGUMENT;
    }
    return MC_OK;
}

mc_status_t te_cuda_memcpy(void *dst, const void *src, size_t len)
{
    const char *why;
    if (te_cuda_gpus(&why) == 0) {
        MC_ERROR(TRANSPORT, "cannot copy GPU memory: %s", why);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    int rc = g.memcpy(dst, src, len, CUDA_MEMCPY_DEFAULT);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cudaMemcpy of %zu bytes failed: %s", len, g.err_str(rc));
        return MC_ERR_TRANSFER_FAIL;
    }
    return MC_OK;
}

int te_cuda_numa_node(int gpu)
{
    char bus[32], path[128];
    if (te_cuda_gpus(NULL) <= gpu || g.bus_id(bus, (int)sizeof(bus), gpu) != 0)
        return -1;
    for (char *p = bus; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
    FILE *f = fopen(path, "r");
    int node = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &node) != 1)
            node = -1;
        fclose(f);
    }
    return node;
}
