/*
 * run_records(): the records of a point read's run (a run of consecutive whole records of an
 * uncompressed batch, read alone thanks to embedlog/segment/point_memo.py) straight into
 * Record tuples, in one pass with the one-pass record reader of decode() (ccodec.h). It takes
 * only runs of n well-formed records without headers that end exactly at the end of the data,
 * and gives way (None) for anything else: decode_run then decodes the run with its checks
 * and errors, so the two never disagree. file_identity(): the four fields of fstat() the
 * point-read memo keys a segment file by. point_run(): a remembered point read in one call
 * (the file's identity checked against the memo entry's, one pread, run_records' pass).
 */
#include "ccodec.h"

#if defined(__linux__)
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
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

/* The n records of d (size bytes) as a new list of Records; a new reference to None when they
 * are not n well-formed records without headers filling d exactly; NULL with an exception. */
static PyObject *
run_list(PyTypeObject *t, PyObject *head[2], PyObject *ttype, const uint8_t *d, int64_t size,
         long long n, const BatchInfo *bi)
{
    if (n < 1 || n > size / (MIN_BODY + 1))
        return Py_NewRef(Py_None);
    int atomic = PyUnicode_CheckExact(head[0]) && PyLong_CheckExact(head[1]) &&
                 PyLong_CheckExact(ttype);
    PyObject *empty = PyTuple_New(0);
    PyObject *out = empty == NULL ? NULL : PyList_New((Py_ssize_t)n);
    int64_t p = 0;
    for (Py_ssize_t i = 0; out != NULL && i < (Py_ssize_t)n; i++) {
        int64_t len, w;
        FastRecord r;
        if (fast_varint(d, p, size, 5, &len, &w) < 0 || len < MIN_BODY || len > size - p - w ||
            fast_record(d, p + w, p + w + len, bi, &r) < 0) {
            Py_SETREF(out, Py_NewRef(Py_None));
            break;
        }
        PyObject *rec = run_record(t, head, ttype, d, &r, bi, empty, atomic);
        if (rec == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, rec);
        p += w + len;
    }
    if (out != NULL && out != Py_None && p != size)
        Py_SETREF(out, Py_NewRef(Py_None));
    Py_XDECREF(empty);
    return out;
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
    PyObject *out = NULL;
    if (elc_check_record_type(t) == 0)
        out = run_list(t, head, ttype, (const uint8_t *)data.buf, data.len, n, &bi);
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

ELC_DOC(point_run,
"point_run(fd, identity, start, length, n, fields, record_type, topic, partition)\n"
"    -> list | bytes | None\n\n"
"A point read of a remembered run in one call: fstat(fd) compared with identity (the four\n"
"fields file_identity gives, which the memo entry was made under), then one pread of the\n"
"length bytes at start, then its n records as run_records builds them. fields is\n"
"(ttype, base_offset, base_timestamp, max_timestamp, last_offset_delta, log_append) of the\n"
"batch. Gives the list of records; the bytes read when run_records would give way (the\n"
"caller decodes them: decode_run's records or error); None when the file's identity is not\n"
"identity (or is not built here: the caller takes os.fstat's) or the read came up short.\n"
"OSError as os.fstat or os.pread raises it; the GIL is released around the pread only.");

#if defined(__linux__)
/* Whether the open file fd is (dev, ino, size, mtime_ns) == identity now: 1, 0 (other or not
 * comparable here), -1 with OSError. */
static int
same_identity(int fd, PyObject *identity)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    long long sec = (long long)st.st_mtim.tv_sec;
    if (sec > 9000000000LL || sec < -9000000000LL || !PyTuple_Check(identity) ||
        PyTuple_GET_SIZE(identity) != 4)
        return 0;
    unsigned long long dev = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(identity, 0));
    unsigned long long ino = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(identity, 1));
    long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(identity, 2));
    long long mtime = PyLong_AsLongLong(PyTuple_GET_ITEM(identity, 3));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return dev == (unsigned long long)st.st_dev && ino == (unsigned long long)st.st_ino &&
           size == (long long)st.st_size &&
           mtime == sec * 1000000000LL + (long long)st.st_mtim.tv_nsec;
}

/* length bytes of fd at start (one pread, retried on EINTR as os.pread is), or NULL with
 * OSError; a new reference to None for a short read. */
static PyObject *
pread_bytes(int fd, long long start, Py_ssize_t length)
{
    PyObject *buf = PyBytes_FromStringAndSize(NULL, length);
    if (buf == NULL)
        return NULL;
    ssize_t got;
    int err;
    do {
        Py_BEGIN_ALLOW_THREADS
        got = pread(fd, PyBytes_AS_STRING(buf), (size_t)length, (off_t)start);
        err = errno;
        Py_END_ALLOW_THREADS
    } while (got < 0 && err == EINTR && PyErr_CheckSignals() == 0);
    if (got < 0) {
        if (!PyErr_Occurred()) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        Py_DECREF(buf);
        return NULL;
    }
    if (got != length)
        Py_SETREF(buf, Py_NewRef(Py_None));
    return buf;
}
#endif

PyObject *
elc_py_point_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "point_run takes 9 arguments");
        return NULL;
    }
#if defined(__linux__)
    PyObject *fields = args[5];
    PyTypeObject *t = (PyTypeObject *)args[6];
    long fd = PyLong_AsLong(args[0]);
    long long start = PyLong_AsLongLong(args[2]), length = PyLong_AsLongLong(args[3]);
    long long n = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyType_Check(args[6]) || elc_check_record_type(t) < 0)
        return NULL;
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 6) {
        PyErr_SetString(PyExc_TypeError, "fields must be a tuple of 6");
        return NULL;
    }
    BatchInfo bi;
    bi.base_offset = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, 1));
    bi.base_timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, 2));
    bi.max_timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, 3));
    bi.last_offset_delta = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, 4));
    bi.log_append = PyObject_IsTrue(PyTuple_GET_ITEM(fields, 5));
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX_ || start < 0 || length < 1 || length > INT32_MAX_) {
        PyErr_SetString(PyExc_ValueError, "point_run: descriptor, start or length out of range");
        return NULL;
    }
    int same = same_identity((int)fd, args[1]);
    if (same <= 0)
        return same < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *data = pread_bytes((int)fd, start, (Py_ssize_t)length);
    if (data == NULL || data == Py_None)
        return data;
    PyObject *head[2] = {args[7], args[8]};
    PyObject *out = run_list(t, head, PyTuple_GET_ITEM(fields, 0),
                             (const uint8_t *)PyBytes_AS_STRING(data), length, n, &bi);
    if (out == Py_None) {
        Py_DECREF(out);
        return data;
    }
    Py_DECREF(data);
    return out;
#else
    (void)args;
    Py_RETURN_NONE;
#endif
}
