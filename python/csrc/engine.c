/*
 * engine.c - the transfer engine type (mooncake._mooncake.Engine, the base
 * of mooncake.engine.TransferEngine): upstream's TransferEngine calls over
 * mooncake/transfer.h. Targets are opened by name ("host:port" with
 * P2PHANDSHAKE, a segment name otherwise) and cached by the library.
 *
 * Batch ids handed to Python are the addresses of the library's batches, as
 * upstream's; the object keeps the set of ids it gave out, so an unknown id
 * is refused (-1), never dereferenced. A batch that timed out still has
 * slices in flight: it is kept and freed once they finish.
 *
 * Sync transfers wait at most MC_TRANSFER_TIMEOUT seconds (default 30, at
 * least 5, as upstream) plus one nanosecond per byte.
 *
 * Raw-memory calls (write_bytes_to_buffer, read_bytes_from_buffer) are
 * limited to memory registered through this engine or allocated by
 * allocate_managed_buffer: other addresses are refused instead of touched.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "py.h"

typedef struct range {
    uint64_t lo, hi;
    int managed; /* from allocate_managed_buffer (ours to munmap) */
} range_t;

typedef struct engine {
    PyObject_HEAD pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_te_t *te;
    int calls, closing;
    uint16_t port;
    /* mu: */
    range_t *ranges;
    size_t nranges, cap_ranges;
    mc_te_batch_t **batches; /* ids given out (async) */
    size_t nbatches, cap_batches;
    mc_te_batch_t **zombies; /* timed out, freed once idle */
    size_t nzombies, cap_zombies;
} engine_t;

/* ------------------------------------------------------------- helpers */

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 16;
    void *p = PyMem_RawRealloc(*arr, c * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static mc_te_t *enter(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    mc_te_t *te = e->closing ? NULL : e->te;
    if (te != NULL)
        e->calls++;
    pthread_mutex_unlock(&e->mu);
    return te;
}

static void leave(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    if (--e->calls == 0 && e->closing)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* mu held */
static void add_range(engine_t *e, uint64_t p, uint64_t n, int managed)
{
    if (grow((void **)&e->ranges, &e->cap_ranges, e->nranges, sizeof(range_t)) == 0)
        e->ranges[e->nranges++] = (range_t){p, p + n, managed};
}

/* mu held; returns the range removed (hi == 0: none) */
static range_t del_range(engine_t *e, uint64_t p)
{
    for (size_t i = 0; i < e->nranges; i++)
        if (e->ranges[i].lo == p) {
            range_t r = e->ranges[i];
            e->ranges[i] = e->ranges[--e->nranges];
            return r;
        }
    return (range_t){0, 0, 0};
}

/* Whether [p, p+n) is host memory registered through this engine (the byte
 * copies touch it with the CPU: GPU memory is refused). */
static int in_ranges(engine_t *e, uint64_t p, uint64_t n)
{
    int ok = 0;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nranges && !ok; i++)
        ok = p >= e->ranges[i].lo && p + n >= p && p + n <= e->ranges[i].hi;
    pthread_mutex_unlock(&e->mu);
    char loc[32];
    if (ok) {
        mc_te_memory_location((const void *)(uintptr_t)p, n, loc, sizeof(loc));
        ok = strncmp(loc, "cpu:", 4) == 0;
    }
    return ok;
}

/* Free the zombies whose slices have finished (any thread, no GIL). */
static void reap(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nzombies;)
        if (mc_te_batch_free(e->zombies[i]) == MC_OK)
            e->zombies[i] = e->zombies[--e->nzombies];
        else
            i++;
    pthread_mutex_unlock(&e->mu);
}

static void bury(engine_t *e, mc_te_batch_t *b)
{
    if (mc_te_batch_free(b) == MC_OK)
        return;
    pthread_mutex_lock(&e->mu);
    if (grow((void **)&e->zombies, &e->cap_zombies, e->nzombies, sizeof(*e->zombies)) == 0)
        e->zombies[e->nzombies++] = b;
    pthread_mutex_unlock(&e->mu); /* else leaked: out of memory */
}

static uint64_t timeout_us(uint64_t bytes)
{
    long sec = 30;
    const char *env = getenv("MC_TRANSFER_TIMEOUT");
    if (env != NULL) {
        sec = atol(env);
        if (sec < 5)
            sec = 5;
    }
    return (uint64_t)sec * 1000000ull + bytes / 1000; /* + 1 ns per byte */
}

/* ----------------------------------------------------------- life cycle */

