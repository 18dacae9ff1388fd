/*
 * slices(), gather() and records(): Python objects and Arrow buffers from the columns
 * decode() filled. Every position is checked against its data before a copy.
 */
#include "ccodec.h"

/* Item i of a bytes column: data[pos:pos+len], None when len < 0. */
static inline PyObject *
column_item(const char *d, Py_ssize_t size, int64_t pos, int32_t len)
{
    if (len < 0)
        return Py_NewRef(Py_None);
    if (pos < 0 || pos + len > size) {
        PyErr_SetString(PyExc_ValueError, "column position outside the data");
        return NULL;
    }
    return PyBytes_FromStringAndSize(d + pos, len);
}

ELC_DOC(slices,
"slices(data, pos, lens) -> list\n\n"
"[data[p:p+n] or None if n < 0 for p, n in zip(pos, lens)]; pos int64, lens int32.");

PyObject *
elc_py_slices(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *data, *opos, *olen;
    Py_buffer pos, len;
    if (!PyArg_ParseTuple(args, "SOO", &data, &opos, &olen))
        return NULL;
    if (PyObject_GetBuffer(olen, &len, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = len.len / 4;
    if (len.itemsize != 4 || elc_get_column(opos, &pos, 8, 0, n) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "column of the wrong item size");
        PyBuffer_Release(&len);
        return NULL;
    }
    const char *d = PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    const int64_t *p = pos.buf;
    const int32_t *l = len.buf;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = column_item(d, size, p[i], l[i]);
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
    PyBuffer_Release(&pos);
    PyBuffer_Release(&len);
    return out;
}

ELC_DOC(gather,
"gather(chunks) -> (offsets, data, nulls)\n\n"
"Arrow's binary layout of the items of ``chunks``, a sequence of (data, pos, lens) with\n"
"pos int64 and lens int32 columns: item i of a chunk is data[pos[i]:pos[i]+lens[i]], null\n"
"(an empty item) when lens[i] < 0. ``offsets`` holds n + 1 native int32 item offsets into\n"
"``data``, the items copied back to back; ``nulls`` counts the null items. ValueError when a\n"
"position lies outside its chunk's data, OverflowError when the items pass 2 GiB (int32\n"
"offsets).");

/* One chunk of gather(): its data and its two columns, held while copying. */
typedef struct {
    PyObject *data;
    Py_buffer pos, len;
    Py_ssize_t n;
} gather_chunk;

static int
gather_open(PyObject *item, gather_chunk *c)
{
    PyObject *opos, *olen;
    if (!PyArg_ParseTuple(item, "SOO;gather chunk must be (bytes, pos, lens)", &c->data,
                          &opos, &olen))
        return -1;
    if (PyObject_GetBuffer(olen, &c->len, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    c->n = c->len.len / 4;
    if (c->len.itemsize != 4 || elc_get_column(opos, &c->pos, 8, 0, c->n) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "column of the wrong item size");
        PyBuffer_Release(&c->len);
        return -1;
    }
    return 0;
}

/* Bytes of the items of one column (nulls counted into *nulls), or -1 with ValueError when
 * one lies outside the data (also the Arrow sink's extend()). */
int64_t
elc_column_bytes(const int64_t *pos, const int32_t *len, Py_ssize_t n, int64_t size,
             Py_ssize_t *nulls)
{
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (len[i] < 0) {
            (*nulls)++;
            continue;
        }
        if (pos[i] < 0 || pos[i] > size - len[i]) {
            PyErr_SetString(PyExc_ValueError, "column position outside the data");
            return -1;
        }
        total += len[i];
    }
    return total;
}

/* Bytes of chunk c's items, or -1 with ValueError when one lies outside its data. */
static int64_t
gather_size(const gather_chunk *c, Py_ssize_t *nulls)
{
    return elc_column_bytes(c->pos.buf, c->len.buf, c->n, PyBytes_GET_SIZE(c->data), nulls);
}

PyObject *
elc_py_gather(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "gather() takes a sequence of chunks");
    if (seq == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq), opened = 0, n = 0, nulls = 0;
    gather_chunk *cs = PyMem_Calloc(k ? k : 1, sizeof(gather_chunk));
    PyObject *offsets = NULL, *data = NULL, *result = NULL;
    int64_t total = 0;
    if (cs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    while (opened < k) {
        if (gather_open(PySequence_Fast_GET_ITEM(seq, opened), &cs[opened]) < 0)
            goto done;
        gather_chunk *c = &cs[opened++];
        int64_t size = gather_size(c, &nulls);
        if (size < 0)
            goto done;
        total += size;
        n += c->n;
        if (total > INT32_MAX_ || n >= INT32_MAX_ / 4) {
            PyErr_SetString(PyExc_OverflowError, "items pass 2 GiB");
            goto done;
        }
    }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, total);
    if (offsets == NULL || data == NULL)
        goto done;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    char *out = PyBytes_AS_STRING(data);
    int32_t at = 0;
    *o++ = 0;
    for (Py_ssize_t j = 0; j < k; j++) {
        const char *d = PyBytes_AS_STRING(cs[j].data);
        const int64_t *p = cs[j].pos.buf;
        const int32_t *l = cs[j].len.buf;
        for (Py_ssize_t i = 0; i < cs[j].n; i++) {
            if (l[i] > 0) {
                memcpy(out + at, d + p[i], (size_t)l[i]);
                at += l[i];
            }
            *o++ = at;
        }
    }
    result = Py_BuildValue("(OOn)", offsets, data, nulls);
done:
    for (Py_ssize_t j = 0; j < opened; j++) {
        PyBuffer_Release(&cs[j].pos);
        PyBuffer_Release(&cs[j].len);
    }
    PyMem_Free(cs);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    Py_DECREF(seq);
    return result;
}

