/*
 * store_batch.c - the store's batch calls and its calls on raw memory
 * addresses (buffer_ptr ints): put_from / get_into and their batch and
 * multi-buffer forms. An address range must lie in a buffer registered
 * with register_buffer on this store (the call on it fails with
 * INVALID_PARAMS otherwise, instead of touching whatever is there).
 * List arguments of different lengths are, as upstream's, not an exception
 * but INVALID_PARAMS for every key (logged naming them).
 */
#include <string.h>

#include "py.h"

/* Keys of a list argument as library slices; *hold keeps them alive. */
static mc_slice_t *key_slices(PyObject *o, const char *fname, const char *arg, Py_ssize_t *n,
                              PyObject **hold)
{
    mcpy_key_t *k;
    if (mcpy_key_list(o, fname, arg, &k, n, hold) != 0)
        return NULL;
    mc_slice_t *sl = PyMem_Malloc((size_t)(*n > 0 ? *n : 1) * sizeof(*sl));
    if (sl == NULL) {
        PyMem_Free(k);
        Py_CLEAR(*hold);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++)
        sl[i] = (mc_slice_t){(void *)(uintptr_t)k[i].p, (size_t)k[i].n};
    PyMem_Free(k);
    return sl;
}

/* Statuses as Python ints; put-style (an existing key is 0) unless raw. */
static PyObject *status_list(const mc_status_t *st, Py_ssize_t n, int put_style)
{
    PyObject *l = PyList_New(n);
    for (Py_ssize_t i = 0; l != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLong(put_style ? mcpy_put_rc(st[i]) : st[i]);
        if (x == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *const_list(long v, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    for (Py_ssize_t i = 0; l != NULL && i < n; i++)
        PyList_SET_ITEM(l, i, PyLong_FromLong(v));
    return l;
}

/* ------------------------------------------------- put_batch / upsert_batch */

static PyObject *put_batch_common(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames, const char *fname, int upsert)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"keys", "values", "config"};
    PyObject *a[3], *hold = NULL, *vals = NULL, *ret = NULL;
    Py_ssize_t n, nv = 0, got = 0;
    Py_buffer *views = NULL;
    mc_slice_t *vs = NULL;
    mc_status_t *st = NULL;
    mcpy_cfg_t cfg = {0};
    if (mcpy_bind(fname, args, nargs, kwnames, names, 3, 2, a) != 0)
        return NULL;
    mc_slice_t *ks = key_slices(a[0], fname, "keys", &n, &hold);
    if (ks == NULL)
        return NULL;
    if ((vals = mcpy_seq(a[1], fname, "values", &nv)) == NULL ||
        mcpy_cfg_from(a[2], fname, self->name, &cfg) != 0)
        goto out;
    int shape = mcpy_shape_ok(fname, "keys", n, "values", nv);
    if (shape <= 0) {
        if (shape == 0)
            ret = PyLong_FromLong(MC_ERR_INVALID_PARAMS);
        goto out;
    }
    size_t m = (size_t)(n > 0 ? n : 1);
    views = PyMem_Calloc(m, sizeof(*views));
    vs = PyMem_Calloc(m, sizeof(*vs));
    st = PyMem_Calloc(m, sizeof(*st));
    if (views == NULL || vs == NULL || st == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(vals, got), &views[got], PyBUF_SIMPLE) != 0) {
            char name[32];
            snprintf(name, sizeof(name), "values[%zd]", got);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s() argument '%s' must be a C-contiguous bytes-like object, not %.100s",
                         fname, name, Py_TYPE(PyTuple_GET_ITEM(vals, got))->tp_name);
            goto out;
        }
        vs[got] = (mc_slice_t){views[got].buf, (size_t)views[got].len};
    }
    mc_status_t rc = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        rc = upsert ? mc_store_batch_upsert(s, ks, vs, (size_t)n, &cfg.c, st)
                    : mc_store_batch_put(s, ks, vs, (size_t)n, &cfg.c, st);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    /* upstream: one int, 0 when every key went in; else the first failure */
    for (Py_ssize_t i = 0; rc == MC_OK && i < n; i++) {
        int r = upsert ? st[i] : mcpy_put_rc(st[i]);
        if (r != 0)
            rc = r;
    }
    ret = PyLong_FromLong(rc);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(vs);
    PyMem_Free(st);
    PyMem_Free(ks);
    mcpy_cfg_release(&cfg);
    Py_XDECREF(vals);
    Py_XDECREF(hold);
    return ret;
}