static void close_nogil(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    while (e->closing)
        pthread_cond_wait(&e->cv, &e->mu);
    mc_te_t *te = e->te;
    if (te == NULL) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    e->closing = 1;
    while (e->calls > 0)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    /* the engine cancels what is in flight; then the batches can go */
    mc_te_destroy(te);
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nbatches; i++)
        mc_te_batch_free(e->batches[i]);
    for (size_t i = 0; i < e->nzombies; i++)
        mc_te_batch_free(e->zombies[i]);
    for (size_t i = 0; i < e->nranges; i++)
        if (e->ranges[i].managed)
            munmap((void *)(uintptr_t)e->ranges[i].lo, e->ranges[i].hi - e->ranges[i].lo);
    e->nbatches = e->nzombies = e->nranges = 0;
    e->te = NULL;
    e->port = 0;
    e->closing = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    engine_t *e = (engine_t *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    return (PyObject *)e;
}

static void engine_dealloc(PyObject *o)
{
    engine_t *e = (engine_t *)o;
    if (e->te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        close_nogil(e);
        Py_END_ALLOW_THREADS;
    }
    PyMem_RawFree(e->ranges);
    PyMem_RawFree(e->batches);
    PyMem_RawFree(e->zombies);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    Py_TYPE(o)->tp_free(o);
}

/* _initialize(local_hostname, metadata, protocol, rdma_devices, port,
 *             advertise_host, secret_file="") -> int; engine.py resolves
 * the options. */
static PyObject *py_initialize(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"local_hostname", "metadata", "protocol",
                                        "rdma_devices",   "port",     "advertise_host",
                                        "secret_file"};
    PyObject *a[7];
    const char *host, *meta, *proto, *devs, *adv, *secret = "";
    uint64_t port;
    if (mcpy_bind("_initialize", args, nargs, kwnames, names, 7, 6, a) != 0 ||
        mcpy_str(a[0], "_initialize", names[0], &host) != 0 ||
        mcpy_str(a[1], "_initialize", names[1], &meta) != 0 ||
        mcpy_str(a[2], "_initialize", names[2], &proto) != 0 ||
        mcpy_str(a[3], "_initialize", names[3], &devs) != 0 ||
        mcpy_u64_max(a[4], "_initialize", names[4], 65535, &port) != 0 ||
        mcpy_str(a[5], "_initialize", names[5], &adv) != 0 ||
        (a[6] != NULL && mcpy_str(a[6], "_initialize", names[6], &secret) != 0))
        return NULL;
    mc_te_opts_t to;
    mc_te_opts_init(&to);
    to.local_hostname = host;
    to.metadata = meta;
    to.listen_port = (uint16_t)port;
    to.advertise_host = adv;
    to.rdma_devices = devs[0] != '\0' ? devs : NULL;
    to.secret_file = secret[0] != '\0' ? secret : NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    close_nogil(e);
    mc_te_t *te = NULL;
    st = mc_te_create(&to, &te);
    if (st == MC_OK && strcmp(proto, "tcp") != 0) {
        st = mc_te_install_transport(te, proto);
        if (st != MC_OK) {
            mc_te_destroy(te);
            te = NULL;
        }
    }
    if (st == MC_OK) {
        pthread_mutex_lock(&e->mu);
        e->te = te;
        e->port = mc_te_port(te);
        pthread_mutex_unlock(&e->mu);
    }
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(st);
}

static PyObject *py_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    Py_BEGIN_ALLOW_THREADS;
    close_nogil((engine_t *)o);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(0);
}

static PyObject *py_get_rpc_port(PyObject *o, PyObject *unused)
{
    (void)unused;
    engine_t *e = (engine_t *)o;
    pthread_mutex_lock(&e->mu);
    long p = e->te != NULL ? e->port : -1;
    pthread_mutex_unlock(&e->mu);
    return PyLong_FromLong(p);
}

static PyObject *py_local_name(PyObject *o, PyObject *unused)
{
    (void)unused;
    engine_t *e = (engine_t *)o;
    mc_te_t *te = enter(e);
    if (te == NULL)
        return PyUnicode_FromString("");
    PyObject *r = PyUnicode_FromString(mc_te_local_name(te));
    leave(e);
    return r;
}

/* --------------------------------------------------------- registration */

/* location argument: a str (default "*": found out from the memory) */
static int location_arg(PyObject *v, const char *fname, const char **out)
{
    *out = "*";
    return v == NULL ? 0 : mcpy_str(v, fname, "location", out);
}

