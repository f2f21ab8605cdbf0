/*
 * module.c - mooncake._mooncake: module init, the library version, the
 * log controls, and the status table the Python side turns into constants.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/log.h"
#include "mooncake/version.h"
#include "py.h"

/* ----------------------------------------------------------------- log */

/* The log sink used by mooncake.log_to_python(): each line goes, with its
 * level as a leading digit, to a non-blocking pipe a Python thread reads.
 * No GIL here (the library logs from its reactor threads); a full pipe drops
 * the line rather than stall the data path. */
static int log_pipe_fd = -1;

static void pipe_sink(void *arg, mc_log_level_t level, const char *component, const char *line,
                      size_t len)
{
    (void)arg;
    (void)component;
    char buf[2200];
    if (len > sizeof(buf) - 3)
        len = sizeof(buf) - 3;
    buf[0] = (char)('0' + (int)level);
    memcpy(buf + 1, line, len);
    buf[len + 1] = '\n';
    ssize_t w = write(log_pipe_fd, buf, len + 2); /* one write: atomic below PIPE_BUF */
    (void)w;
}

PyDoc_STRVAR(log_pipe_doc, "_log_pipe(fd) -> None\n\n"
                           "Send library log lines to fd (made non-blocking), one per line, the "
                           "level digit first; -1 restores stderr.");

static PyObject *py_log_pipe(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    if (fd < 0) {
        mc_log_set_fd(2);
        log_pipe_fd = -1;
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        log_pipe_fd = fd;
        mc_log_set_sink(pipe_sink, NULL);
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_log_level_doc,
             "set_log_level(spec) -> None\n\n"
             "Library log levels: 'warn', or 'info,rpc=debug' (levels error|warn|info|debug|trace; "
             "components core conf reactor rpc transport tcp rdma metadata master client tier http "
             "ha). ValueError on a malformed spec (nothing changes).");

static PyObject *py_set_log_level(PyObject *mod, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)mod;
    static const char *const names[] = {"spec"};
    PyObject *a[1];
    const char *spec;
    if (mcpy_bind("set_log_level", args, nargs, kwnames, names, 1, 1, a) != 0 ||
        mcpy_str(a[0], "set_log_level", "spec", &spec) != 0)
        return NULL;
    char why[256] = "";
    if (mc_log_set_spec(spec, why, sizeof(why)) != MC_OK) {
        PyErr_Format(PyExc_ValueError, "set_log_level(): %s", why);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* -------------------------------------------------------------- status */

static PyObject *py_version(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyUnicode_FromString(mc_version());
}

PyDoc_STRVAR(status_str_doc, "status_str(code) -> str\n\n"
                             "Name of a status code, e.g. status_str(-704) == "
                             "'OBJECT_NOT_FOUND'; 'UNKNOWN_STATUS' for others.");

static PyObject *py_status_str(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(mc_status_str((mc_status_t)v));
}

static PyObject *py_status_msg(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(mc_status_msg((mc_status_t)v));
}

/* [(name without MC_ / MC_ERR_, value)] of every status. */
static PyObject *py_status_table(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    static const struct {
        const char *name;
        int value;
    } rows[] = {
#define MCPY_ROW(name, value, msg) {#name, value},
        MC_STATUS_TABLE(MCPY_ROW)
#undef MCPY_ROW
    };
    size_t n = sizeof(rows) / sizeof(rows[0]);
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (l == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *nm = rows[i].name;
        if (strncmp(nm, "MC_ERR_", 7) == 0)
            nm += 7;
        else if (strncmp(nm, "MC_", 3) == 0)
            nm += 3;
        PyObject *t = Py_BuildValue("(si)", nm, rows[i].value);
        if (t == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

PyObject *mcpy_set_soft_pin_enum(PyObject *mod, PyObject *cls);
int mcpy_store_type_ready(void);

static PyMethodDef module_methods[] = {
    {"_set_soft_pin_enum", mcpy_set_soft_pin_enum, METH_O,
     "internal: the SoftPinAction class ReplicateConfig.soft_pin_action returns"},
    {"version", py_version, METH_NOARGS, "version() -> str: libmooncake's version."},
    MCPY_FAST("set_log_level", py_set_log_level, set_log_level_doc),
    {"_log_pipe", py_log_pipe, METH_O, log_pipe_doc},
    {"status_str", py_status_str, METH_O, status_str_doc},
    {"status_msg", py_status_msg, METH_O, "status_msg(code) -> str: one sentence about it."},
    {"_status_table", py_status_table, METH_NOARGS, "[(name, value)] of every status code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "mooncake._mooncake",
    .m_doc = "C extension of the mooncake package (libmooncake's store and transfer engine).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__mooncake(void);

PyMODINIT_FUNC PyInit__mooncake(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "__version__", mc_version()) != 0 ||
        PyType_Ready(&mcpy_replicate_config_type) != 0 || PyType_Ready(&mcpy_buffer_type) != 0 ||
        mcpy_store_type_ready() != 0 || PyType_Ready(&mcpy_engine_type) != 0 ||
        PyModule_AddObjectRef(m, "ReplicateConfig", (PyObject *)&mcpy_replicate_config_type) != 0 ||
        PyModule_AddObjectRef(m, "BufferHandle", (PyObject *)&mcpy_buffer_type) != 0 ||
        PyModule_AddObjectRef(m, "Store", (PyObject *)&mcpy_store_type) != 0 ||
        PyModule_AddObjectRef(m, "Engine", (PyObject *)&mcpy_engine_type) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
