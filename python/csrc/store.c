/*
 * store.c - the store client type (mooncake._mooncake.Store, the base of
 * mooncake.store.MooncakeDistributedStore): life cycle (_setup, close),
 * single-key calls, buffer registration. The batch and pointer-based calls
 * are in store_batch.c.
 *
 * Threads: the object may be shared by threads. Every call takes the
 * handle (mcpy_store_enter) and gives it back after; close marks the object
 * closing, waits with the GIL released until no call runs, then closes the
 * library client. A call on a store that is not set up (or closed) returns
 * upstream's INVALID_PARAMS (-600), b"", None or a list of those, never
 * touches freed memory.
 *
 * Return conventions are upstream's: ints (0 or a negative status), a put of
 * an existing key is 0 (the object is kept), get() is b"" when absent.
 */
#include <string.h>

#include "py.h"

/* ----------------------------------------------------------- life cycle */

mc_store_t *mcpy_store_enter(mcpy_store_t *self)
{
    pthread_mutex_lock(&self->mu);
    mc_store_t *s = self->closing ? NULL : self->s;
    if (s != NULL)
        self->calls++;
    pthread_mutex_unlock(&self->mu);
    return s;
}

void mcpy_store_exit(mcpy_store_t *self)
{
    pthread_mutex_lock(&self->mu);
    if (--self->calls == 0 && self->closing)
        pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

/* Close the library client once no call runs. The GIL must be released. */
static void close_nogil(mcpy_store_t *self)
{
    pthread_mutex_lock(&self->mu);
    while (self->closing) /* another close: wait for it */
        pthread_cond_wait(&self->cv, &self->mu);
    mc_store_t *s = self->s;
    if (s == NULL) {
        pthread_mutex_unlock(&self->mu);
        return;
    }
    self->closing = 1;
    while (self->calls > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    mc_store_close(s);
    pthread_mutex_lock(&self->mu);
    self->s = NULL;
    self->name[0] = '\0';
    self->nregs = 0;
    self->closing = 0;
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    mcpy_store_t *self = (mcpy_store_t *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    return (PyObject *)self;
}

static void store_dealloc(PyObject *o)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    if (self->s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        close_nogil(self);
        Py_END_ALLOW_THREADS;
    }
    PyMem_RawFree(self->regs);
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    Py_TYPE(o)->tp_free(o);
}

/* _setup(local_hostname, metadata, global_segment_size, local_buffer_size,
 *        protocol, rdma_devices, master, port, advertise_host,
 *        secret_file="", offload_dir="") -> int
 * Everything already checked and normalised by store.py; an open store is
 * closed first (upstream replaces it). */
static PyObject *py_setup(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {
        "local_hostname",
        "metadata",
        "global_segment_size",
        "local_buffer_size",
        "protocol",
        "rdma_devices",
        "master",
        "port",
        "advertise_host",
        "secret_file",
        "offload_dir",
    };
    PyObject *a[11];
    const char *host, *meta, *proto, *rdma, *master, *adv, *secret = "", *offload = "";
    uint64_t gseg, lbuf, port;
    if (mcpy_bind("_setup", args, nargs, kwnames, names, 11, 9, a) != 0 ||
        mcpy_str(a[0], "_setup", names[0], &host) != 0 ||
        mcpy_str(a[1], "_setup", names[1], &meta) != 0 ||
        mcpy_u64(a[2], "_setup", names[2], &gseg) != 0 ||
        mcpy_u64(a[3], "_setup", names[3], &lbuf) != 0 ||
        mcpy_str(a[4], "_setup", names[4], &proto) != 0 ||
        mcpy_str(a[5], "_setup", names[5], &rdma) != 0 ||
        mcpy_str(a[6], "_setup", names[6], &master) != 0 ||
        mcpy_u64_max(a[7], "_setup", names[7], 65535, &port) != 0 ||
        mcpy_str(a[8], "_setup", names[8], &adv) != 0 ||
        (a[9] != NULL && mcpy_str(a[9], "_setup", names[9], &secret) != 0) ||
        (a[10] != NULL && mcpy_str(a[10], "_setup", names[10], &offload) != 0))
        return NULL;
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.local_hostname = host;
    c.metadata = meta;
    c.global_segment_size = gseg;
    c.local_buffer_size = lbuf;
    c.protocol = proto;
    c.rdma_devices = rdma;
    c.master = master;
    c.port = (uint16_t)port;
    c.advertise_host = adv;
    c.secret_file = secret[0] != '\0' ? secret : NULL;
    c.offload_dir = offload[0] != '\0' ? offload : NULL;
    mc_store_t *s = NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    close_nogil(self);
    st = mc_store_open(&c, &s);
    if (st == MC_OK) {
        pthread_mutex_lock(&self->mu);
        self->s = s;
        snprintf(self->name, sizeof(self->name), "%s", mc_store_name(s));
        pthread_mutex_unlock(&self->mu);
    }
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(st);
}

/* _setup_dummy(mem_pool_size, local_buffer_size, server_address,
 *              secret_file="") -> int:
 * a co-located client of the store service at server_address (checked by
 * store.py); an open store is closed first. */
static PyObject *py_setup_dummy(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"mem_pool_size", "local_buffer_size", "server_address",
                                        "secret_file"};
    PyObject *a[4];
    const char *addr, *secret = "";
    uint64_t pool, lbuf;
    if (mcpy_bind("_setup_dummy", args, nargs, kwnames, names, 4, 3, a) != 0 ||
        mcpy_u64(a[0], "_setup_dummy", names[0], &pool) != 0 ||
        mcpy_u64(a[1], "_setup_dummy", names[1], &lbuf) != 0 ||
        mcpy_str(a[2], "_setup_dummy", names[2], &addr) != 0 ||
        (a[3] != NULL && mcpy_str(a[3], "_setup_dummy", names[3], &secret) != 0))
        return NULL;
    mc_store_config_t c;
    mc_store_config_init(&c);
    c.service = addr;
    c.secret_file = secret[0] != '\0' ? secret : NULL;
    c.mem_pool_size = pool;
    c.local_buffer_size = lbuf;
    mc_store_t *s = NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    close_nogil(self);
    st = mc_store_open(&c, &s);
    if (st == MC_OK) {
        pthread_mutex_lock(&self->mu);
        self->s = s;
        snprintf(self->name, sizeof(self->name), "%s", mc_store_name(s));
        pthread_mutex_unlock(&self->mu);
    }
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(st);
}

static PyObject *py_close(PyObject *o, PyObject *unused)
{
    (void)unused;
    Py_BEGIN_ALLOW_THREADS;
    close_nogil((mcpy_store_t *)o);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(0);
}

static PyObject *py_get_hostname(PyObject *o, PyObject *unused)
{
    (void)unused;
    mcpy_store_t *self = (mcpy_store_t *)o;
    pthread_mutex_lock(&self->mu);
    PyObject *r = PyUnicode_FromString(self->name);
    pthread_mutex_unlock(&self->mu);
    return r;
}

static PyObject *py_is_setup(PyObject *o, PyObject *unused)
{
    (void)unused;
    mcpy_store_t *self = (mcpy_store_t *)o;
    pthread_mutex_lock(&self->mu);
    int up = self->s != NULL && !self->closing;
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(up);
}

/* --------------------------------------------------------------- values */

/* A value argument: a C-contiguous buffer (bytes, bytearray, memoryview,
 * numpy arrays, ...). TypeError naming the argument otherwise. */
static int get_value(PyObject *v, const char *fname, const char *arg, Py_buffer *view)
{
    if (PyObject_GetBuffer(v, view, PyBUF_SIMPLE) == 0)
        return 0;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "%s() argument '%s' must be a C-contiguous bytes-like object (bytes, bytearray, "
                 "memoryview, numpy array), not %.100s",
                 fname, arg, Py_TYPE(v)->tp_name);
    return -1;
}

