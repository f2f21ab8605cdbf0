/*
 * py.h - what the files of the extension module mooncake._mooncake share.
 *
 * The module is a thin layer over the public C ABI (include/mooncake/):
 * argument parsing and conversion with the GIL held, then the library call
 * with the GIL released (every call that can block: RPC, transfers, waits),
 * then the result converted back. It holds no Python object across a
 * released-GIL section except through a reference taken before it.
 *
 * Files: module.c (module init, version, logging, status table),
 * args.c (argument parsing for METH_FASTCALL | METH_KEYWORDS, conversions),
 * config.c (ReplicateConfig), buffer.c (BufferHandle), store.c and
 * store_batch.c (the store client type), engine.c (the transfer engine type).
 */
#ifndef MC_PY_H
#define MC_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "mooncake/store.h"
#include "mooncake/transfer.h"

/* Method table entry of a METH_FASTCALL | METH_KEYWORDS function (the cast
 * through void (*)(void) is the documented way to store it). */
#define MCPY_FAST(name, fn, doc)                                                                   \
    {                                                                                              \
        name, (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS, doc                \
    }

typedef PyObject *(*mcpy_fast_fn)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

/* ------------------------------------------------------------- args.c */

/* Bind positional args and keywords to names[0..n): out[i] receives a
 * borrowed reference, or NULL for an optional argument not given. The first
 * nreq names are required. Unknown keywords, too many arguments, a name
 * given twice and a missing required one raise TypeError naming the
 * function and the argument. 0 on success, -1 with the exception set. */
int mcpy_bind(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n, int nreq, PyObject **out);

/* A key: str (its UTF-8 bytes) or bytes. The pointer is borrowed from o
 * (valid while o is referenced). TypeError naming fname/arg otherwise. */
typedef struct mcpy_key {
    const char *p;
    Py_ssize_t n;
} mcpy_key_t;
int mcpy_key(PyObject *o, const char *fname, const char *arg, mcpy_key_t *out);

/* A str argument as UTF-8 (borrowed from o). */
int mcpy_str(PyObject *o, const char *fname, const char *arg, const char **out);

/* A non-negative integer (int, bool, or anything with __index__) that fits
 * 64 bits: TypeError for other types, ValueError when negative or too big. */
int mcpy_u64(PyObject *o, const char *fname, const char *arg, uint64_t *out);
/* The same, bounded by max (ValueError above it). */
int mcpy_u64_max(PyObject *o, const char *fname, const char *arg, uint64_t max, uint64_t *out);
/* A truth value: any object (Python truthiness), as upstream's bool args. */
int mcpy_bool(PyObject *o, int *out);

/* A list or tuple argument as a tuple (a snapshot that holds its items: a
 * new reference the caller releases; PySequence_Fast_* work on it); *n its
 * length. TypeError naming the argument for other types (str included). */
PyObject *mcpy_seq(PyObject *o, const char *fname, const char *arg, Py_ssize_t *n);

/* ValueError "fname(): a and b must have the same length (x != y)". */
int mcpy_same_len(const char *fname, const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb);

/* List arguments that go together, as upstream treats them: lengths that
 * differ are not an exception but the call's error code (the caller returns
 * it), logged once naming both (logger "mooncake"). 1 when na == nb, 0 when
 * they differ (logged), -1 when the logging raised (exception set). */
int mcpy_shape_ok(const char *fname, const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb);

/* Arrays of n uint64 from a list argument (mcpy_seq + mcpy_u64 per item,
 * errors naming "arg[i]"). *out is PyMem_Malloc'd (NULL when n == 0). */
int mcpy_u64_list(PyObject *o, const char *fname, const char *arg, uint64_t **out, Py_ssize_t *n);

/* Keys of a list argument: *keys PyMem_Malloc'd (mcpy_key each); the list
 * reference (*hold) keeps the key bytes alive until the caller drops it. */
int mcpy_key_list(PyObject *o, const char *fname, const char *arg, mcpy_key_t **keys, Py_ssize_t *n,
                  PyObject **hold);

/* Python list of n ints. */
PyObject *mcpy_int_list_i64(const int64_t *v, Py_ssize_t n);
PyObject *mcpy_int_list_int(const int *v, Py_ssize_t n);

/* ----------------------------------------------------------- config.c */

extern PyTypeObject mcpy_replicate_config_type;

/* The library's replicate config for the `config` argument (None or a
 * ReplicateConfig): preferred segment names are copied into *names (free
 * with mcpy_cfg_release). TypeError for other types, ValueError for values
 * the library refuses. 0 or -1. When self_name is not NULL and the config
 * asks prefer_alloc_in_same_node, the local segment is preferred. */
typedef struct mcpy_cfg {
    mc_replicate_config_t c;
    const char **pref;
    PyObject *hold; /* references keeping the names alive */
} mcpy_cfg_t;
int mcpy_cfg_from(PyObject *o, const char *fname, const char *self_name, mcpy_cfg_t *out);
void mcpy_cfg_release(mcpy_cfg_t *c);

/* ----------------------------------------------------------- buffer.c */

extern PyTypeObject mcpy_buffer_type;

/* A BufferHandle owning len bytes at p (allocated with mcpy_buf_alloc). */
void *mcpy_buf_alloc(size_t len);
void mcpy_buf_free(void *p, size_t len);
PyObject *mcpy_buffer_new(void *p, size_t len);

/* ------------------------------------------------------------ store.c */

extern PyTypeObject mcpy_store_type;

typedef struct mcpy_store {
    PyObject_HEAD
        /* Life of the handle: calls take s under mu and count themselves;
         * close waits (GIL released) until no call runs, then closes. */
        pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_store_t *s;
    int calls;
    int closing;
    char name[300]; /* get_hostname() */
    /* buffers registered through this object (mu): the pointer-taking
     * calls refuse ranges outside them instead of touching wild memory */
    struct mcpy_range {
        uint64_t lo, hi;
    } * regs;
    size_t nregs, cap_regs;
    /* get(): the size of bytes object to make before the call (0: none),
     * and how many gets in a row were smaller (GIL) */
    uint64_t get_hint;
    unsigned get_hint_age;
} mcpy_store_t;

/* Whether [p, p+len) lies in one buffer registered with register_buffer. */
int mcpy_store_registered(mcpy_store_t *self, uint64_t p, uint64_t len);

/* Take the handle for one call: NULL when the store is not set up (or is
 * closing); then the caller returns the method's error value. */
mc_store_t *mcpy_store_enter(mcpy_store_t *self);
void mcpy_store_exit(mcpy_store_t *self);

/* Status for "not set up": upstream's INVALID_PARAMS. */
#define MCPY_NOT_SETUP MC_ERR_INVALID_PARAMS

/* store_batch.c: the batch and zero-copy methods, appended to the type's
 * table by store.c. */
extern PyMethodDef mcpy_store_batch_methods[];

/* put-style statuses as Python returns them: an existing key is success. */
static inline int mcpy_put_rc(mc_status_t st)
{
    return st == MC_ERR_OBJECT_ALREADY_EXISTS ? 0 : (int)st;
}

/* ----------------------------------------------------------- engine.c */

extern PyTypeObject mcpy_engine_type;

#endif /* MC_PY_H */
