/* embedlog._clane: the producer's fast lane into one open batch (compiled twin of
 * embedlog.producer_lane.PyLane, which documents the contract; both behave the same).
 *
 * A Lane is attached to the three column lists of a partition's open batch (values, keys,
 * timestamps: the lists the batch writer encodes) and knows the batch's base offset and its
 * estimated size. While armed, add() appends one plain record (bytes key and value, an int
 * timestamp in [0, 2**63)) that leaves the batch below its byte and record limits, and returns
 * its RecordMetadata; anything else returns None and appends nothing (the caller's slow path
 * decides, and raises the errors); join() does the same and returns (metadata, ticket), the
 * ticket attached with the columns (the batch's outcome, for a writer that waits for it),
 * taken atomically with the record. push() appends unconditionally (the slow path, holding
 * the batch's lock, after its own checks).
 *
 * Every method runs without releasing the interpreter lock and calls no Python code, so each
 * is atomic for the other threads: the writer disarms the lane (one call) before it takes the
 * lists. The module declares no free-threading support, so a free-threaded interpreter turns
 * its GIL on when it is imported.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyTypeObject *meta;   /* RecordMetadata: a tuple subclass of 4 items */
    PyObject *index;      /* the partition number */
    PyObject *values;     /* attached column lists, or NULL before the first attach */
    PyObject *keys;
    PyObject *timestamps;
    PyObject *ticket;     /* the opening's ticket (any object; None by default) */
    long long overhead;   /* bytes of record framing counted on top of key and value */
    long long base;
    long long size;
    long long limit;
    long long last;
    long long max_record;
    long long append_time;
    int armed;
    int log_append;
} Lane;

static int
lane_traverse(Lane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->meta);
    Py_VISIT(self->index);
    Py_VISIT(self->values);
    Py_VISIT(self->keys);
    Py_VISIT(self->timestamps);
    Py_VISIT(self->ticket);
    return 0;
}

static int
lane_clear(Lane *self)
{
    self->armed = 0;
    Py_CLEAR(self->meta);
    Py_CLEAR(self->index);
    Py_CLEAR(self->values);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->timestamps);
    Py_CLEAR(self->ticket);
    return 0;
}

