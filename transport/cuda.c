/*
 * cuda.c - the CUDA driver API, loaded at run time (dlopen), so one binary
 * runs with and without GPUs. The one place CUDA's error convention
 * (CUresult + cuGetErrorString) becomes mc_status_t.
 *
 * The library is looked up once (thread-safe): $MC_CUDA_LIBRARY when set,
 * else libcuda.so.1 (what the NVIDIA driver installs), else libcuda.so.
 * Without it, or without a GPU, every CUDA request fails with
 * MC_ERR_DEVICE_NOT_FOUND and a message saying which of the two is missing.
 *
 * Entry points are taken by the names cuda.h maps the API to (the _v2
 * forms where the ABI changed), so a pre-CUDA-11 driver without
 * cuDevicePrimaryCtxRelease_v2 is refused rather than called with the
 * wrong ABI. cuMemGetHandleForAddressRange (11.7+) is optional: without it
 * there is no dma-buf export.
 *
 * Never run on a GPU here: the tests load a fake driver
 * (test/integration/helpers/fake_libcuda.c) whose "device memory" the CPU
 * cannot touch, so a plain memcpy on it crashes a test.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cuda.h"
#include "util/conf.h"
#include "util/log.h"

/* The driver ABI (cuda.h): CUresult 0 = CUDA_SUCCESS; handles are ints and
 * pointers; device addresses are 64-bit integers. */
typedef int cu_result_t;
typedef int cu_device_t;
typedef void *cu_context_t;
typedef unsigned long long cu_deviceptr_t;

#define CU_ERROR_INVALID_VALUE 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2    /* writes a CUmemorytype (unsigned int) */
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9 /* writes an int */
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

typedef cu_result_t (*init_fn)(unsigned);
typedef cu_result_t (*count_fn)(int *);
typedef cu_result_t (*dev_get_fn)(cu_device_t *, int);
typedef cu_result_t (*dev_attr_fn)(int *, int, cu_device_t);
typedef cu_result_t (*bus_id_fn)(char *, int, cu_device_t);
typedef cu_result_t (*ctx_retain_fn)(cu_context_t *, cu_device_t);
typedef cu_result_t (*ctx_set_fn)(cu_context_t);
typedef cu_result_t (*ctx_get_fn)(cu_context_t *);
typedef cu_result_t (*ptr_attr_fn)(void *, int, cu_deviceptr_t);
typedef cu_result_t (*range_fn)(cu_deviceptr_t *, size_t *, cu_deviceptr_t);
typedef cu_result_t (*handle_fn)(void *, cu_deviceptr_t, size_t, int, unsigned long long);
typedef cu_result_t (*memcpy_fn)(cu_deviceptr_t, cu_deviceptr_t, size_t);
typedef cu_result_t (*err_str_fn)(cu_result_t, const char **);
typedef void *(*host_view_fn)(cu_deviceptr_t, size_t);
typedef cu_result_t (*alloc_fn)(cu_deviceptr_t *, size_t);
typedef cu_result_t (*free_fn)(cu_deviceptr_t);

static struct {
    pthread_once_t once;
    pthread_mutex_t mu; /* ctx[] */
    void *lib;
    char path[128];
    int ngpus;
    char why[200]; /* why CUDA is unusable, "" when usable */
    init_fn init;
    count_fn count;
    dev_get_fn dev_get;
    dev_attr_fn dev_attr;
    bus_id_fn bus_id;
    ctx_retain_fn ctx_retain;
    ctx_set_fn ctx_set;
    ctx_get_fn ctx_get;
    ptr_attr_fn ptr_attr;
    range_fn range;
    handle_fn handle; /* optional */
    memcpy_fn memcpy;
    err_str_fn err_str;
    host_view_fn host_view; /* the tests' fake only */
    alloc_fn alloc;         /* tools and benchmarks */
    free_fn free;
    cu_context_t ctx[TE_CUDA_MAX_GPUS];
} g = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------- guarded outputs */