/* put / upsert (key, value, config=None) */
static PyObject *put_common(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                            const char *fname, int upsert)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"key", "value", "config"};
    PyObject *a[3];
    mcpy_key_t k;
    Py_buffer view;
    mcpy_cfg_t cfg;
    if (mcpy_bind(fname, args, nargs, kwnames, names, 3, 2, a) != 0 ||
        mcpy_key(a[0], fname, "key", &k) != 0 || get_value(a[1], fname, "value", &view) != 0)
        return NULL;
    if (mcpy_cfg_from(a[2], fname, self->name, &cfg) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = upsert ? mc_store_upsert(s, k.p, (size_t)k.n, view.buf, (size_t)view.len, &cfg.c)
                    : mc_store_put(s, k.p, (size_t)k.n, view.buf, (size_t)view.len, &cfg.c);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    PyBuffer_Release(&view);
    mcpy_cfg_release(&cfg);
    return PyLong_FromLong(upsert ? st : mcpy_put_rc(st));
}

static PyObject *py_put(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return put_common(o, args, nargs, kwnames, "put", 0);
}

static PyObject *py_upsert(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return put_common(o, args, nargs, kwnames, "upsert", 1);
}

/* put_parts / upsert_parts (key, *parts, config=None) */
static PyObject *parts_common(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames, const char *fname, int upsert)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    PyObject *key = nargs > 0 ? args[0] : NULL, *config = NULL;
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(kw, "config") == 0) {
            config = args[nargs + i];
        } else if (PyUnicode_CompareWithASCIIString(kw, "key") == 0 && nargs == 0) {
            key = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         kw);
            return NULL;
        }
    }
    if (key == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'key' (pos 1)", fname);
        return NULL;
    }
    mcpy_key_t k;
    if (mcpy_key(key, fname, "key", &k) != 0)
        return NULL;
    Py_ssize_t np = nargs > 1 ? nargs - 1 : 0;
    Py_buffer *views = PyMem_Calloc((size_t)(np > 0 ? np : 1), sizeof(*views));
    mc_slice_t *sl = PyMem_Calloc((size_t)(np > 0 ? np : 1), sizeof(*sl));
    Py_ssize_t got = 0;
    mcpy_cfg_t cfg = {0};
    PyObject *ret = NULL;
    if (views == NULL || sl == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < np; got++) {
        if (PyObject_GetBuffer(args[1 + got], &views[got], PyBUF_SIMPLE) != 0) {
            char name[32]; /* only for the error */
            snprintf(name, sizeof(name), "parts[%zd]", got);
            PyErr_Clear();
            if (get_value(args[1 + got], fname, name, &views[got]) == 0)
                PyBuffer_Release(&views[got]); /* cannot happen: it just failed */
            goto out;
        }
        sl[got] = (mc_slice_t){views[got].buf, (size_t)views[got].len};
    }
    if (mcpy_cfg_from(config, fname, self->name, &cfg) != 0)
        goto out;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = upsert ? mc_store_upsert_parts(s, k.p, (size_t)k.n, sl, (size_t)np, &cfg.c)
                    : mc_store_put_parts(s, k.p, (size_t)k.n, sl, (size_t)np, &cfg.c);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    ret = PyLong_FromLong(upsert ? st : mcpy_put_rc(st));
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    mcpy_cfg_release(&cfg);
    PyMem_Free(views);
    PyMem_Free(sl);
    return ret;
}

