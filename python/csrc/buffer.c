/*
 * buffer.c - mooncake.store.BufferHandle: an object's bytes, read straight
 * into memory the handle owns (no copy after the read), exposed through the
 * buffer protocol (writable, 1-D, format "b" as upstream's), ptr(), size()
 * and len().
 * The memory is freed with the handle (after every exported view is gone).
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "py.h"

/* Large buffers come from mmap so freeing them returns the memory at once. */
#define MMAP_MIN (1u << 20)

typedef struct handle {
    PyObject_HEAD void *p;
    size_t len;
} handle_t;

void *mcpy_buf_alloc(size_t len)
{
    if (len >= MMAP_MIN) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    return malloc(len > 0 ? len : 1);
}

void mcpy_buf_free(void *p, size_t len)
{
    if (p == NULL)
        return;
    if (len >= MMAP_MIN)
        munmap(p, len);
    else
        free(p);
}

PyObject *mcpy_buffer_new(void *p, size_t len)
{
    handle_t *h = PyObject_New(handle_t, &mcpy_buffer_type);
    if (h == NULL) {
        mcpy_buf_free(p, len);
        return NULL;
    }
    h->p = p;
    h->len = len;
    return (PyObject *)h;
}

static void handle_dealloc(PyObject *self)
{
    handle_t *h = (handle_t *)self;
    mcpy_buf_free(h->p, h->len);
    PyObject_Free(self);
}

static int handle_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    handle_t *h = (handle_t *)self;
    if (PyBuffer_FillInfo(view, self, h->p, (Py_ssize_t)h->len, 0, flags) != 0)
        return -1;
    /* upstream's handle exports C char, which pybind11 describes as "b"
     * (signed bytes): np.array(handle) is int8 there, so it is here */
    if (flags & PyBUF_FORMAT)
        view->format = "b";
    return 0;
}

static PyBufferProcs handle_as_buffer = {
    .bf_getbuffer = handle_getbuffer,
};

static PyObject *handle_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(((handle_t *)self)->p);
}

static PyObject *handle_size(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(((handle_t *)self)->len);
}

static Py_ssize_t handle_len(PyObject *self)
{
    return (Py_ssize_t)((handle_t *)self)->len;
}

static PySequenceMethods handle_as_seq = {
    .sq_length = handle_len,
};

static PyObject *handle_repr(PyObject *self)
{
    handle_t *h = (handle_t *)self;
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%zu>", h->p, h->len);
}

static PyMethodDef handle_methods[] = {
    {"ptr", handle_ptr, METH_NOARGS, "ptr() -> int: address of the bytes"},
    {"size", handle_size, METH_NOARGS, "size() -> int: number of bytes"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mcpy_buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.BufferHandle",
    .tp_basicsize = sizeof(handle_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An object's bytes (get_buffer): buffer protocol, ptr(), size(), len().",
    .tp_dealloc = handle_dealloc,
    .tp_as_buffer = &handle_as_buffer,
    .tp_as_sequence = &handle_as_seq,
    .tp_methods = handle_methods,
    .tp_repr = handle_repr,
};
