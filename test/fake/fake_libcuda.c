/*
 * fake_libcuda.c - a FAKE CUDA driver library for tests (built as
 * build/test/lib/libfakecuda.so, loaded through MC_CUDA_LIBRARY). It
 * exports the driver entry points transport/cuda.c uses, with the real
 * ABI, and behaves like a driver where it matters to the caller:
 *
 *  - "device memory" (cuMemAlloc_v2) is a memfd mapped twice: a private
 *    read-write host view, and the address handed out, mapped PROT_NONE:
 *    the CPU cannot touch a device pointer (a stray memcpy on one crashes
 *    the test, as it would fault on a GPU), only cuMemcpy can;
 *  - calls that need a context (cuMemAlloc, cuMemcpy, the dma-buf export)
 *    fail with CUDA_ERROR_INVALID_CONTEXT when none is current on the
 *    calling thread (cuCtxSetCurrent of a primary context);
 *  - cuMemGetHandleForAddressRange wants an allocation's exact bounds and
 *    returns a dma-buf fd: here a dup of the memfd (what an importer maps);
 *  - cuPointerGetAttribute answers CUDA_ERROR_INVALID_VALUE for memory it
 *    did not allocate (host memory), as the driver does;
 *  - mcFakeCudaHostView (not a CUDA symbol) gives the host view of device
 *    memory: the emulated RDMA NIC uses it where nvidia-peermem would pin
 *    GPU pages for a real NIC.
 *
 * Knobs (environment, read at cuInit): FAKE_CUDA_GPUS=N (2),
 * FAKE_CUDA_PCI="0000:3D:00.0,..." (bus ids of GPU 0, 1, ...; default
 * 0000:N0:00.0), FAKE_CUDA_NO_DMABUF=1 (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
 * 0 and no export), FAKE_CUDA_OVERSIZE=all|attr (every value, or
 * the pointer attributes only, written as 16 bytes, as a library of another
 * ABI might: a caller with a 4-byte variable on its stack gets it smashed).
 * mcFakeCudaCount("memcpy" | "export" | "no_ctx") counts calls, for assertions.
 *
 * Not part of the library; tests only.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

enum {
    SUCCESS = 0,
    ERR_INVALID_VALUE = 1,
    ERR_NOT_INITIALIZED = 3,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_CONTEXT = 201,
    ERR_NOT_SUPPORTED = 801,
};

#define MAX_GPUS 16
#define MAX_ALLOCS 1024

typedef struct alloc {
    CUdeviceptr dev;
    size_t size, map_len;
    unsigned char *host;
    int fd, gpu;
} alloc_t;

static struct {
    pthread_mutex_t mu;
    int inited, ngpus, no_dmabuf, oversize;
    char pci[MAX_GPUS][16];
    int ctx_tag[MAX_GPUS]; /* &ctx_tag[n] is GPU n's primary context */
    alloc_t a[MAX_ALLOCS];
    unsigned long n_memcpy, n_export, n_no_ctx;
} f = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread int cur_gpu = -1;

/* A value out: its size, or 16 bytes in an oversize mode (attr: pointer
 * attributes only). */
static void put_as(void *dst, const void *v, size_t size, int attr)
{
    unsigned char b[16] = {0};
    memcpy(b, v, size);
    if (f.oversize == 1 || (f.oversize == 2 && attr)) {
        memset(b + size, 0x5c, sizeof(b) - size);
        memcpy(dst, b, sizeof(b));
    } else {
        memcpy(dst, b, size);
    }
}

static void put(void *dst, const void *v, size_t size)
{
    put_as(dst, v, size, 0);
}