static PyObject *py_put_batch(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return put_batch_common(o, args, nargs, kwnames, "put_batch", 0);
}

static PyObject *py_upsert_batch(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    return put_batch_common(o, args, nargs, kwnames, "upsert_batch", 1);
}

/* --------------------------------------------- get_batch / batch_get_buffer */

/* The two share: sizes first (one master call), memory of those sizes,
 * then one batch get into it. as_bytes: bytes objects (b"" for a missing
 * key); else BufferHandles (None). */
static PyObject *get_many(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          const char *fname, int as_bytes)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"keys"};
    PyObject *a[1], *hold = NULL, *ret = NULL, **objs = NULL;
    Py_ssize_t n;
    if (mcpy_bind(fname, args, nargs, kwnames, names, 1, 1, a) != 0)
        return NULL;
    mc_slice_t *ks = key_slices(a[0], fname, "keys", &n, &hold);
    if (ks == NULL)
        return NULL;
    size_t m = (size_t)(n > 0 ? n : 1);
    int64_t *sizes = PyMem_Calloc(m, sizeof(*sizes));
    int64_t *res = PyMem_Calloc(m, sizeof(*res));
    mc_slice_t *bufs = PyMem_Calloc(m, sizeof(*bufs));
    objs = PyMem_Calloc(m, sizeof(*objs));
    if (sizes == NULL || res == NULL || bufs == NULL || objs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        mc_status_t rc;
        Py_BEGIN_ALLOW_THREADS;
        rc = mc_store_batch_get_size(s, ks, (size_t)n, sizes);
        Py_END_ALLOW_THREADS;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (rc != MC_OK || sizes[i] <= 0) {
                res[i] = rc != MC_OK ? rc : sizes[i] < 0 ? sizes[i] : MC_ERR_OBJECT_NOT_FOUND;
                continue;
            }
            if (as_bytes) {
                objs[i] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizes[i]);
                if (objs[i] == NULL) {
                    PyErr_Clear();
                    res[i] = MC_ERR_NOMEM;
                    continue;
                }
                bufs[i] = (mc_slice_t){PyBytes_AS_STRING(objs[i]), (size_t)sizes[i]};
            } else {
                bufs[i].ptr = mcpy_buf_alloc((size_t)sizes[i]);
                bufs[i].len = bufs[i].ptr != NULL ? (size_t)sizes[i] : 0;
                if (bufs[i].ptr == NULL)
                    res[i] = MC_ERR_NOMEM;
            }
        }
        /* only the keys with memory are read; the others keep their status */
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (bufs[i].ptr != NULL) {
                ks[k] = ks[i];
                bufs[k] = bufs[i];
                sizes[k] = i; /* reused: where item k came from */
                k++;
            }
        int64_t *kres = PyMem_Calloc((size_t)(k > 0 ? k : 1), sizeof(*kres));
        if (kres == NULL) {
            mcpy_store_exit(self);
            PyErr_NoMemory();
            for (Py_ssize_t j = 0; j < k; j++)
                if (!as_bytes)
                    mcpy_buf_free(bufs[j].ptr, bufs[j].len);
            goto out;
        }
        if (k > 0) {
            Py_BEGIN_ALLOW_THREADS;
            rc = mc_store_batch_get(s, ks, bufs, (size_t)k, kres);
            Py_END_ALLOW_THREADS;
        }
        mcpy_store_exit(self);
        for (Py_ssize_t j = 0; j < k; j++) {
            Py_ssize_t i = (Py_ssize_t)sizes[j];
            res[i] = rc != MC_OK ? rc : kres[j];
            if (as_bytes) {
                if (res[i] >= 0 && res[i] != PyBytes_GET_SIZE(objs[i]))
                    Py_SETREF(objs[i], PyBytes_FromStringAndSize(bufs[j].ptr, (Py_ssize_t)res[i]));
            } else if (res[i] >= 0) {
                objs[i] = mcpy_buffer_new(bufs[j].ptr, bufs[j].len); /* frees on failure */
            } else {
                mcpy_buf_free(bufs[j].ptr, bufs[j].len);
            }
        }
        PyMem_Free(kres);
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            res[i] = MCPY_NOT_SETUP;
    }
    ret = PyList_New(n);
    for (Py_ssize_t i = 0; ret != NULL && i < n; i++) {
        PyObject *x = objs[i];
        objs[i] = NULL;
        if (res[i] < 0 || x == NULL) {
            Py_XDECREF(x);
            x = as_bytes ? PyBytes_FromStringAndSize(NULL, 0) : Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(ret, i, x);
    }
out:
    if (objs != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(objs[i]);
    PyMem_Free(objs);
    PyMem_Free(sizes);
    PyMem_Free(res);
    PyMem_Free(bufs);
    PyMem_Free(ks);
    Py_XDECREF(hold);
    return ret;
}

static PyObject *py_get_batch(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return get_many(o, args, nargs, kwnames, "get_batch", 1);
}

static PyObject *py_batch_get_buffer(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    return get_many(o, args, nargs, kwnames, "batch_get_buffer", 0);
}

/* ------------------------------------------ batch_is_exist / batch_remove */

static PyObject *py_batch_is_exist(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"keys"};
    PyObject *a[1], *hold = NULL, *ret = NULL;
    Py_ssize_t n;
    if (mcpy_bind("batch_is_exist", args, nargs, kwnames, names, 1, 1, a) != 0)
        return NULL;
    mc_slice_t *ks = key_slices(a[0], "batch_is_exist", "keys", &n, &hold);
    if (ks == NULL)
        return NULL;
    int *r = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(*r));
    if (r == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    mc_status_t rc = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        rc = mc_store_batch_exist(s, ks, (size_t)n, r);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    ret = rc == MC_OK ? mcpy_int_list_int(r, n) : const_list(rc, n);
out:
    PyMem_Free(r);
    PyMem_Free(ks);
    Py_XDECREF(hold);
    return ret;
}

