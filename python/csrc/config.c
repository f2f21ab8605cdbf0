/*
 * config.c - mooncake.store.ReplicateConfig (upstream's current binding):
 * replica_num, soft_pin_action (SoftPinAction), soft_pin_ttl_ms (None or a
 * non-negative 64-bit int), with_soft_pin (older spelling of ENABLE),
 * with_hard_pin, preferred_segment, preferred_segments,
 * prefer_alloc_in_same_node. A C type so that a put reads it without
 * attribute lookups.
 */
#include "py.h"

typedef struct rc {
    PyObject_HEAD uint64_t replica_num;
    int soft_pin_action; /* MC_SOFT_PIN_* */
    int has_ttl;
    uint64_t ttl_ms;
    int with_hard_pin;
    int prefer_same_node;
    PyObject *segment;  /* str */
    PyObject *segments; /* tuple of str */
} rc_t;

/* mooncake.store.SoftPinAction, registered by store.py (_set_soft_pin_enum);
 * the getter returns plain ints before that. */
static PyObject *soft_pin_enum;

PyObject *mcpy_set_soft_pin_enum(PyObject *mod, PyObject *cls);
PyObject *mcpy_set_soft_pin_enum(PyObject *mod, PyObject *cls)
{
    (void)mod;
    Py_XSETREF(soft_pin_enum, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static int rc_init_defaults(rc_t *r)
{
    r->replica_num = 1;
    r->soft_pin_action = MC_SOFT_PIN_PRESERVE;
    r->has_ttl = 0;
    r->ttl_ms = 0;
    r->with_hard_pin = 0;
    r->prefer_same_node = 0;
    Py_XSETREF(r->segment, PyUnicode_FromString(""));
    Py_XSETREF(r->segments, PyTuple_New(0));
    return r->segment != NULL && r->segments != NULL ? 0 : -1;
}

static PyObject *rc_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    rc_t *r = (rc_t *)type->tp_alloc(type, 0);
    if (r != NULL && rc_init_defaults(r) != 0)
        Py_CLEAR(r);
    return (PyObject *)r;
}

static void rc_dealloc(PyObject *self)
{
    rc_t *r = (rc_t *)self;
    Py_XDECREF(r->segment);
    Py_XDECREF(r->segments);
    Py_TYPE(self)->tp_free(self);
}

static int no_delete(PyObject *v, const char *name)
{
    if (v != NULL)
        return 0;
    PyErr_Format(PyExc_AttributeError, "ReplicateConfig.%s cannot be deleted", name);
    return -1;
}

static int set_bool(PyObject *v, int *out, const char *name)
{
    if (no_delete(v, name) != 0)
        return -1;
    if (!PyBool_Check(v) && !PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s must be bool, not %.100s", name,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    return mcpy_bool(v, out);
}

static PyObject *get_replica_num(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(((rc_t *)self)->replica_num);
}

static int set_replica_num(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (no_delete(v, "replica_num") != 0)
        return -1;
    return mcpy_u64(v, "ReplicateConfig", "replica_num", &((rc_t *)self)->replica_num);
}

static PyObject *get_action(PyObject *self, void *c)
{
    (void)c;
    int a = ((rc_t *)self)->soft_pin_action;
    if (soft_pin_enum != NULL)
        return PyObject_CallFunction(soft_pin_enum, "i", a);
    return PyLong_FromLong(a);
}

static int set_action(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (no_delete(v, "soft_pin_action") != 0)
        return -1;
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError,
                     "ReplicateConfig.soft_pin_action must be a SoftPinAction, not %.100s",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    long a = PyLong_AsLong(v);
    if (a == -1 && PyErr_Occurred())
        return -1;
    if (a < MC_SOFT_PIN_PRESERVE || a > MC_SOFT_PIN_DISABLE) {
        PyErr_Format(PyExc_ValueError,
                     "ReplicateConfig.soft_pin_action must be PRESERVE, ENABLE or DISABLE, not %ld",
                     a);
        return -1;
    }
    ((rc_t *)self)->soft_pin_action = (int)a;
    return 0;
}

static PyObject *get_ttl(PyObject *self, void *c)
{
    (void)c;
    rc_t *r = (rc_t *)self;
    if (!r->has_ttl)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(r->ttl_ms);
}

/* None, or an int in [0, 2^64): anything else is a TypeError (upstream). */
static int set_ttl(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    rc_t *r = (rc_t *)self;
    if (no_delete(v, "soft_pin_ttl_ms") != 0)
        return -1;
    if (v == Py_None) {
        r->has_ttl = 0;
        r->ttl_ms = 0;
        return 0;
    }
    unsigned long long x = 0;
    if (PyLong_Check(v) && !PyBool_Check(v)) {
        x = PyLong_AsUnsignedLongLong(v);
        if (!(x == (unsigned long long)-1 && PyErr_Occurred())) {
            r->has_ttl = 1;
            r->ttl_ms = x;
            return 0;
        }
        PyErr_Clear();
    }
    PyErr_Format(PyExc_TypeError,
                 "ReplicateConfig.soft_pin_ttl_ms must be None or an int in [0, 2**64), not %R", v);
    return -1;
}

static PyObject *get_with_soft_pin(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((rc_t *)self)->soft_pin_action == MC_SOFT_PIN_ENABLE);
}

/* the older spelling: True = ENABLE, False = back to PRESERVE */
static int set_with_soft_pin(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    int on;
    if (set_bool(v, &on, "with_soft_pin") != 0)
        return -1;
    rc_t *r = (rc_t *)self;
    if (on)
        r->soft_pin_action = MC_SOFT_PIN_ENABLE;
    else if (r->soft_pin_action == MC_SOFT_PIN_ENABLE)
        r->soft_pin_action = MC_SOFT_PIN_PRESERVE;
    return 0;
}

static PyObject *get_hard(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((rc_t *)self)->with_hard_pin);
}