static PyObject *py_put_parts(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return parts_common(o, args, nargs, kwnames, "put_parts", 0);
}

static PyObject *py_upsert_parts(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    return parts_common(o, args, nargs, kwnames, "upsert_parts", 1);
}

/* ----------------------------------------------------------------- gets */

/* One key argument (the first): 0, or -1 with TypeError set. */
static int one_key(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *fname,
                   mcpy_key_t *k)
{
    static const char *const names[] = {"key"};
    PyObject *a[1];
    if (mcpy_bind(fname, args, nargs, kwnames, names, 1, 1, a) != 0)
        return -1;
    return mcpy_key(a[0], fname, "key", k);
}

/* get() returns a new bytes object of the value's size, which is known
 * only once the master answered. Without a hint the object is made then
 * (mc_store_get_alloc: the GIL is taken back for that moment, and the read
 * is a second wait on the reactor). Values of one size are the common case
 * (KV cache pages), so the object is made before the call, at the size of
 * the recent gets (get_hint), and read into by one mc_store_get without the
 * GIL: as a get_into. A smaller value shrinks it; a larger one
 * (BUFFER_OVERFLOW) is read again the first way. The hint follows larger
 * values at once and smaller ones after GET_HINT_AGE gets in a row, and is
 * not used above GET_HINT_MAX (no large speculative allocations). */