static PyObject *py_batch_remove(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"keys", "force"};
    PyObject *a[2], *hold = NULL, *ret = NULL;
    Py_ssize_t n;
    int force = 0;
    if (mcpy_bind("batch_remove", args, nargs, kwnames, names, 2, 1, a) != 0 ||
        (a[1] != NULL && mcpy_bool(a[1], &force) != 0))
        return NULL;
    mc_slice_t *ks = key_slices(a[0], "batch_remove", "keys", &n, &hold);
    if (ks == NULL)
        return NULL;
    mc_status_t *st = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(*st));
    if (st == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    mc_status_t rc = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        rc = mc_store_batch_remove(s, ks, (size_t)n, force, st);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    }
    ret = rc == MC_OK ? status_list(st, n, 0) : const_list(rc, n);
out:
    PyMem_Free(st);
    PyMem_Free(ks);
    Py_XDECREF(hold);
    return ret;
}

/* ------------------------------------------------ put_from / get_into */

static PyObject *from_common(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, const char *fname, int upsert)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"key", "buffer_ptr", "size", "config"};
    PyObject *a[4];
    mcpy_key_t k;
    uint64_t p, n;
    mcpy_cfg_t cfg;
    if (mcpy_bind(fname, args, nargs, kwnames, names, 4, 3, a) != 0 ||
        mcpy_key(a[0], fname, "key", &k) != 0 || mcpy_u64(a[1], fname, "buffer_ptr", &p) != 0 ||
        mcpy_u64(a[2], fname, "size", &n) != 0 || mcpy_cfg_from(a[3], fname, self->name, &cfg) != 0)
        return NULL;
    mc_status_t st = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        if (!mcpy_store_registered(self, p, n)) {
            st = MC_ERR_INVALID_PARAMS;
        } else {
            Py_BEGIN_ALLOW_THREADS;
            st = upsert ? mc_store_upsert_from(s, k.p, (size_t)k.n, (void *)(uintptr_t)p, n, &cfg.c)
                        : mc_store_put_from(s, k.p, (size_t)k.n, (void *)(uintptr_t)p, n, &cfg.c);
            Py_END_ALLOW_THREADS;
        }
        mcpy_store_exit(self);
    }
    mcpy_cfg_release(&cfg);
    return PyLong_FromLong(upsert ? st : mcpy_put_rc(st));
}