/* Every value the library writes lands in a slot of GUARD_SLOT bytes filled
 * with a canary: bytes beyond the documented size must still hold it after
 * the call. A library that writes more (another ABI than the one coded
 * here) is refused: its values are not trusted, and nothing of ours was
 * overwritten, because the slot is ours. */
#define GUARD_SLOT 64
#define CANARY 0xa5

typedef struct slot {
    _Alignas(8) unsigned char b[GUARD_SLOT];
} slot_t;

static void slot_arm(slot_t *s)
{
    memset(s->b, CANARY, sizeof(s->b));
}

static int slot_ok(const slot_t *s, size_t size, const char *what)
{
    for (size_t i = size; i < sizeof(s->b); i++) {
        if (s->b[i] != CANARY) {
            MC_ERROR(TRANSPORT,
                     "%s: the CUDA library (%s) wrote past the %zu-byte value (byte %zu changed): "
                     "its ABI is not the one this build knows; refusing it",
                     what, g.path, size, i);
            return 0;
        }
    }
    return 1;
}

static const char *cu_err(cu_result_t rc)
{
    const char *s = NULL;
    slot_t o;
    slot_arm(&o);
    if (g.err_str != NULL && g.err_str(rc, (const char **)(void *)o.b) == 0 &&
        slot_ok(&o, sizeof(s), "cuGetErrorString"))
        memcpy(&s, o.b, sizeof(s));
    return s != NULL ? s : "unknown CUDA error";
}

/* An int-sized value through a guarded slot: 0 and *v; -1 on a CUDA error
 * (*rc set); -2 when the library wrote past it. */
static int get_int(cu_result_t (*call)(void *, void *), void *arg, int *v, cu_result_t *rc,
                   const char *what)
{
    slot_t o;
    slot_arm(&o);
    *rc = call(o.b, arg);
    if (*rc != 0)
        return -1;
    if (!slot_ok(&o, sizeof(int), what))
        return -2;
    memcpy(v, o.b, sizeof(int));
    return 0;
}

/* ------------------------------------------------------------- loading */

static void *sym(const char *name)
{
    return dlsym(g.lib, name);
}