#define GET_HINT_MAX ((uint64_t)32 << 20)
#define GET_HINT_AGE 32

static void get_hint_note(mcpy_store_t *self, uint64_t size)
{
    if (size >= self->get_hint || ++self->get_hint_age >= GET_HINT_AGE) {
        self->get_hint = size <= GET_HINT_MAX ? size : 0;
        self->get_hint_age = 0;
    }
}

typedef struct bytes_alloc {
    PyThreadState *ts;
    PyObject *bytes;
} bytes_alloc_t;

static void *alloc_bytes(void *arg, uint64_t size)
{
    bytes_alloc_t *b = arg;
    if (size > (uint64_t)PY_SSIZE_T_MAX)
        return NULL;
    PyEval_RestoreThread(b->ts);
    b->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (b->bytes == NULL)
        PyErr_Clear(); /* reported as b"" (NOMEM), as every failed get */
    b->ts = PyEval_SaveThread();
    return b->bytes != NULL ? PyBytes_AS_STRING(b->bytes) : NULL;
}

/* The read into an object of the hinted size: the object, or NULL with *r
 * the status (BUFFER_OVERFLOW: the value is larger). */
static PyObject *get_hinted(mcpy_store_t *self, mc_store_t *s, const mcpy_key_t *k, int64_t *r)
{
    uint64_t hint = self->get_hint;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)hint);
    if (b == NULL) {
        PyErr_Clear();
        *r = MC_ERR_BUFFER_OVERFLOW; /* try the other way */
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS;
    *r = mc_store_get(s, k->p, (size_t)k->n, PyBytes_AS_STRING(b), (size_t)hint, NULL);
    Py_END_ALLOW_THREADS;
    if (*r < 0) {
        Py_DECREF(b);
        return NULL;
    }
    if ((uint64_t)*r != hint && _PyBytes_Resize(&b, (Py_ssize_t)*r) != 0) {
        PyErr_Clear(); /* b is gone; never for a shrink */
        *r = MC_ERR_NOMEM;
        return NULL;
    }
    return b;
}

static PyObject *py_get(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    mcpy_key_t k;
    if (one_key(args, nargs, kwnames, "get", &k) != 0)
        return NULL;
    mc_store_t *s = mcpy_store_enter(self);
    if (s == NULL)
        return PyBytes_FromStringAndSize(NULL, 0);
    int64_t r = MC_ERR_BUFFER_OVERFLOW;
    bytes_alloc_t b = {.bytes = NULL};
    if (self->get_hint > 0)
        b.bytes = get_hinted(self, s, &k, &r);
    if (r == MC_ERR_BUFFER_OVERFLOW) {
        b.ts = PyEval_SaveThread();
        r = mc_store_get_alloc(s, k.p, (size_t)k.n, alloc_bytes, &b);
        PyEval_RestoreThread(b.ts);
    }
    mcpy_store_exit(self);
    if (r < 0 || b.bytes == NULL) {
        Py_XDECREF(b.bytes);
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    if (r != PyBytes_GET_SIZE(b.bytes)) /* never: get_alloc reads the size it allocated */
        _PyBytes_Resize(&b.bytes, (Py_ssize_t)r);
    get_hint_note(self, (uint64_t)r);
    return b.bytes;
}

/* get_buffer(): memory the handle will own, allocated once the size is known. */
typedef struct raw_alloc {
    void *p;
    uint64_t size;
} raw_alloc_t;

static void *alloc_raw(void *arg, uint64_t size)
{
    raw_alloc_t *r = arg;
    r->p = size <= SIZE_MAX ? mcpy_buf_alloc((size_t)size) : NULL;
    r->size = size;
    return r->p;
}

static PyObject *py_get_buffer(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    mcpy_key_t k;
    if (one_key(args, nargs, kwnames, "get_buffer", &k) != 0)
        return NULL;
    mc_store_t *s = mcpy_store_enter(self);
    if (s == NULL)
        Py_RETURN_NONE;
    raw_alloc_t ra = {NULL, 0};
    int64_t r;
    Py_BEGIN_ALLOW_THREADS;
    r = mc_store_get_alloc(s, k.p, (size_t)k.n, alloc_raw, &ra);
    if (r < 0 && ra.p != NULL) {
        mcpy_buf_free(ra.p, (size_t)ra.size);
        ra.p = NULL;
    }
    Py_END_ALLOW_THREADS;
    mcpy_store_exit(self);
    if (r < 0)
        Py_RETURN_NONE;
    return mcpy_buffer_new(ra.p, (size_t)ra.size);
}

/* get_size(key), is_exist(key) -> int */
static PyObject *py_get_size(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    mcpy_key_t k;
    if (one_key(args, nargs, kwnames, "get_size", &k) != 0)
        return NULL;
    int64_t r = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        r = mc_store_get_size(s, k.p, (size_t)k.n);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLongLong(r);
}

static PyObject *py_is_exist(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    mcpy_key_t k;
    if (one_key(args, nargs, kwnames, "is_exist", &k) != 0)
        return NULL;
    int r = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        r = mc_store_exist(s, k.p, (size_t)k.n);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLong(r);
}

/* -------------------------------------------------------------- removes */

static PyObject *py_remove(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"key", "force"};
    PyObject *a[2];
    mcpy_key_t k;
    int force = 0;
    if (mcpy_bind("remove", args, nargs, kwnames, names, 2, 1, a) != 0 ||
        mcpy_key(a[0], "remove", "key", &k) != 0 || (a[1] != NULL && mcpy_bool(a[1], &force) != 0))
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = mc_store_remove(s, k.p, (size_t)k.n, force);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLong(st);
}