static int set_hard(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_bool(v, &((rc_t *)self)->with_hard_pin, "with_hard_pin");
}

static PyObject *get_same_node(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(((rc_t *)self)->prefer_same_node);
}

static int set_same_node(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_bool(v, &((rc_t *)self)->prefer_same_node, "prefer_alloc_in_same_node");
}

static PyObject *get_segment(PyObject *self, void *c)
{
    (void)c;
    return Py_NewRef(((rc_t *)self)->segment);
}

static int set_segment(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    const char *s;
    if (no_delete(v, "preferred_segment") != 0 ||
        mcpy_str(v, "ReplicateConfig", "preferred_segment", &s) != 0)
        return -1;
    Py_XSETREF(((rc_t *)self)->segment, Py_NewRef(v));
    return 0;
}

static PyObject *get_segments(PyObject *self, void *c)
{
    (void)c;
    return PySequence_List(((rc_t *)self)->segments); /* a copy, as upstream's */
}

static int set_segments(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    Py_ssize_t n;
    if (no_delete(v, "preferred_segments") != 0)
        return -1;
    PyObject *seq = mcpy_seq(v, "ReplicateConfig", "preferred_segments", &n);
    if (seq == NULL)
        return -1;
    PyObject *t = PySequence_Tuple(seq);
    Py_DECREF(seq);
    if (t == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s;
        char name[48];
        snprintf(name, sizeof(name), "preferred_segments[%zd]", i);
        if (mcpy_str(PyTuple_GET_ITEM(t, i), "ReplicateConfig", name, &s) != 0) {
            Py_DECREF(t);
            return -1;
        }
    }
    Py_XSETREF(((rc_t *)self)->segments, t);
    return 0;
}

static PyObject *rc_repr(PyObject *self)
{
    rc_t *r = (rc_t *)self;
    static const char *const actions[] = {"PRESERVE", "ENABLE", "DISABLE"};
    PyObject *segs = PySequence_List(r->segments);
    if (segs == NULL)
        return NULL;
    PyObject *ttl = r->has_ttl ? PyLong_FromUnsignedLongLong(r->ttl_ms) : Py_NewRef(Py_None);
    if (ttl == NULL) {
        Py_DECREF(segs);
        return NULL;
    }
    PyObject *s = PyUnicode_FromFormat(
        "ReplicateConfig(replica_num=%llu, soft_pin_action=%s, soft_pin_ttl_ms=%R, "
        "with_hard_pin=%s, preferred_segment=%R, preferred_segments=%R, "
        "prefer_alloc_in_same_node=%s)",
        (unsigned long long)r->replica_num, actions[r->soft_pin_action], ttl,
        r->with_hard_pin ? "True" : "False", r->segment, segs,
        r->prefer_same_node ? "True" : "False");
    Py_DECREF(segs);
    Py_DECREF(ttl);
    return s;
}