static PyObject *py_put_from(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return from_common(o, args, nargs, kwnames, "put_from", 0);
}

static PyObject *py_upsert_from(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    return from_common(o, args, nargs, kwnames, "upsert_from", 1);
}

static PyObject *py_get_into(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"key", "buffer_ptr", "size"};
    PyObject *a[3];
    mcpy_key_t k;
    uint64_t p, n;
    if (mcpy_bind("get_into", args, nargs, kwnames, names, 3, 3, a) != 0 ||
        mcpy_key(a[0], "get_into", "key", &k) != 0 ||
        mcpy_u64(a[1], "get_into", "buffer_ptr", &p) != 0 ||
        mcpy_u64(a[2], "get_into", "size", &n) != 0)
        return NULL;
    int64_t r = MCPY_NOT_SETUP;
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        if (!mcpy_store_registered(self, p, n)) {
            r = MC_ERR_INVALID_PARAMS;
        } else {
            Py_BEGIN_ALLOW_THREADS;
            r = mc_store_get_into(s, k.p, (size_t)k.n, (void *)(uintptr_t)p, n);
            Py_END_ALLOW_THREADS;
        }
        mcpy_store_exit(self);
    }
    return PyLong_FromLongLong(r);
}

/* _get_ranges(key, dst_ptrs, src_offsets, sizes) -> [bytes read or a
 * negative status]: the fragments of one key of get_into_ranges (store.py
 * walks upstream's nested lists). A fragment whose destination is not inside
 * a registered buffer fails with INVALID_PARAMS and is left out. */