EXPORT CUresult cuInit(unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&f.mu);
    if (!f.inited) {
        const char *e = getenv("FAKE_CUDA_GPUS");
        f.ngpus = e && *e ? atoi(e) : 2;
        if (f.ngpus < 0 || f.ngpus > MAX_GPUS)
            f.ngpus = 2;
        f.no_dmabuf = getenv("FAKE_CUDA_NO_DMABUF") != NULL;
        const char *ov = getenv("FAKE_CUDA_OVERSIZE");
        f.oversize = ov == NULL ? 0 : strcmp(ov, "attr") == 0 ? 2 : 1;
        for (int i = 0; i < MAX_GPUS; i++)
            snprintf(f.pci[i], sizeof(f.pci[i]), "0000:%X0:00.0", i + 1);
        const char *p = getenv("FAKE_CUDA_PCI");
        for (int i = 0; p != NULL && *p && i < MAX_GPUS; i++) {
            const char *c = strchr(p, ',');
            size_t l = c ? (size_t)(c - p) : strlen(p);
            if (l < sizeof(f.pci[i])) {
                memcpy(f.pci[i], p, l);
                f.pci[i][l] = '\0';
            }
            p = c ? c + 1 : NULL;
        }
        f.inited = 1;
    }
    pthread_mutex_unlock(&f.mu);
    return SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    int x = 12040;
    put(v, &x, sizeof(x));
    return SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    if (!f.inited)
        return ERR_NOT_INITIALIZED;
    put(n, &f.ngpus, sizeof(int));
    return SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!f.inited)
        return ERR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= f.ngpus)
        return ERR_INVALID_DEVICE;
    put(d, &ordinal, sizeof(int));
    return SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
    if (d < 0 || d >= f.ngpus)
        return ERR_INVALID_DEVICE;
    int x = attr == 124 ? !f.no_dmabuf : 0; /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
    put(v, &x, sizeof(x));
    return SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice d)
{
    if (d < 0 || d >= f.ngpus)
        return ERR_INVALID_DEVICE;
    if (len < (int)strlen(f.pci[d]) + 1)
        return ERR_INVALID_VALUE;
    memcpy(buf, f.pci[d], strlen(f.pci[d]) + 1);
    return SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (d < 0 || d >= f.ngpus)
        return ERR_INVALID_DEVICE;
    void *p = &f.ctx_tag[d];
    put(c, &p, sizeof(p));
    return SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    return d < 0 || d >= f.ngpus ? ERR_INVALID_DEVICE : SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    if (c == NULL) {
        cur_gpu = -1;
        return SUCCESS;
    }
    long k = (int *)c - f.ctx_tag;
    if (k < 0 || k >= f.ngpus)
        return ERR_INVALID_CONTEXT;
    cur_gpu = (int)k;
    return SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    void *p = cur_gpu >= 0 ? (void *)&f.ctx_tag[cur_gpu] : NULL;
    put(c, &p, sizeof(p));
    return SUCCESS;
}

static int need_ctx(void)
{
    if (cur_gpu >= 0)
        return 1;
    __atomic_fetch_add(&f.n_no_ctx, 1, __ATOMIC_RELAXED);
    return 0;
}

/* The allocation holding p (mu held). */
static alloc_t *find(CUdeviceptr p)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (f.a[i].size && p >= f.a[i].dev && p < f.a[i].dev + f.a[i].size)
            return &f.a[i];
    return NULL;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
    if (!need_ctx())
        return ERR_INVALID_CONTEXT;
    if (size == 0)
        return ERR_INVALID_VALUE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size + page - 1) & ~(page - 1);
    int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0)
            close(fd);
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    void *host = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *dev = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    if (host == MAP_FAILED || dev == MAP_FAILED) {
        if (host != MAP_FAILED)
            munmap(host, len);
        if (dev != MAP_FAILED)
            munmap(dev, len);
        close(fd);
        return 2;
    }
    pthread_mutex_lock(&f.mu);
    alloc_t *a = NULL;
    for (int i = 0; i < MAX_ALLOCS && a == NULL; i++)
        if (f.a[i].size == 0)
            a = &f.a[i];
    if (a != NULL) {
        a->dev = (CUdeviceptr)(uintptr_t)dev;
        a->size = size;
        a->map_len = len;
        a->host = host;
        a->fd = fd;
        a->gpu = cur_gpu;
    }
    pthread_mutex_unlock(&f.mu);
    if (a == NULL) {
        munmap(host, len);
        munmap(dev, len);
        close(fd);
        return 2;
    }
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dev;
    put(out, &d, sizeof(d));
    return SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    pthread_mutex_lock(&f.mu);
    alloc_t *a = find(p);
    if (a == NULL || a->dev != p) {
        pthread_mutex_unlock(&f.mu);
        return ERR_INVALID_VALUE;
    }
    alloc_t copy = *a;
    memset(a, 0, sizeof(*a));
    pthread_mutex_unlock(&f.mu);
    munmap(copy.host, copy.map_len);
    munmap((void *)(uintptr_t)copy.dev, copy.map_len);
    close(copy.fd);
    return SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
    pthread_mutex_lock(&f.mu);
    alloc_t *a = find(p);
    int type = 2, gpu = a ? a->gpu : -1;
    pthread_mutex_unlock(&f.mu);
    if (a == NULL)
        return ERR_INVALID_VALUE; /* memory the driver does not know */
    switch (attr) {
    case 2: /* MEMORY_TYPE: CU_MEMORYTYPE_DEVICE */
        put_as(data, &type, sizeof(type), 1);
        return SUCCESS;
    case 9: /* DEVICE_ORDINAL */
        put_as(data, &gpu, sizeof(gpu), 1);
        return SUCCESS;
    default:
        return ERR_INVALID_VALUE;
    }
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    pthread_mutex_lock(&f.mu);
    alloc_t *a = find(p);
    CUdeviceptr b = a ? a->dev : 0;
    size_t s = a ? a->size : 0;
    pthread_mutex_unlock(&f.mu);
    if (a == NULL)
        return ERR_INVALID_VALUE;
    if (base != NULL)
        put(base, &b, sizeof(b));
    if (size != NULL)
        put(size, &s, sizeof(s));
    return SUCCESS;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, int type,
                                              unsigned long long flags)
{
    if (f.no_dmabuf)
        return ERR_NOT_SUPPORTED;
    if (!need_ctx())
        return ERR_INVALID_CONTEXT;
    if (type != 1 || flags != 0)
        return ERR_INVALID_VALUE;
    pthread_mutex_lock(&f.mu);
    alloc_t *a = find(p);
    int fd = a != NULL && a->dev == p && a->size == size ? dup(a->fd) : -2;
    pthread_mutex_unlock(&f.mu);
    if (fd == -2)
        return ERR_INVALID_VALUE; /* not an allocation's exact bounds */
    if (fd < 0)
        return 2;
    __atomic_fetch_add(&f.n_export, 1, __ATOMIC_RELAXED);
    put(handle, &fd, sizeof(fd));
    return SUCCESS;
}