static PyObject *py_remove_by_regex(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"regex_pattern", "force"};
    PyObject *a[2];
    const char *re;
    int force = 0;
    if (mcpy_bind("remove_by_regex", args, nargs, kwnames, names, 2, 1, a) != 0 ||
        mcpy_str(a[0], "remove_by_regex", "regex_pattern", &re) != 0 ||
        (a[1] != NULL && mcpy_bool(a[1], &force) != 0))
        return NULL;
    int64_t r = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        r = mc_store_remove_by_regex(s, re, force);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLongLong(r);
}

static PyObject *py_remove_all(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"force"};
    PyObject *a[1];
    int force = 0;
    if (mcpy_bind("remove_all", args, nargs, kwnames, names, 1, 0, a) != 0 ||
        (a[0] != NULL && mcpy_bool(a[0], &force) != 0))
        return NULL;
    int64_t r = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        r = mc_store_remove_all(s, force);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLongLong(r);
}

/* _query(key) -> [(segment, address, size, complete, disk)] or a negative
 * int (store.py builds get_replica_desc from it) */
static PyObject *py_query(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    mcpy_key_t k;
    if (one_key(args, nargs, kwnames, "get_replica_desc", &k) != 0)
        return NULL;
    mc_store_replica_t reps[8];
    uint32_t n = 0;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = mc_store_query(s, k.p, (size_t)k.n, reps, 8, &n);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    if (st != MC_OK)
        return PyLong_FromLong(st);
    if (n > 8)
        n = 8;
    PyObject *l = PyList_New(n);
    for (uint32_t i = 0; l != NULL && i < n; i++) {
        PyObject *t =
            Py_BuildValue("(sKKOO)", reps[i].segment, (unsigned long long)reps[i].address,
                          (unsigned long long)reps[i].size, reps[i].complete ? Py_True : Py_False,
                          reps[i].disk ? Py_True : Py_False);
        if (t == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, t);
    }
    return l;
}

/* ---------------------------------------------------------- registration */

int mcpy_store_registered(mcpy_store_t *self, uint64_t p, uint64_t len)
{
    int ok = 0;
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nregs && !ok; i++)
        ok = p >= self->regs[i].lo && p + len >= p && p + len <= self->regs[i].hi;
    pthread_mutex_unlock(&self->mu);
    return ok;
}

/* Remember [p, p + n) as memory the pointer calls may use (self->mu held;
 * without room it is not remembered, and calls on it are refused). */