static PyObject *py_register_memory(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"buffer_addr", "capacity", "location"};
    PyObject *a[3];
    uint64_t p, n;
    const char *loc;
    if (mcpy_bind("register_memory", args, nargs, kwnames, names, 3, 2, a) != 0 ||
        mcpy_u64(a[0], "register_memory", "buffer_addr", &p) != 0 ||
        mcpy_u64(a[1], "register_memory", "capacity", &n) != 0 ||
        location_arg(a[2], "register_memory", &loc) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = p == 0 || n == 0 ? MC_ERR_INVALID_ARGUMENT
                              : mc_te_register(te, (void *)(uintptr_t)p, n, loc, 1);
        if (st == MC_OK || st == MC_ERR_METADATA) { /* METADATA: registered, published later */
            pthread_mutex_lock(&e->mu);
            add_range(e, p, n, 0);
            pthread_mutex_unlock(&e->mu);
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    return PyLong_FromLong(st);
}

static PyObject *py_unregister_memory(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"buffer_addr"};
    PyObject *a[1];
    uint64_t p;
    if (mcpy_bind("unregister_memory", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64(a[0], "unregister_memory", "buffer_addr", &p) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&e->mu);
        range_t r = del_range(e, p);
        if (r.managed) /* a managed buffer goes with free_managed_buffer only */
            add_range(e, r.lo, r.hi - r.lo, 1);
        pthread_mutex_unlock(&e->mu);
        st = r.managed ? MC_ERR_INVALID_ARGUMENT : mc_te_unregister(te, (void *)(uintptr_t)p);
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    return PyLong_FromLong(st);
}

static PyObject *py_batch_register_memory(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const fn = "batch_register_memory";
    static const char *const names[] = {"buffer_addresses", "capacities", "location"};
    PyObject *a[3];
    uint64_t *ps = NULL, *ns = NULL;
    Py_ssize_t np = 0, nn = 0;
    const char *loc;
    if (mcpy_bind(fn, args, nargs, kwnames, names, 3, 2, a) != 0 ||
        mcpy_u64_list(a[0], fn, "buffer_addresses", &ps, &np) != 0)
        return NULL;
    PyObject *ret = NULL;
    mc_te_buffer_t *bufs = NULL;
    if (mcpy_u64_list(a[1], fn, "capacities", &ns, &nn) != 0 || location_arg(a[2], fn, &loc) != 0)
        goto out;
    int shape = mcpy_shape_ok(fn, "buffer_addresses", np, "capacities", nn);
    if (shape <= 0) { /* upstream: -1, not an exception */
        if (shape == 0)
            ret = PyLong_FromLong(-1);
        goto out;
    }
    bufs = PyMem_Calloc((size_t)(np > 0 ? np : 1), sizeof(*bufs));
    if (bufs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    mc_status_t st = MCPY_NOT_SETUP;
    for (Py_ssize_t i = 0; i < np; i++)
        bufs[i] = (mc_te_buffer_t){(void *)(uintptr_t)ps[i], ns[i]};
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = MC_OK;
        for (Py_ssize_t i = 0; i < np; i++)
            if (ps[i] == 0 || ns[i] == 0)
                st = MC_ERR_INVALID_ARGUMENT;
        if (st == MC_OK)
            st = mc_te_register_batch(te, bufs, (size_t)np, loc, 1);
        if (st == MC_OK || st == MC_ERR_METADATA) {
            pthread_mutex_lock(&e->mu);
            for (Py_ssize_t i = 0; i < np; i++)
                add_range(e, ps[i], ns[i], 0);
            pthread_mutex_unlock(&e->mu);
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    ret = PyLong_FromLong(st);
out:
    PyMem_Free(bufs);
    PyMem_Free(ps);
    PyMem_Free(ns);
    return ret;
}

static PyObject *py_batch_unregister_memory(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"buffer_addresses"};
    PyObject *a[1];
    uint64_t *ps = NULL;
    Py_ssize_t np = 0;
    if (mcpy_bind("batch_unregister_memory", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64_list(a[0], "batch_unregister_memory", "buffer_addresses", &ps, &np) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = MC_OK;
        for (Py_ssize_t i = 0; i < np; i++) {
            pthread_mutex_lock(&e->mu);
            range_t r = del_range(e, ps[i]);
            if (r.managed)
                add_range(e, r.lo, r.hi - r.lo, 1);
            pthread_mutex_unlock(&e->mu);
            mc_status_t s1 = r.managed ? MC_ERR_INVALID_ARGUMENT
                                       : mc_te_unregister(te, (void *)(uintptr_t)ps[i]);
            if (st == MC_OK)
                st = s1;
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    PyMem_Free(ps);
    return PyLong_FromLong(st);
}

/* ------------------------------------------------------------ transfers */

/* A request list: target, local buffers, peer addresses, lengths. */
typedef struct xfer {
    const char *target;
    uint64_t *bufs, *peers, *lens;
    Py_ssize_t n;
    mc_te_opcode_t op;
} xfer_t;

static void xfer_free(xfer_t *x)
{
    PyMem_Free(x->bufs);
    PyMem_Free(x->peers);
    PyMem_Free(x->lens);
}

/* opcode argument: TransferOpcode (an int enum) Read 0 / Write 1 */
static int opcode_arg(PyObject *v, const char *fname, mc_te_opcode_t *out)
{
    uint64_t x;
    if (mcpy_u64_max(v, fname, "opcode", 1, &x) != 0)
        return -1;
    *out = x == 0 ? MC_TE_READ : MC_TE_WRITE;
    return 0;
}

/* transport_hint (ignored: one transport per peer) and notify (only None). */
static int hint_arg(PyObject *v, const char *fname)
{
    const char *h;
    return v == NULL ? 0 : mcpy_str(v, fname, "transport_hint", &h);
}

static int notify_arg(PyObject *v, const char *fname)
{
    if (v == NULL || v == Py_None)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s() argument 'notify': notifications are not supported by mooncake-c (pass "
                 "None), not %.100s",
                 fname, Py_TYPE(v)->tp_name);
    return -1;
}

/* Open the target, submit every request in one batch: MC_OK with *out, or
 * a status (no batch left). GIL released. */
static mc_status_t submit(mc_te_t *te, const xfer_t *x, mc_te_batch_t **out)
{
    mc_te_segment_t seg;
    mc_status_t st = mc_te_open_segment(te, x->target, &seg);
    if (st != MC_OK)
        return st;
    size_t n = (size_t)x->n;
    mc_te_request_t *reqs = PyMem_RawMalloc((n > 0 ? n : 1) * sizeof(*reqs));
    if (reqs == NULL)
        return MC_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        reqs[i] = (mc_te_request_t){.opcode = x->op,
                                    .local = (void *)(uintptr_t)x->bufs[i],
                                    .segment = seg,
                                    .remote = x->peers[i],
                                    .length = x->lens[i]};
    mc_te_batch_t *b = NULL;
    st = mc_te_batch_alloc(te, n > 0 ? n : 1, &b);
    if (st == MC_OK && n > 0)
        st = mc_te_submit(b, reqs, n);
    PyMem_RawFree(reqs);
    if (st != MC_OK) {
        if (b != NULL)
            mc_te_batch_free(b);
        return st;
    }
    *out = b;
    return MC_OK;
}

static uint64_t total_len(const xfer_t *x)
{
    uint64_t t = 0;
    for (Py_ssize_t i = 0; i < x->n; i++)
        t += x->lens[i];
    return t;
}

/* Sync: submit, wait, free (or keep a timed-out batch as a zombie). */
static mc_status_t run_sync(engine_t *e, mc_te_t *te, const xfer_t *x)
{
    reap(e);
    mc_te_batch_t *b = NULL;
    mc_status_t st = submit(te, x, &b);
    if (st != MC_OK)
        return st;
    if (x->n > 0)
        st = mc_te_batch_wait(b, timeout_us(total_len(x)));
    bury(e, b);
    return st;
}

/* (target_hostname, buffer, peer_buffer_address, length[, opcode]) */
static int single_args(PyObject *const *a, const char *fname, xfer_t *x)
{
    memset(x, 0, sizeof(*x));
    x->n = 1;
    x->bufs = PyMem_Malloc(sizeof(uint64_t));
    x->peers = PyMem_Malloc(sizeof(uint64_t));
    x->lens = PyMem_Malloc(sizeof(uint64_t));
    if (x->bufs == NULL || x->peers == NULL || x->lens == NULL) {
        xfer_free(x);
        PyErr_NoMemory();
        return -1;
    }
    if (mcpy_str(a[0], fname, "target_hostname", &x->target) != 0 ||
        mcpy_u64(a[1], fname, "buffer", x->bufs) != 0 ||
        mcpy_u64(a[2], fname, "peer_buffer_address", x->peers) != 0 ||
        mcpy_u64(a[3], fname, "length", x->lens) != 0) {
        xfer_free(x);
        return -1;
    }
    return 0;
}

/* (target_hostname, buffers, peer_buffer_addresses, lengths[, opcode]):
 * 0, 1 for lists of different lengths (logged; upstream fails the call
 * with its error value, no exception), -1 with an exception set. */
static int batch_args(PyObject *const *a, const char *fname, xfer_t *x)
{
    Py_ssize_t np = 0, nl = 0;
    memset(x, 0, sizeof(*x));
    if (mcpy_str(a[0], fname, "target_hostname", &x->target) != 0 ||
        mcpy_u64_list(a[1], fname, "buffers", &x->bufs, &x->n) != 0 ||
        mcpy_u64_list(a[2], fname, "peer_buffer_addresses", &x->peers, &np) != 0 ||
        mcpy_u64_list(a[3], fname, "lengths", &x->lens, &nl) != 0) {
        xfer_free(x);
        return -1;
    }
    int shape = mcpy_shape_ok(fname, "buffers", x->n, "peer_buffer_addresses", np);
    if (shape == 1)
        shape = mcpy_shape_ok(fname, "buffers", x->n, "lengths", nl);
    if (shape != 1) {
        xfer_free(x);
        return shape == 0 ? 1 : -1;
    }
    return 0;
}

typedef enum { X_SYNC, X_ASYNC, X_SUBMIT } xmode_t;

/* Every transfer call: single or batch, fixed opcode or an opcode argument
 * (op < 0), sync or async (returns a batch id). */
static PyObject *transfer(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          const char *fname, int batch, int op, xmode_t mode)
{
    engine_t *e = (engine_t *)o;
    static const char *const single_names[] = {"target_hostname", "buffer", "peer_buffer_address",
                                               "length", "transport_hint"};
    static const char *const batch_names[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                              "lengths", "transport_hint"};
    static const char *const single_op[] = {"target_hostname", "buffer", "peer_buffer_address",
                                            "length",          "opcode", "notify",
                                            "transport_hint"};
    static const char *const batch_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                           "lengths",         "opcode",  "notify",
                                           "transport_hint"};
    const char *const *names =
        op >= 0 ? (batch ? batch_names : single_names) : (batch ? batch_op : single_op);
    /* batch_transfer_async(.., opcode, transport_hint): no notify */
    static const char *const async_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                           "lengths",         "opcode",  "transport_hint"};
    int n = op >= 0 ? 5 : 7, nreq = op >= 0 ? 4 : 5;
    if (op < 0 && mode == X_ASYNC) {
        names = async_op;
        n = 6;
    }
    PyObject *a[7] = {NULL};
    xfer_t x;
    if (mcpy_bind(fname, args, nargs, kwnames, names, n, nreq, a) != 0)
        return NULL;
    int got = batch ? batch_args(a, fname, &x) : single_args(a, fname, &x);
    if (got < 0)
        return NULL;
    if (got > 0) /* the failure value of the call, as upstream */
        return PyLong_FromLong(mode == X_ASYNC ? 0 : -1);
    x.op = op == 0 ? MC_TE_READ : MC_TE_WRITE;
    if ((op < 0 && opcode_arg(a[4], fname, &x.op) != 0) ||
        hint_arg(a[op >= 0 ? 4 : n - 1], fname) != 0 ||
        (op < 0 && mode != X_ASYNC && notify_arg(a[5], fname) != 0)) {
        xfer_free(&x);
        return NULL;
    }
    mc_status_t st = MCPY_NOT_SETUP;
    mc_te_batch_t *b = NULL;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        if (mode == X_SYNC) {
            st = run_sync(e, te, &x);
        } else {
            reap(e);
            st = submit(te, &x, &b);
            if (st == MC_OK) {
                pthread_mutex_lock(&e->mu);
                if (grow((void **)&e->batches, &e->cap_batches, e->nbatches, sizeof(*e->batches)) ==
                    0)
                    e->batches[e->nbatches++] = b;
                else
                    st = MC_ERR_NOMEM;
                pthread_mutex_unlock(&e->mu);
                if (st != MC_OK) {
                    bury(e, b);
                    b = NULL;
                }
            }
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    xfer_free(&x);
    if (mode == X_SYNC)
        return PyLong_FromLong(st);
    /* async: the batch id; 0 (async) or -1 (submit) on failure, as upstream */
    if (b == NULL)
        return PyLong_FromLong(mode == X_ASYNC ? 0 : -1);
    return PyLong_FromUnsignedLongLong((uint64_t)(uintptr_t)b);
}

#define XFER(fn, name, batch, op, mode)                                                            \
    static PyObject *fn(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)   \
    {                                                                                              \
        return transfer(o, args, nargs, kwnames, name, batch, op, mode);                           \
    }

XFER(py_sync_write, "transfer_sync_write", 0, 1, X_SYNC)
XFER(py_sync_read, "transfer_sync_read", 0, 0, X_SYNC)
XFER(py_sync, "transfer_sync", 0, -1, X_SYNC)
XFER(py_batch_sync_write, "batch_transfer_sync_write", 1, 1, X_SYNC)
XFER(py_batch_sync_read, "batch_transfer_sync_read", 1, 0, X_SYNC)
XFER(py_batch_sync, "batch_transfer_sync", 1, -1, X_SYNC)
XFER(py_batch_async_write, "batch_transfer_async_write", 1, 1, X_ASYNC)
XFER(py_batch_async_read, "batch_transfer_async_read", 1, 0, X_ASYNC)
XFER(py_batch_async, "batch_transfer_async", 1, -1, X_ASYNC)
XFER(py_submit_write, "transfer_submit_write", 0, 1, X_SUBMIT)

/* Take a batch id out of the set (1), or 0 for an id we never gave out. */
static int take_batch(engine_t *e, uint64_t id, mc_te_batch_t **out)
{
    int found = 0;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nbatches && !found; i++)
        if ((uint64_t)(uintptr_t)e->batches[i] == id) {
            *out = e->batches[i];
            e->batches[i] = e->batches[--e->nbatches];
            found = 1;
        }
    pthread_mutex_unlock(&e->mu);
    return found;
}

static void give_back(engine_t *e, mc_te_batch_t *b)
{
    pthread_mutex_lock(&e->mu);
    if (grow((void **)&e->batches, &e->cap_batches, e->nbatches, sizeof(*e->batches)) == 0)
        e->batches[e->nbatches++] = b;
    pthread_mutex_unlock(&e->mu);
}

/* get_batch_transfer_status(batch_ids) -> 0 when every batch completed
 * (they are freed), -1 when one failed or timed out or an id is unknown. */
static PyObject *py_get_batch_status(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"batch_ids"};
    PyObject *a[1];
    uint64_t *ids = NULL;
    Py_ssize_t n = 0;
    if (mcpy_bind("get_batch_transfer_status", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64_list(a[0], "get_batch_transfer_status", "batch_ids", &ids, &n) != 0)
        return NULL;
    int rc = MCPY_NOT_SETUP;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        rc = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            mc_te_batch_t *b;
            if (!take_batch(e, ids[i], &b)) {
                rc = -1;
                continue;
            }
            mc_te_status_t bs;
            mc_te_batch_status(b, &bs);
            mc_status_t st = mc_te_batch_wait(b, timeout_us(bs.transferred));
            if (st != MC_OK)
                rc = -1;
            bury(e, b);
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    PyMem_Free(ids);
    return PyLong_FromLong(rc);
}

/* transfer_check_status(batch_id) -> 1 completed, 0 in progress, -1 failed,
 * -2 timed out (upstream); a finished batch is freed. */
static PyObject *py_check_status(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"batch_id"};
    PyObject *a[1];
    uint64_t id;
    if (mcpy_bind("transfer_check_status", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64(a[0], "transfer_check_status", "batch_id", &id) != 0)
        return NULL;
    int rc = -1;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        mc_te_batch_t *b;
        if (take_batch(e, id, &b)) {
            mc_te_status_t bs;
            mc_te_batch_status(b, &bs);
            switch (bs.state) {
            case MC_TE_COMPLETED:
                rc = 1;
                bury(e, b);
                break;
            case MC_TE_TIMEOUT:
                rc = -2;
                bury(e, b);
                break;
            case MC_TE_WAITING:
            case MC_TE_PENDING:
                rc = 0;
                give_back(e, b);
                break;
            default:
                rc = -1;
                bury(e, b);
                break;
            }
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    return PyLong_FromLong(rc);
}

/* ------------------------------------------------------- managed memory */

static PyObject *py_allocate_managed(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"length"};
    PyObject *a[1];
    uint64_t n;
    if (mcpy_bind("allocate_managed_buffer", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64(a[0], "allocate_managed_buffer", "length", &n) != 0)
        return NULL;
    uint64_t addr = 0;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        void *p = n > 0 && n <= SIZE_MAX
                      ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
        if (p != MAP_FAILED) {
            mc_status_t st = mc_te_register(te, p, n, "*", 1);
            if (st == MC_OK || st == MC_ERR_METADATA) {
                addr = (uint64_t)(uintptr_t)p;
                pthread_mutex_lock(&e->mu);
                add_range(e, addr, n, 1);
                pthread_mutex_unlock(&e->mu);
            } else {
                munmap(p, n);
            }
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    return PyLong_FromUnsignedLongLong(addr);
}

static PyObject *py_free_managed(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"buffer_addr", "length"};
    PyObject *a[2];
    uint64_t p, n;
    if (mcpy_bind("free_managed_buffer", args, nargs, kwnames, names, 2, 2, a) != 0 ||
        mcpy_u64(a[0], "free_managed_buffer", "buffer_addr", &p) != 0 ||
        mcpy_u64(a[1], "free_managed_buffer", "length", &n) != 0)
        return NULL;
    int rc = MCPY_NOT_SETUP;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&e->mu);
        range_t r = del_range(e, p);
        if (r.hi != 0 && !r.managed) /* registered, not ours: leave it */
            add_range(e, r.lo, r.hi - r.lo, 0);
        pthread_mutex_unlock(&e->mu);
        if (r.hi != 0 && r.managed) {
            mc_te_unregister(te, (void *)(uintptr_t)p);
            munmap((void *)(uintptr_t)p, r.hi - r.lo);
            rc = 0;
        } else {
            rc = MC_ERR_INVALID_ARGUMENT;
        }
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    (void)n; /* the length is known from the allocation */
    return PyLong_FromLong(rc);
}

static PyObject *py_write_bytes(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"dest_address", "src", "length"};
    PyObject *a[3];
    uint64_t p, n;
    Py_buffer view;
    if (mcpy_bind("write_bytes_to_buffer", args, nargs, kwnames, names, 3, 3, a) != 0 ||
        mcpy_u64(a[0], "write_bytes_to_buffer", "dest_address", &p) != 0 ||
        mcpy_u64(a[2], "write_bytes_to_buffer", "length", &n) != 0)
        return NULL;
    if (PyObject_GetBuffer(a[1], &view, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "write_bytes_to_buffer() argument 'src' must be bytes-like, not %.100s",
                     Py_TYPE(a[1])->tp_name);
        return NULL;
    }
    int rc = MC_ERR_INVALID_ARGUMENT;
    if (n <= (uint64_t)view.len && in_ranges(e, p, n)) {
        Py_BEGIN_ALLOW_THREADS;
        memcpy((void *)(uintptr_t)p, view.buf, n);
        Py_END_ALLOW_THREADS;
        rc = 0;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(rc);
}

static PyObject *py_read_bytes(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"source_address", "length"};
    PyObject *a[2];
    uint64_t p, n;
    if (mcpy_bind("read_bytes_from_buffer", args, nargs, kwnames, names, 2, 2, a) != 0 ||
        mcpy_u64(a[0], "read_bytes_from_buffer", "source_address", &p) != 0 ||
        mcpy_u64(a[1], "read_bytes_from_buffer", "length", &n) != 0)
        return NULL;
    if (n > (uint64_t)PY_SSIZE_T_MAX || !in_ranges(e, p, n)) {
        /* PyErr_Format has no %llx: the range is written here */
        char range[64];
        snprintf(range, sizeof(range), "0x%llx+%llu", (unsigned long long)p, (unsigned long long)n);
        PyErr_Format(PyExc_ValueError,
                     "read_bytes_from_buffer(): %s is not host memory registered with this engine",
                     range);
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)(uintptr_t)p, (Py_ssize_t)n);
}

/* get_first_buffer_address(segment_name) -> the address of the first buffer
 * the segment's descriptor lists (0 when none or unknown) */
static PyObject *py_first_buffer(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"segment_name"};
    PyObject *a[1];
    const char *name;
    if (mcpy_bind("get_first_buffer_address", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_str(a[0], "get_first_buffer_address", "segment_name", &name) != 0)
        return NULL;
    uint64_t addr = 0;
    mc_te_t *te = enter(e);
    if (te != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        mc_te_segment_t seg;
        if (mc_te_open_segment(te, name, &seg) == MC_OK &&
            mc_te_segment_buffer(te, seg, 0, 1, &addr, NULL) != MC_OK)
            addr = 0;
        Py_END_ALLOW_THREADS;
        leave(e);
    }
    return PyLong_FromUnsignedLongLong(addr);
}

/* send_probe(peer_server_name) -> 0 when the peer answers (its descriptor
 * fetched afresh, with the handshake of a new connection), else negative:
 * SGLang asks this before it retries a peer it gave up on. */
static PyObject *py_send_probe(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    engine_t *e = (engine_t *)o;
    static const char *const names[] = {"peer_server_name"};
    PyObject *a[1];
    const char *name;
    if (mcpy_bind("send_probe", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_str(a[0], "send_probe", "peer_server_name", &name) != 0)
        return NULL;
    mc_te_t *te = enter(e);
    if (te == NULL)
        return PyLong_FromLong(MCPY_NOT_SETUP);
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    mc_te_segment_t seg;
    st = mc_te_open_segment(te, name, &seg);
    if (st == MC_OK) {
        st = mc_te_segment_buffer(te, seg, 0, 1, NULL, NULL);
        if (st == MC_ERR_NOT_FOUND)
            st = MC_OK; /* it answered: it has no buffer registered */
    }
    Py_END_ALLOW_THREADS;
    leave(e);
    return PyLong_FromLong(st);
}

static PyMethodDef engine_methods[] = {
    MCPY_FAST("_initialize", py_initialize, "internal: initialize() with options resolved"),
    {"_close", py_close, METH_NOARGS, "internal: stop the engine now (else when collected)"},
    {"get_rpc_port", py_get_rpc_port, METH_NOARGS, "get_rpc_port() -> the engine's port"},
    {"get_local_hostname", py_local_name, METH_NOARGS, "the engine's segment name"},
    MCPY_FAST("register_memory", py_register_memory,
              "register_memory(buffer_addr, capacity, location='*') -> int"),
    MCPY_FAST("unregister_memory", py_unregister_memory, "unregister_memory(buffer_addr) -> int"),
    MCPY_FAST("batch_register_memory", py_batch_register_memory,
              "batch_register_memory(buffer_addresses, capacities, location='*') -> int"),
    MCPY_FAST("batch_unregister_memory", py_batch_unregister_memory,
              "batch_unregister_memory(buffer_addresses) -> int"),
    MCPY_FAST("transfer_sync_write", py_sync_write,
              "transfer_sync_write(target_hostname, buffer, peer_buffer_address, length, "
              "transport_hint='') -> int"),
    MCPY_FAST("transfer_sync_read", py_sync_read,
              "transfer_sync_read(target_hostname, buffer, peer_buffer_address, length, "
              "transport_hint='') -> int"),
    MCPY_FAST("transfer_sync", py_sync,
              "transfer_sync(target_hostname, buffer, peer_buffer_address, length, opcode, "
              "notify=None, transport_hint='') -> int"),
    MCPY_FAST("batch_transfer_sync_write", py_batch_sync_write,
              "batch_transfer_sync_write(target_hostname, buffers, peer_buffer_addresses, "
              "lengths, transport_hint='') -> int"),
    MCPY_FAST("batch_transfer_sync_read", py_batch_sync_read,
              "batch_transfer_sync_read(target_hostname, buffers, peer_buffer_addresses, "
              "lengths, transport_hint='') -> int"),
    MCPY_FAST("batch_transfer_sync", py_batch_sync,
              "batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, "
              "opcode, notify=None, transport_hint='') -> int"),
    MCPY_FAST("batch_transfer_async_write", py_batch_async_write,
              "batch_transfer_async_write(target_hostname, buffers, peer_buffer_addresses, "
              "lengths, transport_hint='') -> batch id (0 on failure)"),
    MCPY_FAST("batch_transfer_async_read", py_batch_async_read,
              "batch_transfer_async_read(...) -> batch id (0 on failure)"),
    MCPY_FAST("batch_transfer_async", py_batch_async,
              "batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, "
              "opcode, transport_hint='') -> batch id (0 on failure)"),
    MCPY_FAST("transfer_submit_write", py_submit_write,
              "transfer_submit_write(target_hostname, buffer, peer_buffer_address, length, "
              "transport_hint='') -> batch id (-1 on failure)"),
    MCPY_FAST("get_batch_transfer_status", py_get_batch_status,
              "get_batch_transfer_status(batch_ids) -> 0 when all completed, else -1"),
    MCPY_FAST("transfer_check_status", py_check_status,
              "transfer_check_status(batch_id) -> 1 done, 0 running, -1 failed, -2 timeout"),
    MCPY_FAST("allocate_managed_buffer", py_allocate_managed,
              "allocate_managed_buffer(length) -> address of registered memory (0 on failure)"),
    MCPY_FAST("free_managed_buffer", py_free_managed,
              "free_managed_buffer(buffer_addr, length) -> int"),
    MCPY_FAST("write_bytes_to_buffer", py_write_bytes,
              "write_bytes_to_buffer(dest_address, src, length) -> int"),
    MCPY_FAST("read_bytes_from_buffer", py_read_bytes,
              "read_bytes_from_buffer(source_address, length) -> bytes"),
    MCPY_FAST("get_first_buffer_address", py_first_buffer,
              "get_first_buffer_address(segment_name) -> address (0 when none)"),
    MCPY_FAST("send_probe", py_send_probe,
              "send_probe(peer_server_name) -> 0 when the peer answers, else negative"),
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpy_engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._mooncake.Engine",
    .tp_basicsize = sizeof(engine_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Transfer engine (use mooncake.engine.TransferEngine).",
    .tp_new = engine_new,
    .tp_dealloc = engine_dealloc,
    .tp_methods = engine_methods,
};