static PyObject *py_get_ranges(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const names[] = {"key", "dst_ptrs", "src_offsets", "sizes"};
    const char *fname = "get_into_ranges";
    PyObject *a[4], *res = NULL;
    mcpy_key_t k;
    uint64_t *dst = NULL, *src = NULL, *sz = NULL, *src2 = NULL, *len2 = NULL;
    void **dst2 = NULL;
    int64_t *r = NULL, *r2 = NULL;
    uint8_t *ok = NULL;
    Py_ssize_t nd = 0, ns = 0, nz = 0;
    if (mcpy_bind(fname, args, nargs, kwnames, names, 4, 4, a) != 0 ||
        mcpy_key(a[0], fname, "all_keys", &k) != 0 ||
        mcpy_u64_list(a[1], fname, "all_dst_offsets", &dst, &nd) != 0 ||
        mcpy_u64_list(a[2], fname, "all_src_offsets", &src, &ns) != 0 ||
        mcpy_u64_list(a[3], fname, "all_sizes", &sz, &nz) != 0 ||
        mcpy_same_len(fname, "all_dst_offsets", nd, "all_src_offsets", ns) != 0 ||
        mcpy_same_len(fname, "all_dst_offsets", nd, "all_sizes", nz) != 0)
        goto out;
    size_t n = (size_t)nd, m = n > 0 ? n : 1;
    r = PyMem_Calloc(m, sizeof(*r));
    r2 = PyMem_Calloc(m, sizeof(*r2));
    src2 = PyMem_Calloc(m, sizeof(*src2));
    len2 = PyMem_Calloc(m, sizeof(*len2));
    dst2 = PyMem_Calloc(m, sizeof(*dst2));
    ok = PyMem_Calloc(m, 1);
    if (r == NULL || r2 == NULL || src2 == NULL || len2 == NULL || dst2 == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    size_t k2 = 0;
    for (size_t i = 0; i < n; i++) {
        r[i] = MC_ERR_INVALID_PARAMS;
        if (!mcpy_store_registered(self, dst[i], sz[i]))
            continue;
        ok[i] = 1;
        dst2[k2] = (void *)(uintptr_t)dst[i];
        src2[k2] = src[i];
        len2[k2++] = sz[i];
    }
    mc_store_t *s = mcpy_store_enter(self);
    if (s == NULL) {
        for (size_t i = 0; i < n; i++)
            r[i] = MCPY_NOT_SETUP;
    } else {
        Py_BEGIN_ALLOW_THREADS;
        mc_store_get_ranges(s, k.p, (size_t)k.n, k2, src2, dst2, len2, r2);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
        for (size_t i = 0, j = 0; i < n; i++)
            if (ok[i])
                r[i] = r2[j++];
    }
    res = mcpy_int_list_i64(r, nd);
out:
    PyMem_Free(dst);
    PyMem_Free(src);
    PyMem_Free(sz);
    PyMem_Free(r);
    PyMem_Free(r2);
    PyMem_Free(src2);
    PyMem_Free(len2);
    PyMem_Free(dst2);
    PyMem_Free(ok);
    return res;
}

/* ------------------------------------------ batch_put_from / batch_get_into */

/* The items of a pointer batch: key i's pieces are parts[first[i] ..
 * + count[i]); ok[i] = 0 for an item whose ranges are not all registered
 * (it fails with INVALID_PARAMS and is left out of the library call). */
typedef struct pbatch {
    Py_ssize_t n;
    mc_slice_t *keys;
    PyObject *hold;
    mc_slice_t *parts;
    size_t *count;
    size_t nparts;
    uint8_t *ok;
} pbatch_t;

static void pbatch_free(pbatch_t *b)
{
    PyMem_Free(b->keys);
    PyMem_Free(b->parts);
    PyMem_Free(b->count);
    PyMem_Free(b->ok);
    Py_CLEAR(b->hold);
}

static int pbatch_alloc(pbatch_t *b, size_t nparts)
{
    size_t m = (size_t)(b->n > 0 ? b->n : 1);
    b->parts = PyMem_Calloc(nparts > 0 ? nparts : 1, sizeof(*b->parts));
    b->count = PyMem_Calloc(m, sizeof(*b->count));
    b->ok = PyMem_Calloc(m, 1);
    if (b->parts == NULL || b->count == NULL || b->ok == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* (keys, buffer_ptrs, sizes): one piece per key. */
static int pbatch_single(pbatch_t *b, mcpy_store_t *self, PyObject *const *a, const char *fname)
{
    uint64_t *ptrs = NULL, *sz = NULL;
    Py_ssize_t np = 0, ns = 0;
    memset(b, 0, sizeof(*b));
    if ((b->keys = key_slices(a[0], fname, "keys", &b->n, &b->hold)) == NULL)
        return -1;
    int rc = -1;
    if (mcpy_u64_list(a[1], fname, "buffer_ptrs", &ptrs, &np) != 0 ||
        mcpy_u64_list(a[2], fname, "sizes", &sz, &ns) != 0)
        goto out;
    int shape = mcpy_shape_ok(fname, "keys", b->n, "buffer_ptrs", np);
    if (shape == 1)
        shape = mcpy_shape_ok(fname, "keys", b->n, "sizes", ns);
    if (shape < 0)
        goto out;
    if (shape == 0) { /* every item fails (ok[] = 0) */
        rc = pbatch_alloc(b, 0);
        goto out;
    }
    if (pbatch_alloc(b, (size_t)b->n) != 0)
        goto out;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        b->parts[i] = (mc_slice_t){(void *)(uintptr_t)ptrs[i], sz[i]};
        b->count[i] = 1;
        b->ok[i] = mcpy_store_registered(self, ptrs[i], sz[i]);
    }
    b->nparts = (size_t)b->n;
    rc = 0;
out:
    PyMem_Free(ptrs);
    PyMem_Free(sz);
    if (rc != 0)
        pbatch_free(b);
    return rc;
}

/* (keys, all_buffer_ptrs, all_sizes): lists of lists, pairwise as long. */
static int pbatch_multi(pbatch_t *b, mcpy_store_t *self, PyObject *const *a, const char *fname)
{
    PyObject *ap = NULL, *as = NULL;
    Py_ssize_t np = 0, ns = 0;
    memset(b, 0, sizeof(*b));
    if ((b->keys = key_slices(a[0], fname, "keys", &b->n, &b->hold)) == NULL)
        return -1;
    int rc = -1;
    if ((ap = mcpy_seq(a[1], fname, "all_buffer_ptrs", &np)) == NULL ||
        (as = mcpy_seq(a[2], fname, "all_sizes", &ns)) == NULL)
        goto out;
    int shape = mcpy_shape_ok(fname, "keys", b->n, "all_buffer_ptrs", np);
    if (shape == 1)
        shape = mcpy_shape_ok(fname, "keys", b->n, "all_sizes", ns);
    if (shape < 0)
        goto out;
    if (shape == 0) { /* every item fails (ok[] = 0) */
        rc = pbatch_alloc(b, 0);
        goto out;
    }
    /* first pass: counts; second: the pieces */
    size_t total = 0;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *x = PyTuple_GET_ITEM(ap, i);
        if (!PyList_Check(x) && !PyTuple_Check(x)) {
            PyErr_Format(PyExc_TypeError,
                         "%s() argument 'all_buffer_ptrs[%zd]' must be a list, not %.100s", fname,
                         i, Py_TYPE(x)->tp_name);
            goto out;
        }
        total += (size_t)PySequence_Size(x);
    }
    if (pbatch_alloc(b, total) != 0)
        goto out;
    size_t at = 0;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        uint64_t *ptrs = NULL, *sz = NULL;
        Py_ssize_t kp = 0, ks = 0;
        char n1[48], n2[48];
        /* the names only for an error (formatting them per key costs ~1 us) */
        PyObject *pl = PyTuple_GET_ITEM(ap, i), *sl = PyTuple_GET_ITEM(as, i);
        int fast =
            (PyList_Check(pl) || PyTuple_Check(pl)) && (PyList_Check(sl) || PyTuple_Check(sl));
        if (!fast || mcpy_u64_list(pl, fname, "all_buffer_ptrs[]", &ptrs, &kp) != 0 ||
            mcpy_u64_list(sl, fname, "all_sizes[]", &sz, &ks) != 0 || kp != ks) {
            PyErr_Clear();
            PyMem_Free(ptrs);
            PyMem_Free(sz);
            ptrs = sz = NULL;
            kp = ks = 0;
            snprintf(n1, sizeof(n1), "all_buffer_ptrs[%zd]", i);
            snprintf(n2, sizeof(n2), "all_sizes[%zd]", i);
            fast = 0;
        }
        if (!fast && (mcpy_u64_list(pl, fname, n1, &ptrs, &kp) != 0 ||
                      mcpy_u64_list(sl, fname, n2, &sz, &ks) != 0)) {
            PyMem_Free(ptrs);
            PyMem_Free(sz);
            goto out;
        }
        if (!fast && (shape = mcpy_shape_ok(fname, n1, kp, n2, ks)) != 1) {
            /* as upstream: one key's lists of different lengths fail every key */
            PyMem_Free(ptrs);
            PyMem_Free(sz);
            if (shape == 0) {
                memset(b->ok, 0, (size_t)b->n);
                memset(b->count, 0, (size_t)b->n * sizeof(*b->count));
                b->nparts = 0;
                rc = 0;
            }
            goto out;
        }
        if (at + (size_t)kp > total) {
            snprintf(n1, sizeof(n1), "all_buffer_ptrs[%zd]", i);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s(): %s changed while it was read", fname, n1);
            PyMem_Free(ptrs);
            PyMem_Free(sz);
            goto out;
        }
        b->ok[i] = kp > 0;
        for (Py_ssize_t q = 0; q < kp; q++) {
            b->parts[at + (size_t)q] = (mc_slice_t){(void *)(uintptr_t)ptrs[q], sz[q]};
            if (!mcpy_store_registered(self, ptrs[q], sz[q]))
                b->ok[i] = 0;
        }
        b->count[i] = (size_t)kp;
        at += (size_t)kp;
        PyMem_Free(ptrs);
        PyMem_Free(sz);
    }
    b->nparts = at;
    rc = 0;
out:
    Py_XDECREF(ap);
    Py_XDECREF(as);
    if (rc != 0)
        pbatch_free(b);
    return rc;
}