int
elc_check_record_type(PyTypeObject *t)
{
    if (!PyType_IsSubtype(t, &PyTuple_Type) || t->tp_basicsize != PyTuple_Type.tp_basicsize ||
        t->tp_itemsize != sizeof(PyObject *) || t->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record type must be a slotted tuple subclass");
        return -1;
    }
    return 0;
}

/* One Record(topic, partition, offset, timestamp, ttype, key, value, headers); untracked
 * by the GC when every field is atomic (or an untracked tuple). Also run_records (point.c). */
PyObject *
elc_new_record(PyTypeObject *t, PyObject *fields[8], int atomic_prefix)
{
    PyObject *r = t->tp_alloc(t, 8);
    if (r == NULL)
        return NULL;
    for (int k = 0; k < 8; k++)
        PyTuple_SET_ITEM(r, k, Py_NewRef(fields[k]));
    if (atomic_prefix && !PyObject_GC_IsTracked(fields[7]))
        PyObject_GC_UnTrack(r);
    return r;
}

ELC_DOC(records,
"records(record_type, topic, partition, ttype, data, offsets, timestamps, key_pos, key_len,\n"
"        value_pos, value_len, headers) -> list\n\n"
"One record_type(topic, partition, offset, timestamp, ttype, key, value, headers) per row.");

PyObject *
elc_py_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyTypeObject *t;
    PyObject *topic, *partition, *ttype, *data, *cols[6], *headers;
    if (!PyArg_ParseTuple(args, "O!OOOSOOOOOOO", &PyType_Type, &t, &topic, &partition, &ttype,
                          &data, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &headers))
        return NULL;
    if (elc_check_record_type(t) < 0)
        return NULL;
    Py_buffer v[6];
    Py_ssize_t n = PyObject_Length(cols[0]);
    if (n < 0)
        return NULL;
    static const int sizes[6] = {8, 8, 8, 4, 8, 4};
    int got = 0;
    for (; got < 6; got++) {
        if (elc_get_column(cols[got], &v[got], sizes[got], 0, n) < 0)
            break;
    }
    PyObject *out = NULL, *empty = PyTuple_New(0);
    if (got < 6 || empty == NULL)
        goto done;
    if (headers != Py_None && (!PyList_Check(headers) || PyList_GET_SIZE(headers) != n)) {
        PyErr_SetString(PyExc_ValueError, "headers must be None or one tuple per record");
        goto done;
    }
    int atomic = PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition) &&
                 PyLong_CheckExact(ttype);
    const char *d = PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    const int64_t *off = v[0].buf, *ts = v[1].buf, *kp = v[2].buf, *vp = v[4].buf;
    const int32_t *kl = v[3].buf, *vl = v[5].buf;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *f[8] = {topic, partition, PyLong_FromLongLong(off[i]),
                          PyLong_FromLongLong(ts[i]), ttype,
                          column_item(d, size, kp[i], kl[i]),
                          column_item(d, size, vp[i], vl[i]),
                          headers == Py_None ? empty : PyList_GET_ITEM(headers, i)};
        PyObject *r = NULL;
        if (f[2] && f[3] && f[5] && f[6])
            r = elc_new_record(t, f, atomic);
        Py_XDECREF(f[2]);
        Py_XDECREF(f[3]);
        Py_XDECREF(f[5]);
        Py_XDECREF(f[6]);
        if (r == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, r);
    }
done:
    Py_XDECREF(empty);
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    return out;
}