/* Host view of [p, p+n) (mu held); NULL when p is not device memory or the
 * range leaves its allocation. */
static unsigned char *view(CUdeviceptr p, size_t n)
{
    alloc_t *a = find(p);
    if (a == NULL || p + n > a->dev + a->size)
        return NULL;
    return a->host + (p - a->dev);
}

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (!need_ctx())
        return ERR_INVALID_CONTEXT;
    pthread_mutex_lock(&f.mu);
    int dd = find(dst) != NULL, sd = find(src) != NULL;
    unsigned char *d = dd ? view(dst, n) : (unsigned char *)(uintptr_t)dst;
    unsigned char *s = sd ? view(src, n) : (unsigned char *)(uintptr_t)src;
    pthread_mutex_unlock(&f.mu);
    if (d == NULL || s == NULL)
        return ERR_INVALID_VALUE; /* runs past an allocation */
    memmove(d, s, n);
    __atomic_fetch_add(&f.n_memcpy, 1, __ATOMIC_RELAXED);
    return SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult rc, const char **s)
{
    const char *m;
    switch (rc) {
    case SUCCESS:
        m = "no error";
        break;
    case ERR_INVALID_VALUE:
        m = "invalid argument";
        break;
    case ERR_NOT_INITIALIZED:
        m = "initialization error";
        break;
    case ERR_INVALID_DEVICE:
        m = "invalid device ordinal";
        break;
    case ERR_INVALID_CONTEXT:
        m = "invalid device context";
        break;
    case ERR_NOT_SUPPORTED:
        m = "operation not supported";
        break;
    default:
        m = "unknown error";
        break;
    }
    put(s, &m, sizeof(m));
    return SUCCESS;
}

/* ------------------------------------------------------ not CUDA API */

EXPORT void *mcFakeCudaHostView(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&f.mu);
    void *v = view(p, n);
    pthread_mutex_unlock(&f.mu);
    return v;
}

EXPORT unsigned long mcFakeCudaCount(const char *what)
{
    if (strcmp(what, "memcpy") == 0)
        return __atomic_load_n(&f.n_memcpy, __ATOMIC_RELAXED);
    if (strcmp(what, "export") == 0)
        return __atomic_load_n(&f.n_export, __ATOMIC_RELAXED);
    if (strcmp(what, "no_ctx") == 0)
        return __atomic_load_n(&f.n_no_ctx, __ATOMIC_RELAXED);
    return 0;
}