static PyGetSetDef rc_getset[] = {
    {"replica_num", get_replica_num, set_replica_num, "replicas to place (default 1)", NULL},
    {"soft_pin_action", get_action, set_action,
     "SoftPinAction: PRESERVE (default), ENABLE, DISABLE", NULL},
    {"soft_pin_ttl_ms", get_ttl, set_ttl, "None (the master's default) or ms; ENABLE only", NULL},
    {"with_soft_pin", get_with_soft_pin, set_with_soft_pin,
     "older spelling: True = soft_pin_action ENABLE", NULL},
    {"with_hard_pin", get_hard, set_hard, "never evicted", NULL},
    {"preferred_segment", get_segment, set_segment, "segment tried first (default '')", NULL},
    {"preferred_segments", get_segments, set_segments, "segments tried first, in order", NULL},
    {"prefer_alloc_in_same_node", get_same_node, set_same_node,
     "prefer this client's own segment when no segment is preferred", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ReplicateConfig(**attributes): upstream takes no arguments; keywords set
 * the attributes of the same names (an unknown one raises TypeError). */
static int rc_init(PyObject *self, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "ReplicateConfig() takes no positional arguments");
        return -1;
    }
    if (rc_init_defaults((rc_t *)self) != 0)
        return -1;
    if (kw == NULL)
        return 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kw, &pos, &k, &v)) {
        int known = 0;
        for (const PyGetSetDef *g = rc_getset; g->name != NULL && !known; g++)
            known = PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, g->name) == 0;
        if (!known) {
            PyErr_Format(PyExc_TypeError,
                         "ReplicateConfig() got an unexpected keyword argument '%U'", k);
            return -1;
        }
        if (PyObject_SetAttr(self, k, v) != 0)
            return -1;
    }
    return 0;
}

PyTypeObject mcpy_replicate_config_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake.store.ReplicateConfig",
    .tp_basicsize = sizeof(rc_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Where a put's replicas go and how they are protected (upstream ReplicateConfig).",
    .tp_new = rc_new,
    .tp_init = rc_init,
    .tp_dealloc = rc_dealloc,
    .tp_repr = rc_repr,
    .tp_str = rc_repr,
    .tp_getset = rc_getset,
};

int mcpy_cfg_from(PyObject *o, const char *fname, const char *self_name, mcpy_cfg_t *out)
{
    mc_replicate_config_init(&out->c);
    out->pref = NULL;
    out->hold = NULL;
    if (o == NULL || o == Py_None)
        return 0;
    if (!PyObject_TypeCheck(o, &mcpy_replicate_config_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s() argument 'config' must be ReplicateConfig or None, not %.100s", fname,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    rc_t *r = (rc_t *)o;
    if (r->replica_num > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s(): config.replica_num %llu is too large", fname,
                     (unsigned long long)r->replica_num);
        return -1;
    }
    out->c.replica_num = (uint32_t)r->replica_num;
    out->c.soft_pin_action = r->soft_pin_action;
    out->c.has_soft_pin_ttl = r->has_ttl;
    out->c.soft_pin_ttl_ms = r->ttl_ms;
    out->c.with_hard_pin = r->with_hard_pin;
    /* names: preferred_segment first, then preferred_segments; both kept
     * alive by out->hold while the call runs without the GIL */
    Py_ssize_t ns = PyTuple_GET_SIZE(r->segments);
    int one = PyUnicode_GET_LENGTH(r->segment) > 0;
    int self = !one && ns == 0 && r->prefer_same_node && self_name != NULL && self_name[0];
    size_t n = (size_t)ns + (size_t)one + (size_t)self;
    if (n == 0)
        return 0;
    out->hold = PyTuple_Pack(2, r->segment, r->segments);
    out->pref = PyMem_Malloc(n * sizeof(*out->pref));
    if (out->hold == NULL || out->pref == NULL) {
        mcpy_cfg_release(out);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    size_t k = 0;
    if (self)
        out->pref[k++] = self_name;
    if (one)
        out->pref[k++] = PyUnicode_AsUTF8(r->segment);
    for (Py_ssize_t i = 0; i < ns; i++)
        out->pref[k++] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r->segments, i));
    out->c.preferred_segments = out->pref;
    out->c.n_preferred = k;
    return 0;
}

void mcpy_cfg_release(mcpy_cfg_t *c)
{
    PyMem_Free(c->pref);
    c->pref = NULL;
    Py_CLEAR(c->hold);
}
