/* args.c - argument binding and conversions of the extension (py.h). */
#include "py.h"

int mcpy_bind(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const char *const *names, int n, int nreq, PyObject **out)
{
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)", fname, n,
                     n == 1 ? "" : "s", nargs);
        return -1;
    }
    for (int i = 0; i < n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
        int at = -1;
        for (int i = 0; i < n; i++) {
            if (PyUnicode_CompareWithASCIIString(kw, names[i]) == 0) {
                at = i;
                break;
            }
        }
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         kw);
            return -1;
        }
        if (out[at] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[at]);
            return -1;
        }
        out[at] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fname,
                         names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

int mcpy_key(PyObject *o, const char *fname, const char *arg, mcpy_key_t *out)
{
    if (PyUnicode_Check(o)) {
        out->p = PyUnicode_AsUTF8AndSize(o, &out->n);
        return out->p != NULL ? 0 : -1;
    }
    if (PyBytes_Check(o)) {
        out->p = PyBytes_AS_STRING(o);
        out->n = PyBytes_GET_SIZE(o);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be str or bytes, not %.100s", fname, arg,
                 Py_TYPE(o)->tp_name);
    return -1;
}

int mcpy_str(PyObject *o, const char *fname, const char *arg, const char **out)
{
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be str, not %.100s", fname, arg,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == NULL)
        return -1;
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s() argument '%s' must not contain NUL characters", fname,
                     arg);
        return -1;
    }
    *out = s;
    return 0;
}

int mcpy_u64_max(PyObject *o, const char *fname, const char *arg, uint64_t max, uint64_t *out)
{
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be int, not %.100s", fname, arg,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (i == NULL)
        return -1;
    /* negative or above 64 bits: OverflowError, reported as a bad value */
    unsigned long long v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s() argument '%s' must be an integer in [0, %llu]", fname,
                     arg, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

int mcpy_u64(PyObject *o, const char *fname, const char *arg, uint64_t *out)
{
    return mcpy_u64_max(o, fname, arg, UINT64_MAX, out);
}

int mcpy_bool(PyObject *o, int *out)
{
    int r = PyObject_IsTrue(o);
    if (r < 0)
        return -1;
    *out = r;
    return 0;
}

PyObject *mcpy_seq(PyObject *o, const char *fname, const char *arg, Py_ssize_t *n)
{
    if (!PyList_Check(o) && !PyTuple_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be a list or tuple, not %.100s",
                     fname, arg, Py_TYPE(o)->tp_name);
        return NULL;
    }
    /* a tuple: a list could be changed by another thread while the call
     * runs without the GIL, dropping the items whose bytes it uses */
    PyObject *s = PySequence_Tuple(o);
    if (s != NULL)
        *n = PyTuple_GET_SIZE(s);
    return s;
}

int mcpy_same_len(const char *fname, const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb)
{
    if (na == nb)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s(): '%s' and '%s' must have the same length (%zd != %zd)",
                 fname, a, b, na, nb);
    return -1;
}

/* logging.getLogger("mooncake").error(msg); -1 with the exception set if
 * that failed (the logger is looked up each time: an error path only). */
static int log_error(const char *msg)
{
    PyObject *mod = PyImport_ImportModule("logging");
    PyObject *lg = mod != NULL ? PyObject_CallMethod(mod, "getLogger", "s", "mooncake") : NULL;
    PyObject *r = lg != NULL ? PyObject_CallMethod(lg, "error", "s", msg) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(lg);
    Py_XDECREF(mod);
    return r != NULL ? 0 : -1;
}

int mcpy_shape_ok(const char *fname, const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb)
{
    if (na == nb)
        return 1;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s(): '%s' and '%s' have different lengths (%zd != %zd)", fname, a,
             b, na, nb);
    return log_error(msg) == 0 ? 0 : -1;
}

int mcpy_u64_list(PyObject *o, const char *fname, const char *arg, uint64_t **out, Py_ssize_t *n)
{
    PyObject *s = mcpy_seq(o, fname, arg, n);
    if (s == NULL)
        return -1;
    uint64_t *v = NULL;
    if (*n > 0 && (v = PyMem_Malloc((size_t)*n * sizeof(*v))) == NULL) {
        Py_DECREF(s);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(s);
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *it = items[i];
        if (PyLong_CheckExact(it)) { /* the common case, without PyNumber_Index */
            v[i] = PyLong_AsUnsignedLongLong(it);
            if (v[i] != (uint64_t)-1 || !PyErr_Occurred())
                continue;
            PyErr_Clear();
        }
        char name[64];
        snprintf(name, sizeof(name), "%s[%zd]", arg, i);
        if (mcpy_u64(it, fname, name, &v[i]) != 0) {
            PyMem_Free(v);
            Py_DECREF(s);
            return -1;
        }
    }
    Py_DECREF(s);
    *out = v;
    return 0;
}

int mcpy_key_list(PyObject *o, const char *fname, const char *arg, mcpy_key_t **keys, Py_ssize_t *n,
                  PyObject **hold)
{
    PyObject *s = mcpy_seq(o, fname, arg, n);
    if (s == NULL)
        return -1;
    mcpy_key_t *k = PyMem_Malloc((size_t)(*n > 0 ? *n : 1) * sizeof(*k));
    if (k == NULL) {
        Py_DECREF(s);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(s);
    for (Py_ssize_t i = 0; i < *n; i++) {
        if (PyUnicode_Check(items[i]) || PyBytes_Check(items[i])) {
            if (mcpy_key(items[i], fname, arg, &k[i]) == 0)
                continue;
            PyMem_Free(k);
            Py_DECREF(s);
            return -1;
        }
        char name[64]; /* only for the error: formatting it per key costs ~1 us */
        snprintf(name, sizeof(name), "%s[%zd]", arg, i);
        if (mcpy_key(items[i], fname, name, &k[i]) != 0) {
            PyMem_Free(k);
            Py_DECREF(s);
            return -1;
        }
    }
    *keys = k;
    *hold = s;
    return 0;
}

PyObject *mcpy_int_list_i64(const int64_t *v, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

PyObject *mcpy_int_list_int(const int *v, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}
