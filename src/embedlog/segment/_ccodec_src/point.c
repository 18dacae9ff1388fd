/*
 * run_records(): the records of a point read's run (a run of consecutive whole records of an
 * uncompressed batch, read alone thanks to embedlog/segment/point_memo.py) straight into
 * Record tuples, in one pass with the one-pass record reader of decode() (ccodec.h). It takes
 * only runs of n well-formed records without headers that end exactly at the end of the data,
 * and gives way (None) for anything else: decode_run then decodes the run with its checks
 * and errors, so the two never disagree. file_identity(): the four fields of fstat() the
 * point-read memo keys a segment file by, taken before every point read.
 */
#include "ccodec.h"

#if defined(__linux__)
#include <errno.h>
#include <sys/stat.h>
#endif

ELC_DOC(run_records,
"run_records(record_type, topic, partition, ttype, data, n, base_offset, base_timestamp,\n"
"            max_timestamp, last_offset_delta, log_append) -> list | None\n\n"
"One record_type(topic, partition, offset, timestamp, ttype, key, value, ()) per record of\n"
"data, a run of n (>= 1) records of a batch, when they are n well-formed records without\n"
"headers filling data exactly: the records decode_run(...).records(...) gives. None for any\n"
"other data (decode_run then reports it or decodes the headers).");

/* The record (body at p + w, ending at end) as a Record, or NULL with an exception. */
static PyObject *
run_record(PyTypeObject *t, PyObject *head[2], PyObject *ttype, const uint8_t *d,
           const FastRecord *r, const BatchInfo *bi, PyObject *empty, int atomic)
{
    PyObject *f[8] = {head[0], head[1], PyLong_FromLongLong(record_offset(r, bi)),
                      PyLong_FromLongLong(record_timestamp(r, bi)), ttype,
                      r->kl < 0 ? Py_NewRef(Py_None)
                                : PyBytes_FromStringAndSize((const char *)d + r->kp, r->kl),
                      r->vl < 0 ? Py_NewRef(Py_None)
                                : PyBytes_FromStringAndSize((const char *)d + r->vp, r->vl),
                      empty};
    PyObject *rec = NULL;
    if (f[2] && f[3] && f[5] && f[6])
        rec = elc_new_record(t, f, atomic);
    for (int k = 2; k < 7; k++) {
        if (k != 4)
            Py_XDECREF(f[k]);
    }
    return rec;
}

PyObject *
elc_py_run_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyTypeObject *t;
    PyObject *head[2], *ttype;
    Py_buffer data;
    long long n;
    BatchInfo bi;
    if (!PyArg_ParseTuple(args, "O!OOOy*LLLLLp", &PyType_Type, &t, &head[0], &head[1], &ttype,
                          &data, &n, &bi.base_offset, &bi.base_timestamp, &bi.max_timestamp,
                          &bi.last_offset_delta, &bi.log_append))
        return NULL;
    PyObject *out = NULL, *empty = NULL;
    const uint8_t *d = (const uint8_t *)data.buf;
    int64_t size = data.len, p = 0;
    if (elc_check_record_type(t) < 0)
        goto done;
    if (n < 1 || n > size / (MIN_BODY + 1)) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    int atomic = PyUnicode_CheckExact(head[0]) && PyLong_CheckExact(head[1]) &&
                 PyLong_CheckExact(ttype);
    empty = PyTuple_New(0);
    out = empty == NULL ? NULL : PyList_New((Py_ssize_t)n);
    for (Py_ssize_t i = 0; out != NULL && i < (Py_ssize_t)n; i++) {
        int64_t len, w;
        FastRecord r;
        if (fast_varint(d, p, size, 5, &len, &w) < 0 || len < MIN_BODY || len > size - p - w ||
            fast_record(d, p + w, p + w + len, &bi, &r) < 0) {
            Py_SETREF(out, Py_NewRef(Py_None));
            goto done;
        }
        PyObject *rec = run_record(t, head, ttype, d, &r, &bi, empty, atomic);
        if (rec == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, rec);
        p += w + len;
    }
    if (out != NULL && p != size)
        Py_SETREF(out, Py_NewRef(Py_None));
done:
    Py_XDECREF(empty);
    PyBuffer_Release(&data);
    return out;
}

ELC_DOC(file_identity,
"file_identity(fd) -> (st_dev, st_ino, st_size, st_mtime_ns) | None\n\n"
"What os.fstat(fd) gives of these four fields (OSError as it raises), without building the\n"
"whole stat result: the identity of a point read's segment file, taken before every read.\n"
"None where it is not built (the caller then uses os.fstat).");

PyObject *
elc_py_file_identity(PyObject *self, PyObject *arg)
{
    (void)self;
#if defined(__linux__)
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX_) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    struct stat st;
    if (fstat((int)fd, &st) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    long long sec = (long long)st.st_mtim.tv_sec, ns = (long long)st.st_mtim.tv_nsec;
    if (sec > 9000000000LL || sec < -9000000000LL) /* st_mtime_ns past int64: os.fstat's */
        Py_RETURN_NONE;
    return Py_BuildValue("(KKLL)", (unsigned long long)st.st_dev,
                         (unsigned long long)st.st_ino, (long long)st.st_size,
                         sec * 1000000000LL + ns);
#else
    (void)arg;
    Py_RETURN_NONE;
#endif
}