/* Run the library on the ok items (packed to the front: keys, pieces,
 * counts) and spread the results back: res[i] for every item. */
typedef enum { PB_PUT, PB_UPSERT, PB_GET } pb_kind_t;

static void pbatch_run(pbatch_t *b, mc_store_t *s, pb_kind_t kind, const mc_replicate_config_t *c,
                       int64_t *res)
{
    size_t m = (size_t)(b->n > 0 ? b->n : 1);
    mc_slice_t *ks = PyMem_RawMalloc(m * sizeof(*ks));
    mc_slice_t *ps = PyMem_RawMalloc((b->nparts > 0 ? b->nparts : 1) * sizeof(*ps));
    size_t *cnt = PyMem_RawMalloc(m * sizeof(*cnt));
    size_t *from = PyMem_RawMalloc(m * sizeof(*from));
    mc_status_t *st = PyMem_RawMalloc(m * sizeof(*st));
    int64_t *r = PyMem_RawMalloc(m * sizeof(*r));
    if (ks == NULL || ps == NULL || cnt == NULL || from == NULL || st == NULL || r == NULL) {
        for (Py_ssize_t i = 0; i < b->n; i++)
            res[i] = MC_ERR_NOMEM;
        goto out;
    }
    size_t k = 0, at = 0, pat = 0;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        size_t c0 = b->count[i];
        if (b->ok[i]) {
            ks[k] = b->keys[i];
            memcpy(ps + pat, b->parts + at, c0 * sizeof(*ps));
            cnt[k] = c0;
            from[k++] = (size_t)i;
            pat += c0;
            res[i] = 0;
        } else {
            res[i] = MC_ERR_INVALID_PARAMS; /* not in registered memory (or no piece) */
        }
        at += c0;
    }
    if (k == 0)
        goto out;
    mc_status_t rc;
    if (kind == PB_GET)
        rc = mc_store_batch_get_parts(s, ks, ps, cnt, k, r);
    else if (kind == PB_UPSERT)
        rc = mc_store_batch_upsert_parts(s, ks, ps, cnt, k, c, st);
    else
        rc = mc_store_batch_put_parts(s, ks, ps, cnt, k, c, st);
    for (size_t j = 0; j < k; j++) {
        int64_t v = rc != MC_OK ? rc : kind == PB_GET ? r[j] : st[j];
        if (kind == PB_PUT)
            v = mcpy_put_rc((mc_status_t)v);
        res[from[j]] = v;
    }