static void add_reg(mcpy_store_t *self, uint64_t p, uint64_t n)
{
    if (self->nregs == self->cap_regs) {
        size_t cap = self->cap_regs ? 2 * self->cap_regs : 16;
        void *nr = PyMem_RawRealloc(self->regs, cap * sizeof(*self->regs));
        if (nr != NULL) {
            self->regs = nr;
            self->cap_regs = cap;
        }
    }
    if (self->nregs < self->cap_regs)
        self->regs[self->nregs++] = (struct mcpy_range){p, p + n};
}

static PyObject *py_register_buffer(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"buffer_ptr", "size"};
    PyObject *a[2];
    uint64_t p, n;
    if (mcpy_bind("register_buffer", args, nargs, kwnames, names, 2, 2, a) != 0 ||
        mcpy_u64(a[0], "register_buffer", "buffer_ptr", &p) != 0 ||
        mcpy_u64(a[1], "register_buffer", "size", &n) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        st = p == 0 || n == 0 || p + n < p ? MC_ERR_INVALID_PARAMS
                                           : mc_store_register_buffer(s, (void *)(uintptr_t)p, n);
        if (st == MC_OK) {
            pthread_mutex_lock(&self->mu);
            add_reg(self, p, n);
            pthread_mutex_unlock(&self->mu);
        }
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLong(st);
}

/* alloc_from_mem_pool(size) -> address (0: no room, or not set up): the
 * pool's memory counts as registered for the pointer calls. */
static PyObject *py_alloc_from_mem_pool(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"size"};
    PyObject *a[1];
    uint64_t n;
    if (mcpy_bind("alloc_from_mem_pool", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64(a[0], "alloc_from_mem_pool", "size", &n) != 0)
        return NULL;
    void *p = NULL;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        p = n > 0 ? mc_store_alloc_from_mem_pool(s, n) : NULL;
        if (p != NULL) {
            pthread_mutex_lock(&self->mu);
            if (self->nregs == self->cap_regs) {
                size_t cap = self->cap_regs ? 2 * self->cap_regs : 16;
                void *nr = PyMem_RawRealloc(self->regs, cap * sizeof(*self->regs));
                if (nr != NULL) {
                    self->regs = nr;
                    self->cap_regs = cap;
                }
            }
            if (self->nregs < self->cap_regs)
                self->regs[self->nregs++] = (struct mcpy_range){(uintptr_t)p, (uintptr_t)p + n};
            pthread_mutex_unlock(&self->mu);
        }
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromUnsignedLongLong((uintptr_t)p);
}

/* Store._shared_alloc(size[, huge]) -> address or 0 (huge: MC_STORE_HUGE_*;
 * absent or None: as $MC_STORE_USE_HUGEPAGE says); Store._shared_free(address)
 * -> int (mooncake.store.MooncakeHostMemAllocator). */
static PyObject *py_shared_alloc(PyObject *unused, PyObject *args)
{
    (void)unused;
    PyObject *size, *hugeo = Py_None;
    if (!PyArg_UnpackTuple(args, "alloc", 1, 2, &size, &hugeo))
        return NULL;
    uint64_t n, huge = 0;
    if (mcpy_u64(size, "alloc", "size", &n) != 0)
        return NULL;
    if (hugeo != Py_None && mcpy_u64(hugeo, "alloc", "huge", &huge) != 0)
        return NULL;
    void *p;
    Py_BEGIN_ALLOW_THREADS;
    p = hugeo == Py_None ? mc_store_shared_alloc(n)
                         : mc_store_shared_alloc_huge(n, huge > 2 ? -1 : (int)huge);
    Py_END_ALLOW_THREADS;
    return PyLong_FromUnsignedLongLong((uintptr_t)p);
}

static PyObject *py_shared_free(PyObject *unused, PyObject *arg)
{
    (void)unused;
    uint64_t p;
    if (mcpy_u64(arg, "free", "ptr", &p) != 0)
        return NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = mc_store_shared_free((void *)(uintptr_t)p);
    Py_END_ALLOW_THREADS;
    return PyLong_FromLong(st);
}

