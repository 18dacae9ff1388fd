/*
 * deferred(fn, args): an iterator over what fn(*args) gives, fn called at the first next():
 * what the generator `yield from fn(*args)` does (lazy: nothing runs before the first next();
 * an exception of fn or of the iterator it gives ends it, as it ends the generator), without a
 * generator frame to create and resume. A point read (Log.read(..., max_records=k)) hands
 * its records out through one.
 */
#include "ccodec.h"

typedef struct {
    PyObject_HEAD
    PyObject *fn;   /* until the first next() */
    PyObject *args; /* until the first next() */
    PyObject *it;   /* iter(fn(*args)) until exhausted */
} Deferred;

static int
deferred_traverse(Deferred *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->args);
    Py_VISIT(self->it);
    return 0;
}

static int
deferred_clear(Deferred *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->args);
    Py_CLEAR(self->it);
    return 0;
}

static void
deferred_dealloc(Deferred *self)
{
    PyObject_GC_UnTrack(self);
    deferred_clear(self);
    PyObject_GC_Del(self);
}

static PyObject *
deferred_next(Deferred *self)
{
    if (self->it == NULL) {
        PyObject *fn = self->fn, *args = self->args;
        if (fn == NULL)
            return NULL; /* exhausted, or ended by an exception */
        self->fn = self->args = NULL;
        PyObject *got = PyObject_Call(fn, args, NULL);
        Py_DECREF(fn);
        Py_DECREF(args);
        if (got == NULL)
            return NULL;
        self->it = PyObject_GetIter(got);
        Py_DECREF(got);
        if (self->it == NULL)
            return NULL;
    }
    PyObject *item = (*Py_TYPE(self->it)->tp_iternext)(self->it);
    if (item == NULL)
        Py_CLEAR(self->it); /* the error (or StopIteration's absence) stays as it is */
    return item;
}

PyTypeObject elc_deferred_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "embedlog.segment._ccodec.Deferred",
    .tp_basicsize = sizeof(Deferred),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An iterator over fn(*args), called at the first next() (see deferred()).",
    .tp_traverse = (traverseproc)deferred_traverse,
    .tp_clear = (inquiry)deferred_clear,
    .tp_dealloc = (destructor)deferred_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)deferred_next,
};

ELC_DOC(deferred,
"deferred(fn, args) -> iterator\n\n"
"An iterator over fn(*args) (args a tuple), fn called at the first next(): what the\n"
"generator `yield from fn(*args)` gives, item for item and exception for exception.");

PyObject *
elc_py_deferred(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyCallable_Check(args[0]) || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "deferred(fn, args) takes a callable and a tuple");
        return NULL;
    }
    Deferred *d = PyObject_GC_New(Deferred, &elc_deferred_type);
    if (d == NULL)
        return NULL;
    d->fn = Py_NewRef(args[0]);
    d->args = Py_NewRef(args[1]);
    d->it = NULL;
    PyObject_GC_Track(d);
    return (PyObject *)d;
}