static void
lane_dealloc(Lane *self)
{
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
as_int64(PyObject *obj, const char *what, long long *out)
{
    if (!PyLong_CheckExact(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    *out = PyLong_AsLongLong(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
lane_init(Lane *self, PyObject *args, PyObject *kwds)
{
    PyObject *meta, *index, *overhead;
    static char *kwlist[] = {"meta", "index", "overhead", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:Lane", kwlist, &meta, &index, &overhead))
        return -1;
    if (!PyType_Check(meta) || !PyType_IsSubtype((PyTypeObject *)meta, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "meta must be a tuple subclass");
        return -1;
    }
    if (!PyLong_CheckExact(index)) {
        PyErr_SetString(PyExc_TypeError, "index must be an int");
        return -1;
    }
    long long ov;
    if (as_int64(overhead, "overhead", &ov) < 0)
        return -1;
    if (ov < 0) {
        PyErr_SetString(PyExc_ValueError, "overhead must be >= 0");
        return -1;
    }
    lane_clear(self);
    Py_INCREF(meta);
    self->meta = (PyTypeObject *)meta;
    Py_INCREF(index);
    self->index = index;
    self->overhead = ov;
    self->base = self->size = self->limit = self->last = self->max_record = 0;
    self->append_time = -1;
    self->log_append = 0;
    return 0;
}

static PyObject *
lane_attach(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long base, size;
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "attach(values, keys, timestamps, base, size, ticket=None)");
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (!PyList_CheckExact(args[i])) {
            PyErr_SetString(PyExc_TypeError, "attach: the columns must be lists");
            return NULL;
        }
    }
    if (as_int64(args[3], "base", &base) < 0 || as_int64(args[4], "size", &size) < 0)
        return NULL;
    if (base < 0 || size < 0) {
        PyErr_SetString(PyExc_ValueError, "attach: base and size must be >= 0");
        return NULL;
    }
    self->armed = 0;
    Py_INCREF(args[0]);
    Py_XSETREF(self->values, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(self->keys, args[1]);
    Py_INCREF(args[2]);
    Py_XSETREF(self->timestamps, args[2]);
    Py_XSETREF(self->ticket, Py_NewRef(nargs == 6 ? args[5] : Py_None));
    self->base = base;
    self->size = size;
    Py_RETURN_NONE;
}

static PyObject *
lane_arm(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long limit, last, max_record, append_time;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "arm(limit, last, max_record, log_append, append_time)");
        return NULL;
    }
    if (self->values == NULL) {
        PyErr_SetString(PyExc_ValueError, "arm: the lane is not attached");
        return NULL;
    }
    if (as_int64(args[0], "limit", &limit) < 0 || as_int64(args[1], "last", &last) < 0
        || as_int64(args[2], "max_record", &max_record) < 0
        || as_int64(args[4], "append_time", &append_time) < 0)
        return NULL;
    int log_append = PyObject_IsTrue(args[3]);
    if (log_append < 0)
        return NULL;
    self->limit = limit;
    self->last = last;
    self->max_record = max_record;
    self->log_append = log_append;
    self->append_time = append_time;
    self->armed = 1;
    Py_RETURN_NONE;
}

static PyObject *
lane_disarm(Lane *self, PyObject *Py_UNUSED(ignored))
{
    self->armed = 0;
    Py_RETURN_NONE;
}

/* Append one item to each column; on failure the columns are as before. */
static int
append3(Lane *self, PyObject *value, PyObject *key, PyObject *timestamp)
{
    Py_ssize_t n = PyList_GET_SIZE(self->values);
    if (PyList_Append(self->values, value) < 0)
        return -1;
    if (PyList_Append(self->keys, key) < 0)
        goto undo_values;
    if (PyList_Append(self->timestamps, timestamp) < 0)
        goto undo_keys;
    return 0;
undo_keys:
    PyList_SetSlice(self->keys, PyList_GET_SIZE(self->keys) - 1,
                    PyList_GET_SIZE(self->keys), NULL);
undo_values:
    PyList_SetSlice(self->values, n, n + 1, NULL);
    return -1;
}

/* The columns must still be as long as one another (nothing else appends to them unevenly). */
static int
columns_even(Lane *self)
{
    Py_ssize_t n = PyList_GET_SIZE(self->values);
    if (PyList_GET_SIZE(self->keys) != n || PyList_GET_SIZE(self->timestamps) != n) {
        PyErr_SetString(PyExc_ValueError, "the lane's columns have different lengths");
        return 0;
    }
    return 1;
}

static PyObject *
lane_push(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long size;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "push(value, key, timestamp, size)");
        return NULL;
    }
    if (self->values == NULL) {
        PyErr_SetString(PyExc_ValueError, "push: the lane is not attached");
        return NULL;
    }
    if (as_int64(args[3], "size", &size) < 0 || !columns_even(self))
        return NULL;
    if (size < 0 || size > LLONG_MAX - self->size) {
        PyErr_SetString(PyExc_ValueError, "push: size out of range");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(self->values);
    if (append3(self, args[0], args[1], args[2]) < 0)
        return NULL;
    self->size += size;
    return PyLong_FromSsize_t(n);
}

static PyObject *
lane_add(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "add(topic, value, key, timestamp)");
        return NULL;
    }
    PyObject *topic = args[0], *value = args[1], *key = args[2], *ts = args[3];
    if (!self->armed || !PyBytes_CheckExact(value) || !PyBytes_CheckExact(key)
        || !PyLong_CheckExact(ts))
        Py_RETURN_NONE;
    int overflow = 0;
    long long t = PyLong_AsLongLongAndOverflow(ts, &overflow);
    if (t == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || t < 0)
        Py_RETURN_NONE;
    /* Allocate first: allocating a tracked object may run a garbage collection, and so
     * finalizers and other threads; the lane's state is read only after it. */
    PyObject *meta = self->meta->tp_alloc(self->meta, 4);
    if (meta == NULL)
        return NULL;
    /* bytes objects are far smaller than 2**62: no overflow below */
    long long record = self->overhead + (long long)PyBytes_GET_SIZE(value)
                       + (long long)PyBytes_GET_SIZE(key);
    Py_ssize_t n = self->armed ? PyList_GET_SIZE(self->values) : 0;
    if (!self->armed || record > self->max_record || self->size > LLONG_MAX - record
        || self->size + record >= self->limit || (long long)n >= self->last
        || self->base > LLONG_MAX - (long long)n) {
        Py_DECREF(meta);
        Py_RETURN_NONE;  /* too large, or the batch would be full: the slow path writes it */
    }
    PyObject *offset = NULL, *stamp = NULL;
    if (!columns_even(self) || (offset = PyLong_FromLongLong(self->base + (long long)n)) == NULL)
        goto fail;
    if (self->log_append)
        stamp = PyLong_FromLongLong(self->append_time);
    else
        stamp = Py_NewRef(ts);
    if (stamp == NULL || append3(self, value, key, ts) < 0)
        goto fail;
    self->size += record;
    Py_INCREF(topic);
    PyTuple_SET_ITEM(meta, 0, topic);
    Py_INCREF(self->index);
    PyTuple_SET_ITEM(meta, 1, self->index);
    PyTuple_SET_ITEM(meta, 2, offset);
    PyTuple_SET_ITEM(meta, 3, stamp);
    return meta;
fail:
    Py_DECREF(meta);
    Py_XDECREF(offset);
    Py_XDECREF(stamp);
    return NULL;
}