static PyObject *py_unregister_buffer(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"buffer_ptr"};
    PyObject *a[1];
    uint64_t p;
    if (mcpy_bind("unregister_buffer", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_u64(a[0], "unregister_buffer", "buffer_ptr", &p) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        /* forget it first: calls from now on refuse the range */
        pthread_mutex_lock(&self->mu);
        for (size_t i = 0; i < self->nregs; i++)
            if (self->regs[i].lo == p) {
                self->regs[i] = self->regs[--self->nregs];
                break;
            }
        pthread_mutex_unlock(&self->mu);
        st = p == 0 ? MC_ERR_INVALID_PARAMS : mc_store_unregister_buffer(s, (void *)(uintptr_t)p);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    return PyLong_FromLong(st);
}

/* ----------------------------------------------------------------- type */

static PyMethodDef store_methods[] = {
    MCPY_FAST("_setup", py_setup, "internal: setup() with every option resolved"),
    MCPY_FAST("_setup_dummy", py_setup_dummy, "internal: setup_dummy() with its arguments checked"),
    MCPY_FAST("alloc_from_mem_pool", py_alloc_from_mem_pool,
              "alloc_from_mem_pool(size) -> address of shared pool memory (0: none)"),
    {"_shared_alloc", py_shared_alloc, METH_VARARGS | METH_STATIC,
     "internal: MooncakeHostMemAllocator.alloc"},
    {"_shared_free", py_shared_free, METH_O | METH_STATIC,
     "internal: MooncakeHostMemAllocator.free"},
    {"close", py_close, METH_NOARGS, "close() -> 0: release everything; setup() may follow"},
    {"get_hostname", py_get_hostname, METH_NOARGS, "get_hostname() -> 'host:port'"},
    {"_is_setup", py_is_setup, METH_NOARGS, "internal: whether the client is open"},
    MCPY_FAST("put", py_put, "put(key, value, config=None) -> int"),
    MCPY_FAST("upsert", py_upsert, "upsert(key, value, config=None) -> int: put or replace"),
    MCPY_FAST("put_parts", py_put_parts, "put_parts(key, *parts, config=None) -> int"),
    MCPY_FAST("upsert_parts", py_upsert_parts, "upsert_parts(key, *parts, config=None) -> int"),
    MCPY_FAST("get", py_get, "get(key) -> bytes (b'' when absent or on error)"),
    MCPY_FAST("get_buffer", py_get_buffer, "get_buffer(key) -> BufferHandle or None"),
    MCPY_FAST("get_size", py_get_size, "get_size(key) -> size or a negative status"),
    MCPY_FAST("is_exist", py_is_exist, "is_exist(key) -> 1, 0, or a negative status"),
    MCPY_FAST("remove", py_remove, "remove(key, force=False) -> int"),
    MCPY_FAST("remove_by_regex", py_remove_by_regex,
              "remove_by_regex(regex_pattern, force=False) -> count or a negative status"),
    MCPY_FAST("remove_all", py_remove_all, "remove_all(force=False) -> count or negative"),
    MCPY_FAST("_query", py_query, "internal: replica descriptors of a key"),
    MCPY_FAST("register_buffer", py_register_buffer, "register_buffer(buffer_ptr, size) -> int"),
    MCPY_FAST("unregister_buffer", py_unregister_buffer, "unregister_buffer(buffer_ptr) -> int"),
    {NULL, NULL, 0, NULL},
};

/* Both tables together (filled at module init). */
static PyMethodDef all_methods[64];

PyTypeObject mcpy_store_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._mooncake.Store",
    .tp_basicsize = sizeof(mcpy_store_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Store client (use mooncake.store.MooncakeDistributedStore).",
    .tp_new = store_new,
    .tp_dealloc = store_dealloc,
    .tp_methods = all_methods,
};

int mcpy_store_type_ready(void);
int mcpy_store_type_ready(void)
{
    size_t n = 0;
    for (const PyMethodDef *m = store_methods; m->ml_name != NULL; m++)
        all_methods[n++] = *m;
    for (const PyMethodDef *m = mcpy_store_batch_methods; m->ml_name != NULL; m++) {
        if (n + 1 >= sizeof(all_methods) / sizeof(all_methods[0]))
            return -1;
        all_methods[n++] = *m;
    }
    all_methods[n] = (PyMethodDef){NULL, NULL, 0, NULL};
    return PyType_Ready(&mcpy_store_type);
}