out:
    PyMem_RawFree(ks);
    PyMem_RawFree(ps);
    PyMem_RawFree(cnt);
    PyMem_RawFree(from);
    PyMem_RawFree(st);
    PyMem_RawFree(r);
}

/* batch_put_from / batch_upsert_from / batch_get_into and the multi-buffer
 * forms: bind, build the batch, run it without the GIL, list the results. */
static PyObject *pbatch_call(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, const char *fname, int multi, pb_kind_t kind)
{
    mcpy_store_t *self = (mcpy_store_t *)o;
    static const char *const put_names[] = {"keys", "buffer_ptrs", "sizes", "config"};
    static const char *const mput_names[] = {"keys", "all_buffer_ptrs", "all_sizes", "config"};
    static const char *const mget_names[] = {"keys", "all_buffer_ptrs", "all_sizes",
                                             "prefer_alloc_in_same_node"};
    const char *const *names = !multi ? put_names : kind == PB_GET ? mget_names : mput_names;
    int nnames = !multi && kind == PB_GET ? 3 : 4;
    PyObject *a[4];
    pbatch_t b;
    mcpy_cfg_t cfg = {0};
    if (mcpy_bind(fname, args, nargs, kwnames, names, nnames, 3, a) != 0)
        return NULL;
    if (kind != PB_GET && mcpy_cfg_from(a[3], fname, self->name, &cfg) != 0)
        return NULL;
    int same_node;
    if (kind == PB_GET && multi && a[3] != NULL && mcpy_bool(a[3], &same_node) != 0)
        return NULL; /* a placement hint: reads come from wherever the replicas are */
    if ((multi ? pbatch_multi(&b, self, a, fname) : pbatch_single(&b, self, a, fname)) != 0) {
        mcpy_cfg_release(&cfg);
        return NULL;
    }
    PyObject *ret = NULL;
    int64_t *res = PyMem_Calloc((size_t)(b.n > 0 ? b.n : 1), sizeof(*res));
    if (res == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    mc_store_t *s = mcpy_store_enter(self);
    if (s != NULL) {
        Py_BEGIN_ALLOW_THREADS;
        pbatch_run(&b, s, kind, &cfg.c, res);
        Py_END_ALLOW_THREADS;
        mcpy_store_exit(self);
    } else {
        for (Py_ssize_t i = 0; i < b.n; i++)
            res[i] = MCPY_NOT_SETUP;
    }
    ret = mcpy_int_list_i64(res, b.n);
out:
    PyMem_Free(res);
    pbatch_free(&b);
    mcpy_cfg_release(&cfg);
    return ret;
}

static PyObject *py_batch_put_from(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_put_from", 0, PB_PUT);
}

static PyObject *py_batch_upsert_from(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_upsert_from", 0, PB_UPSERT);
}

static PyObject *py_batch_get_into(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_get_into", 0, PB_GET);
}

static PyObject *py_batch_put_from_multi(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_put_from_multi_buffers", 1, PB_PUT);
}

static PyObject *py_batch_upsert_from_multi(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_upsert_from_multi_buffers", 1, PB_UPSERT);
}

static PyObject *py_batch_get_into_multi(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames)
{
    return pbatch_call(o, args, nargs, kwnames, "batch_get_into_multi_buffers", 1, PB_GET);
}

PyMethodDef mcpy_store_batch_methods[] = {
    MCPY_FAST("put_batch", py_put_batch, "put_batch(keys, values, config=None) -> int"),
    MCPY_FAST("upsert_batch", py_upsert_batch, "upsert_batch(keys, values, config=None) -> int"),
    MCPY_FAST("get_batch", py_get_batch, "get_batch(keys) -> [bytes] (b'' when absent)"),
    MCPY_FAST("batch_get_buffer", py_batch_get_buffer,
              "batch_get_buffer(keys) -> [BufferHandle or None]"),
    MCPY_FAST("batch_is_exist", py_batch_is_exist, "batch_is_exist(keys) -> [1, 0 or negative]"),
    MCPY_FAST("batch_remove", py_batch_remove, "batch_remove(keys, force=False) -> [int]"),
    MCPY_FAST("put_from", py_put_from, "put_from(key, buffer_ptr, size, config=None) -> int"),
    MCPY_FAST("upsert_from", py_upsert_from,
              "upsert_from(key, buffer_ptr, size, config=None) -> int"),
    MCPY_FAST("get_into", py_get_into,
              "get_into(key, buffer_ptr, size) -> bytes read or a negative status"),
    MCPY_FAST("_get_ranges", py_get_ranges,
              "_get_ranges(key, dst_ptrs, src_offsets, sizes) -> [bytes read or negative]: "
              "one key's fragments of get_into_ranges"),
    MCPY_FAST("batch_put_from", py_batch_put_from,
              "batch_put_from(keys, buffer_ptrs, sizes, config=None) -> [int]"),
    MCPY_FAST("batch_upsert_from", py_batch_upsert_from,
              "batch_upsert_from(keys, buffer_ptrs, sizes, config=None) -> [int]"),
    MCPY_FAST("batch_get_into", py_batch_get_into,
              "batch_get_into(keys, buffer_ptrs, sizes) -> [bytes read or negative]"),
    MCPY_FAST("batch_put_from_multi_buffers", py_batch_put_from_multi,
              "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) -> "
              "[int]: key i's value gathered from its buffers, in order"),
    MCPY_FAST("batch_upsert_from_multi_buffers", py_batch_upsert_from_multi,
              "batch_upsert_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) "
              "-> [int]"),
    MCPY_FAST("batch_get_into_multi_buffers", py_batch_get_into_multi,
              "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
              "prefer_alloc_in_same_node=False) -> [bytes read or negative]: scattered in order"),
    {NULL, NULL, 0, NULL},
};