/* add(), and the ticket of the batch the record joined: nothing between the two can run
 * Python code (the pair is allocated first, and add() reads the lane only after its own
 * allocation), so no other thread can write the batch and attach the next one in between. */
static PyObject *
lane_join(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL)
        return NULL;
    PyObject *meta = lane_add(self, args, nargs);
    if (meta == NULL || meta == Py_None) {
        Py_DECREF(pair);
        return meta;
    }
    PyTuple_SET_ITEM(pair, 0, meta);
    PyTuple_SET_ITEM(pair, 1, Py_NewRef(self->ticket != NULL ? self->ticket : Py_None));
    return pair;
}

static PyObject *
lane_get_size(Lane *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->size);
}

static PyObject *
lane_get_armed(Lane *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->armed);
}

static PyMethodDef lane_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))lane_attach, METH_FASTCALL,
     "attach(values, keys, timestamps, base, size, ticket=None): the open batch's columns; "
     "disarms."},
    {"arm", (PyCFunction)(void (*)(void))lane_arm, METH_FASTCALL,
     "arm(limit, last, max_record, log_append, append_time): let add() append."},
    {"disarm", (PyCFunction)lane_disarm, METH_NOARGS, "disarm(): add() appends nothing."},
    {"push", (PyCFunction)(void (*)(void))lane_push, METH_FASTCALL,
     "push(value, key, timestamp, size) -> index: append one record, unchecked."},
    {"add", (PyCFunction)(void (*)(void))lane_add, METH_FASTCALL,
     "add(topic, value, key, timestamp) -> RecordMetadata | None: a plain record."},
    {"join", (PyCFunction)(void (*)(void))lane_join, METH_FASTCALL,
     "join(topic, value, key, timestamp) -> (RecordMetadata, ticket) | None: add(), and the "
     "ticket of the batch the record joined."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lane_getset[] = {
    {"size", (getter)lane_get_size, NULL, "estimated bytes of the batch", NULL},
    {"armed", (getter)lane_get_armed, NULL, "whether add() may append", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "embedlog._clane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The producer's fast lane into one open batch (see embedlog.producer_lane).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
    .tp_getset = lane_getset,
};

static struct PyModuleDef lane_module = {
    PyModuleDef_HEAD_INIT, "_clane", "The producer's fast lane (compiled).", -1, NULL, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__clane(void)
{
    if (PyType_Ready(&LaneType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&lane_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
