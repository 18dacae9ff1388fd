/*
 * first_not_bytes() and first_not_int64(): the scans of append_batch's arguments (values,
 * keys, timestamps) in one call each.
 */
#include "ccodec.h"

ELC_DOC(first_not_bytes,
"first_not_bytes(seq) -> int\n\n"
"The index of the first item of the list or tuple seq that is neither None nor exactly bytes;\n"
"-1 when there is none.");

/* The items of a list or tuple (*n of them; an empty list has none at all); -1 with TypeError
 * for anything else. */
static int
scanned_items(PyObject *seq, const char *fn, PyObject ***items, Py_ssize_t *n)
{
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a list or a tuple", fn);
        return -1;
    }
    *n = PySequence_Fast_GET_SIZE(seq);
    *items = PySequence_Fast_ITEMS(seq);
    return 0;
}

PyObject *
elc_py_first_not_bytes(PyObject *self, PyObject *seq)
{
    (void)self;
    Py_ssize_t n;
    PyObject **items;
    if (scanned_items(seq, "first_not_bytes", &items, &n) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] != Py_None && !PyBytes_CheckExact(items[i]))
            return PyLong_FromSsize_t(i);
    }
    return PyLong_FromLong(-1);
}

ELC_DOC(first_not_int64,
"first_not_int64(seq, out=None) -> int\n\n"
"The index of the first item of the list or tuple seq that is not exactly an int in\n"
"[0, 2**63); -1 when there is none. With ``out`` (a writable int64 column of len(seq)) the\n"
"items before that index are stored in it.");

PyObject *
elc_py_first_not_int64(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *seq, *out = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &seq, &out))
        return NULL;
    Py_ssize_t n;
    PyObject **items;
    if (scanned_items(seq, "first_not_int64", &items, &n) < 0)
        return NULL;
    Py_buffer view;
    int64_t *o = NULL;
    if (out != Py_None) {
        if (elc_get_column(out, &view, 8, 1, n) < 0)
            return NULL;
        o = view.buf;
    }
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        int overflow = 0;
        long long v = PyLong_CheckExact(items[i])
                          ? PyLong_AsLongLongAndOverflow(items[i], &overflow)
                          : -1;
        if (overflow || v < 0)
            bad = i;
        else if (o != NULL)
            o[i] = v;
    }
    if (o != NULL)
        PyBuffer_Release(&view);
    return PyLong_FromSsize_t(bad);
}

ELC_DOC(floor_index,
"floor_index(bases, value) -> int\n\n"
"bisect.bisect_right(bases, value) - 1 for bases, a buffer of int64 in increasing order\n"
"(array('q')): the place of the last item <= value, -1 when there is none. OverflowError for\n"
"a value outside int64.");

PyObject *
elc_py_floor_index(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "floor_index(bases, value) takes 2 arguments");
        return NULL;
    }
    long long value = PyLong_AsLongLong(args[1]);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.itemsize != 8 || view.len % 8 != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "floor_index() takes a buffer of int64");
        return NULL;
    }
    const int64_t *b = (const int64_t *)view.buf;
    Py_ssize_t lo = 0, hi = view.len / 8; /* bisect_right: the first item > value */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (value < b[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(lo - 1);
}