static void load(void)
{
    const char *env = mc_conf_env_str("MC_CUDA_LIBRARY"); /* the loader's configuration */
    static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
    if (env != NULL) {
        snprintf(g.path, sizeof(g.path), "%s", env);
        g.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && g.lib == NULL; i++) {
            snprintf(g.path, sizeof(g.path), "%s", names[i]);
            g.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (g.lib == NULL) {
        snprintf(g.why, sizeof(g.why), "the CUDA driver library (%s) is not installed",
                 env ? env : "libcuda.so.1");
        g.path[0] = '\0';
        return;
    }
    g.init = (init_fn)sym("cuInit");
    g.count = (count_fn)sym("cuDeviceGetCount");
    g.dev_get = (dev_get_fn)sym("cuDeviceGet");
    g.dev_attr = (dev_attr_fn)sym("cuDeviceGetAttribute");
    g.bus_id = (bus_id_fn)sym("cuDeviceGetPCIBusId");
    g.ctx_retain = (ctx_retain_fn)sym("cuDevicePrimaryCtxRetain");
    g.ctx_set = (ctx_set_fn)sym("cuCtxSetCurrent");
    g.ctx_get = (ctx_get_fn)sym("cuCtxGetCurrent");
    g.ptr_attr = (ptr_attr_fn)sym("cuPointerGetAttribute");
    g.range = (range_fn)sym("cuMemGetAddressRange_v2");
    g.memcpy = (memcpy_fn)sym("cuMemcpy");
    g.err_str = (err_str_fn)sym("cuGetErrorString");
    g.handle = (handle_fn)sym("cuMemGetHandleForAddressRange");
    g.host_view = (host_view_fn)sym("mcFakeCudaHostView");
    g.alloc = (alloc_fn)sym("cuMemAlloc_v2");
    g.free = (free_fn)sym("cuMemFree_v2");
    /* the _v2 release marks a CUDA 11+ driver (the ABI coded here) */
    if (!g.init || !g.count || !g.dev_get || !g.dev_attr || !g.bus_id || !g.ctx_retain ||
        !g.ctx_set || !g.ctx_get || !g.ptr_attr || !g.range || !g.memcpy || !g.err_str ||
        !sym("cuDevicePrimaryCtxRelease_v2")) {
        snprintf(g.why, sizeof(g.why),
                 "the CUDA library %s lacks an expected symbol (not a CUDA 11+ driver)", g.path);
        return;
    }
    cu_result_t rc = g.init(0);
    if (rc != 0) {
        snprintf(g.why, sizeof(g.why), "no GPU (cuInit: %s)", cu_err(rc));
        return;
    }
    int n = 0;
    slot_t o;
    slot_arm(&o);
    rc = g.count((int *)(void *)o.b);
    if (rc == 0 && !slot_ok(&o, sizeof(int), "cuDeviceGetCount")) {
        snprintf(g.why, sizeof(g.why), "the CUDA library %s has another ABI (see the log)", g.path);
        return;
    }
    if (rc == 0)
        memcpy(&n, o.b, sizeof(n));
    if (rc != 0 || n <= 0) {
        snprintf(g.why, sizeof(g.why), "no GPU (cuDeviceGetCount: %s)",
                 rc != 0 ? cu_err(rc) : "0 devices");
        return;
    }
    g.ngpus = n > TE_CUDA_MAX_GPUS ? TE_CUDA_MAX_GPUS : n;
    MC_INFO(TRANSPORT, "CUDA driver %s loaded: %d GPU(s)%s", g.path, g.ngpus,
            g.host_view ? " (a FAKE driver for tests: host memory stands for GPU memory)" : "");
}

/* dl_iterate_phdr callback: the loader's count of objects loaded so far
 * (the first entry carries it; no need to walk the rest). */
static int loads_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1;
}

int te_cuda_in_process(void)
{
    static _Atomic int seen;
    /* the loads count of the last "not loaded" answer (+1; 0 = none yet) */
    static _Atomic unsigned long long absent_at;
    if (atomic_load_explicit(&seen, memory_order_acquire))
        return te_cuda_gpus(NULL) > 0;
    /* GPU memory exists only where the driver was loaded (by the host or by
     * us): without it there is nothing to ask, and nothing is loaded. The
     * loader is asked again only when something was loaded since its last
     * "no": dlopen(RTLD_NOLOAD) searches the file system (~100 us, under
     * the loader's lock), and the store asks this on every get and put. */
    unsigned long long loads = 0;
    dl_iterate_phdr(loads_cb, &loads);
    if (loads != 0 && atomic_load_explicit(&absent_at, memory_order_relaxed) == loads + 1)
        return 0;
    const char *env = mc_conf_env_str("MC_CUDA_LIBRARY");
    void *h = dlopen(env != NULL ? env : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) {
        /* a load after `loads` was read changes the count: asked again */
        if (loads != 0)
            atomic_store_explicit(&absent_at, loads + 1, memory_order_relaxed);
        return 0;
    }
    dlclose(h);
    atomic_store_explicit(&seen, 1, memory_order_release);
    return te_cuda_gpus(NULL) > 0;
}

int te_cuda_gpus(const char **why)
{
    pthread_once(&g.once, load);
    if (why != NULL)
        *why = g.why;
    return g.ngpus;
}

