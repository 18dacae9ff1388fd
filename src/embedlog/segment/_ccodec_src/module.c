/*
 * The module embedlog.segment._ccodec: its shared objects and column helper, the method
 * table over the functions of the other files, the ArrowSink and SlotBuilder types and
 * PyInit__ccodec (the only exported symbol).
 */
#include "ccodec.h"

PyObject *elc_corrupt_batch_error;
PyObject *elc_crc32c;

/* A contiguous buffer of one fixed item size (the numpy columns handed in). */
int
elc_get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, Py_ssize_t n)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len != n * itemsize) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "column of the wrong item size or length");
        return -1;
    }
    return 0;
}

static PyMethodDef methods[] = {
    {"decode", elc_py_decode, METH_VARARGS, elc_decode_doc},
    {"decode_stored", elc_py_decode_stored, METH_VARARGS, elc_decode_stored_doc},
    {"slices", elc_py_slices, METH_VARARGS, elc_slices_doc},
    {"gather", elc_py_gather, METH_O, elc_gather_doc},
    {"records", elc_py_records, METH_VARARGS, elc_records_doc},
    {"encode", elc_py_encode, METH_VARARGS, elc_encode_doc},
    {"encode_listed", elc_py_encode_listed, METH_VARARGS, elc_encode_listed_doc},
    {"first_not_bytes", elc_py_first_not_bytes, METH_O, elc_first_not_bytes_doc},
    {"first_not_int64", elc_py_first_not_int64, METH_VARARGS, elc_first_not_int64_doc},
    {"run_records", elc_py_run_records, METH_VARARGS, elc_run_records_doc},
    {"file_identity", elc_py_file_identity, METH_O, elc_file_identity_doc},
    {"point_run", (PyCFunction)(void (*)(void))elc_py_point_run, METH_FASTCALL,
     elc_point_run_doc},
    {"deferred", (PyCFunction)(void (*)(void))elc_py_deferred, METH_FASTCALL,
     elc_deferred_doc},
    {"floor_index", (PyCFunction)(void (*)(void))elc_py_floor_index, METH_FASTCALL,
     elc_floor_index_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ccodec",
    .m_doc = "The compiled core of embedlog's v2 batch codec (see embedlog.segment.decode/encode).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__ccodec(void)
{
    PyObject *errors = PyImport_ImportModule("embedlog.errors");
    if (errors == NULL)
        return NULL;
    elc_corrupt_batch_error = PyObject_GetAttrString(errors, "CorruptBatchError");
    Py_DECREF(errors);
    PyObject *crc = PyImport_ImportModule("crc32c");
    if (crc == NULL)
        return NULL;
    elc_crc32c = PyObject_GetAttrString(crc, "crc32c");
    Py_DECREF(crc);
    if (elc_corrupt_batch_error == NULL || elc_crc32c == NULL ||
        PyType_Ready(&elc_sink_type) < 0 || PyType_Ready(&elc_builder_type) < 0 ||
        PyType_Ready(&elc_deferred_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddObjectRef(m, "ArrowSink", (PyObject *)&elc_sink_type) < 0 ||
                      PyModule_AddObjectRef(m, "SlotBuilder", (PyObject *)&elc_builder_type) < 0))
        Py_CLEAR(m);
    return m;
}
