/*
 * SlotBuilder: embedlog._frozen.builder's generated function in C. SlotBuilder(cls, setters)
 * is a callable that builds an instance of cls (object.__new__(cls), nothing else) and sets
 * its slots from its positional arguments, argument i through setters[i] -- the member
 * descriptors of the fields, in order -- by the descriptor's own __set__ (tp_descr_set: the
 * same checks and the same object as the Python function's `_set_name(self, name)` calls),
 * with no Python frame between. Used for what is built per stored batch read or written: a
 * batch header, its decoded columns, a RecordBatch.
 */
#include "ccodec.h"

#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    PyObject *setters; /* a tuple of data descriptors, one per argument */
    PyObject *empty;   /* () for object.__new__ */
    vectorcallfunc vectorcall;
} SlotBuilder;

static PyObject *
builder_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SlotBuilder *b = (SlotBuilder *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), want = PyTuple_GET_SIZE(b->setters);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_Format(PyExc_TypeError, "building %.100s takes positional fields only",
                     b->cls->tp_name);
        return NULL;
    }
    if (n != want) {
        PyErr_Format(PyExc_TypeError, "building %.100s takes %zd fields, not %zd",
                     b->cls->tp_name, want, n);
        return NULL;
    }
    PyObject *obj = PyBaseObject_Type.tp_new(b->cls, b->empty, NULL);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *setter = PyTuple_GET_ITEM(b->setters, i);
        if (Py_TYPE(setter)->tp_descr_set(setter, obj, args[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *
builder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *cls, *setters;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "SlotBuilder(cls, setters) takes no keywords");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!:SlotBuilder", &PyType_Type, &cls, &PyTuple_Type, &setters))
        return NULL;
    if (((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_Format(PyExc_TypeError, "%.100s has its own __new__",
                     ((PyTypeObject *)cls)->tp_name);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(setters); i++) {
        if (Py_TYPE(PyTuple_GET_ITEM(setters, i))->tp_descr_set == NULL) {
            PyErr_SetString(PyExc_TypeError, "every setter must be a data descriptor");
            return NULL;
        }
    }
    SlotBuilder *b = (SlotBuilder *)type->tp_alloc(type, 0);
    if (b == NULL)
        return NULL;
    b->empty = PyTuple_New(0);
    if (b->empty == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    b->cls = (PyTypeObject *)Py_NewRef(cls);
    b->setters = Py_NewRef(setters);
    b->vectorcall = builder_call;
    return (PyObject *)b;
}

static int
builder_traverse(SlotBuilder *b, visitproc visit, void *arg)
{
    Py_VISIT(b->cls);
    Py_VISIT(b->setters);
    return 0;
}

static int
builder_clear(SlotBuilder *b)
{
    Py_CLEAR(b->cls);
    Py_CLEAR(b->setters);
    Py_CLEAR(b->empty);
    return 0;
}

static void
builder_dealloc(SlotBuilder *b)
{
    PyObject_GC_UnTrack(b);
    builder_clear(b);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

PyTypeObject elc_builder_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "embedlog.segment._ccodec.SlotBuilder",
    .tp_doc = PyDoc_STR(
        "SlotBuilder(cls, setters)(*fields) -> cls instance\n\n"
        "object.__new__(cls) with field i set through setters[i].__set__ (the member\n"
        "descriptors of a frozen, slotted dataclass's fields, in order): its __init__ without\n"
        "a Python frame. TypeError for keywords or another number of fields."),
    .tp_basicsize = sizeof(SlotBuilder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = builder_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SlotBuilder, vectorcall),
    .tp_traverse = (traverseproc)builder_traverse,
    .tp_clear = (inquiry)builder_clear,
    .tp_dealloc = (destructor)builder_dealloc,
};