const char *te_cuda_library(void)
{
    pthread_once(&g.once, load);
    return g.lib != NULL ? g.path : "";
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

/* ------------------------------------------------------------ contexts */

/* GPU n's primary context (retained once per process, kept for its life)
 * current on this thread for one operation; *prev gets what was current, for
 * use_gpu_end: the caller's thread may be a host thread with its own current
 * context (PyTorch's device), which must be left as it was. */
static mc_status_t use_gpu(int n, cu_context_t *prev)
{
    if (n < 0 || n >= g.ngpus)
        return MC_ERR_DEVICE_NOT_FOUND;
    pthread_mutex_lock(&g.mu);
    cu_result_t rc = 0;
    if (g.ctx[n] == NULL) {
        slot_t o, d;
        slot_arm(&o);
        slot_arm(&d);
        cu_device_t dev = 0;
        rc = g.dev_get((cu_device_t *)(void *)d.b, n);
        if (rc == 0 && slot_ok(&d, sizeof(cu_device_t), "cuDeviceGet")) {
            memcpy(&dev, d.b, sizeof(dev));
            rc = g.ctx_retain((cu_context_t *)(void *)o.b, dev);
            if (rc == 0 && slot_ok(&o, sizeof(cu_context_t), "cuDevicePrimaryCtxRetain"))
                memcpy(&g.ctx[n], o.b, sizeof(cu_context_t));
            else if (rc == 0)
                rc = -1;
        } else if (rc == 0) {
            rc = -1;
        }
    }
    cu_context_t c = g.ctx[n];
    pthread_mutex_unlock(&g.mu);
    if (c == NULL) {
        MC_ERROR(TRANSPORT, "cannot retain GPU %d's primary context: %s", n,
                 rc > 0 ? cu_err(rc) : "the library misbehaved");
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    slot_t cur;
    slot_arm(&cur);
    rc = g.ctx_get((cu_context_t *)(void *)cur.b);
    if (rc != 0 || !slot_ok(&cur, sizeof(cu_context_t), "cuCtxGetCurrent")) {
        MC_ERROR(TRANSPORT, "cuCtxGetCurrent: %s", rc ? cu_err(rc) : "the library misbehaved");
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    memcpy(prev, cur.b, sizeof(*prev));
    if (*prev == c)
        return MC_OK;
    rc = g.ctx_set(c);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cuCtxSetCurrent(GPU %d): %s", n, cu_err(rc));
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    return MC_OK;
}

static void use_gpu_end(int n, cu_context_t prev)
{
    if (prev != g.ctx[n])
        g.ctx_set(prev); /* what the thread had, NULL included */
}

/* ------------------------------------------------------------ pointers */

typedef struct ptr_q {
    int attr;
    cu_deviceptr_t p;
} ptr_q_t;

static cu_result_t call_ptr_attr(void *out, void *arg)
{
    ptr_q_t *q = arg;
    return g.ptr_attr(out, q->attr, q->p);
}

mc_status_t te_cuda_ptr_gpu(const void *addr, int *gpu)
{
    *gpu = -1;
    if (te_cuda_gpus(NULL) == 0)
        return MC_OK;
    ptr_q_t q = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (cu_deviceptr_t)(uintptr_t)addr};
    int type = 0;
    cu_result_t rc;
    int r = get_int(call_ptr_attr, &q, &type, &rc, "cuPointerGetAttribute(MEMORY_TYPE)");
    if (r == -2)
        return MC_ERR_NOT_SUPPORTED;
    if (r == -1 || type != CU_MEMORYTYPE_DEVICE)
        return MC_OK; /* INVALID_VALUE: memory CUDA does not know (host) */
    q.attr = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    int ord = -1;
    r = get_int(call_ptr_attr, &q, &ord, &rc, "cuPointerGetAttribute(DEVICE_ORDINAL)");
    if (r == -2)
        return MC_ERR_NOT_SUPPORTED;
    if (r == -1) {
        MC_ERROR(TRANSPORT, "cuPointerGetAttribute(%p, DEVICE_ORDINAL): %s", addr, cu_err(rc));
        return MC_ERR_INVALID_ARGUMENT;
    }
    *gpu = ord;
    return MC_OK;
}

/* The allocation holding addr. */
static mc_status_t alloc_range(const void *addr, cu_deviceptr_t *base, size_t *size)
{
    slot_t b, s;
    slot_arm(&b);
    slot_arm(&s);
    cu_result_t rc = g.range((cu_deviceptr_t *)(void *)b.b, (size_t *)(void *)s.b,
                             (cu_deviceptr_t)(uintptr_t)addr);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cuMemGetAddressRange(%p): %s", addr, cu_err(rc));
        return MC_ERR_INVALID_ARGUMENT;
    }
    if (!slot_ok(&b, sizeof(*base), "cuMemGetAddressRange") ||
        !slot_ok(&s, sizeof(*size), "cuMemGetAddressRange"))
        return MC_ERR_NOT_SUPPORTED;
    memcpy(base, b.b, sizeof(*base));
    memcpy(size, s.b, sizeof(*size));
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
    int where = -1;
    mc_status_t st = te_cuda_ptr_gpu(addr, &where);
    if (st != MC_OK)
        return st;
    if (where != gpu) {
        MC_ERROR(TRANSPORT, "cannot register %p+%zu as %s: it is %s", addr, len, loc,
                 where < 0 ? "not GPU memory" : "memory of another GPU");
        return MC_ERR_INVALID_ARGUMENT;
    }
    cu_deviceptr_t base;
    size_t size;
    if ((st = alloc_range(addr, &base, &size)) != MC_OK)
        return st;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (a + len < a || a + len > base + size) {
        MC_ERROR(TRANSPORT, "cannot register %p+%zu as %s: its allocation ends at 0x%llx", addr,
                 len, loc, (unsigned long long)(base + size));
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
    int gd = -1, gs = -1;
    if (te_cuda_ptr_gpu(dst, &gd) != MC_OK || te_cuda_ptr_gpu(src, &gs) != MC_OK)
        return MC_ERR_TRANSFER_FAIL;
    /* a context of a GPU involved must be current (the copy runs on it) */
    int gpu = gd >= 0 ? gd : gs >= 0 ? gs : 0;
    cu_context_t prev;
    if (use_gpu(gpu, &prev) != MC_OK)
        return MC_ERR_DEVICE_NOT_FOUND;
    cu_result_t rc = g.memcpy((cu_deviceptr_t)(uintptr_t)dst, (cu_deviceptr_t)(uintptr_t)src, len);
    use_gpu_end(gpu, prev);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cuMemcpy of %zu bytes failed: %s", len, cu_err(rc));
        return MC_ERR_TRANSFER_FAIL;
    }
    return MC_OK;
}

mc_status_t te_cuda_pci_bus_id(int gpu, char *buf, size_t len)
{
    if (gpu < 0 || gpu >= te_cuda_gpus(NULL) || len < 2)
        return MC_ERR_DEVICE_NOT_FOUND;
    char out[GUARD_SLOT];
    memset(out, CANARY, sizeof(out));
    /* told 32 bytes: the id is 13 characters and NUL */
    cu_result_t rc = g.bus_id(out, 32, gpu);
    if (rc != 0 || memchr(out, '\0', 32) == NULL) {
        MC_WARN(TRANSPORT, "cuDeviceGetPCIBusId(%d): %s", gpu,
                rc != 0 ? cu_err(rc) : "not a string");
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    for (size_t i = 32; i < sizeof(out); i++)
        if ((unsigned char)out[i] != CANARY)
            return MC_ERR_NOT_SUPPORTED;
    size_t k = 0;
    for (; out[k] != '\0' && k + 1 < len; k++)
        buf[k] = (char)(out[k] >= 'A' && out[k] <= 'F' ? out[k] - 'A' + 'a' : out[k]);
    buf[k] = '\0';
    return MC_OK;
}

typedef struct dev_q {
    int attr;
    int gpu;
} dev_q_t;

static cu_result_t call_dev_attr(void *out, void *arg)
{
    dev_q_t *q = arg;
    return g.dev_attr(out, q->attr, q->gpu);
}

int te_cuda_dmabuf_supported(int gpu)
{
    if (gpu < 0 || gpu >= te_cuda_gpus(NULL) || g.handle == NULL)
        return 0;
    dev_q_t q = {CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, gpu};
    int v = 0;
    cu_result_t rc;
    if (get_int(call_dev_attr, &q, &v, &rc, "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)") != 0)
        return 0;
    return v != 0;
}

mc_status_t te_cuda_dmabuf(const void *addr, size_t len, int *fd, uint64_t *offset)
{
    int gpu = -1;
    mc_status_t st = te_cuda_ptr_gpu(addr, &gpu);
    if (st != MC_OK)
        return st;
    if (gpu < 0)
        return MC_ERR_INVALID_ARGUMENT;
    if (!te_cuda_dmabuf_supported(gpu))
        return MC_ERR_NOT_SUPPORTED;
    cu_deviceptr_t base;
    size_t size;
    if ((st = alloc_range(addr, &base, &size)) != MC_OK)
        return st;
    cu_context_t prev;
    if (use_gpu(gpu, &prev) != MC_OK)
        return MC_ERR_DEVICE_NOT_FOUND;
    /* the handle covers the whole allocation (the driver wants its exact
     * bounds); the registration takes addr's part of it */
    slot_t o;
    slot_arm(&o);
    cu_result_t rc = g.handle(o.b, base, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    use_gpu_end(gpu, prev);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cuMemGetHandleForAddressRange(0x%llx, %zu): %s",
                 (unsigned long long)base, size, cu_err(rc));
        return MC_ERR_NOT_SUPPORTED;
    }
    if (!slot_ok(&o, sizeof(int), "cuMemGetHandleForAddressRange"))
        return MC_ERR_NOT_SUPPORTED;
    memcpy(fd, o.b, sizeof(int));
    *offset = (uint64_t)(uintptr_t)addr - base;
    (void)len;
    return MC_OK;
}

void *te_cuda_host_view(const void *addr, size_t len)
{
    if (te_cuda_gpus(NULL) == 0 || g.host_view == NULL)
        return NULL;
    return g.host_view((cu_deviceptr_t)(uintptr_t)addr, len);
}

mc_status_t te_cuda_alloc(int gpu, size_t len, void **out)
{
    const char *why;
    if (te_cuda_gpus(&why) == 0 || g.alloc == NULL) {
        MC_ERROR(TRANSPORT, "cannot allocate GPU memory: %s",
                 g.alloc == NULL && why[0] == '\0' ? "the library has no cuMemAlloc_v2" : why);
        return MC_ERR_DEVICE_NOT_FOUND;
    }
    cu_context_t prev;
    if (use_gpu(gpu, &prev) != MC_OK)
        return MC_ERR_DEVICE_NOT_FOUND;
    slot_t o;
    slot_arm(&o);
    cu_result_t rc = g.alloc((cu_deviceptr_t *)(void *)o.b, len);
    use_gpu_end(gpu, prev);
    if (rc != 0) {
        MC_ERROR(TRANSPORT, "cuMemAlloc of %zu bytes on GPU %d: %s", len, gpu, cu_err(rc));
        return MC_ERR_NOMEM;
    }
    if (!slot_ok(&o, sizeof(cu_deviceptr_t), "cuMemAlloc_v2"))
        return MC_ERR_NOT_SUPPORTED;
    cu_deviceptr_t d;
    memcpy(&d, o.b, sizeof(d));
    *out = (void *)(uintptr_t)d;
    return MC_OK;
}

void te_cuda_free(void *p)
{
    if (p != NULL && g.free != NULL)
        g.free((cu_deviceptr_t)(uintptr_t)p);
}
