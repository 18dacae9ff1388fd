/*
 * ArrowSink: the Arrow columns of one partition's rows (offset, timestamp; key and value
 * when asked for), appended batch by batch: a stored batch that decode() reads in its
 * one-pass common case goes straight from the read buffer into growing bytearrays (append),
 * any other batch through its decoded columns (extend).
 */
#include "ccodec.h"

/* A growable buffer backed by a bytearray (handed to Arrow without a copy by take()). `hint`
 * is the length of the last buffer taken: the next one starts at that capacity. */
typedef struct {
    PyObject *ba;
    Py_ssize_t len, cap, hint;
} ABuf;

static int
abuf_reserve(ABuf *b, Py_ssize_t more)
{
    if (more > PY_SSIZE_T_MAX / 4 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + more;
    if (need <= b->cap && b->ba != NULL)
        return 0;
    Py_ssize_t cap = need > 2 * b->cap ? need : 2 * b->cap;
    if (b->cap == 0 && cap < b->hint)
        cap = b->hint;
    if (cap < 64)
        cap = 64; /* never empty: abuf_at() always has a buffer after a reserve */
    if (b->ba == NULL) {
        b->ba = PyByteArray_FromStringAndSize(NULL, cap);
        if (b->ba == NULL)
            return -1;
    }
    else if (PyByteArray_Resize(b->ba, cap) < 0) {
        return -1;
    }
    b->cap = cap;
    return 0;
}

static inline uint8_t *
abuf_at(const ABuf *b)
{
    return (uint8_t *)PyByteArray_AS_STRING(b->ba);
}

/* The bytes written as a bytearray of exactly that length; the buffer starts over empty. */
static PyObject *
abuf_take(ABuf *b)
{
    PyObject *out;
    if (b->ba == NULL) {
        out = PyByteArray_FromStringAndSize(NULL, 0);
    }
    else {
        if (PyByteArray_Resize(b->ba, b->len) < 0)
            return NULL;
        out = b->ba;
        b->ba = NULL;
    }
    b->hint = b->len;
    b->len = b->cap = 0;
    return out;
}

/* One Arrow binary column being built: int32 offsets (rows + 1), items, validity bits. */
typedef struct {
    ABuf off, data, valid;
    Py_ssize_t nulls;
    int on; /* built at all (else only counted) */
} BinCol;

/* Room for `rows` more items of at most `bytes` bytes in all, after `have` rows. */
static int
bincol_reserve(BinCol *c, Py_ssize_t have, Py_ssize_t rows, Py_ssize_t bytes)
{
    if (!c->on)
        return 0;
    if (c->data.len + bytes > INT32_MAX_) {
        PyErr_SetString(PyExc_OverflowError, "items pass 2 GiB");
        return -1;
    }
    if (abuf_reserve(&c->off, 4 * (rows + 1)) < 0 || abuf_reserve(&c->data, bytes) < 0 ||
        abuf_reserve(&c->valid, (have + rows + 7) / 8 - c->valid.len + 1) < 0)
        return -1;
    if (have == 0) {
        ((int32_t *)abuf_at(&c->off))[0] = 0;
        c->off.len = 4;
    }
    return 0;
}

static void
bincol_settle(BinCol *c, Py_ssize_t rows)
{
    if (c->on) {
        c->off.len = 4 * (rows + 1);
        c->valid.len = (rows + 7) / 8;
    }
}

/* (offsets, data, validity or None, nulls) of the rows so far; the column starts over. */
static PyObject *
bincol_take(BinCol *c, Py_ssize_t rows)
{
    if (!c->on)
        Py_RETURN_NONE;
    if (rows == 0 && abuf_reserve(&c->off, 4) == 0) { /* one offset: 0 */
        ((int32_t *)abuf_at(&c->off))[0] = 0;
        c->off.len = 4;
    }
    PyObject *off = abuf_take(&c->off), *data = abuf_take(&c->data);
    PyObject *valid = abuf_take(&c->valid), *out = NULL;
    if (off && data && valid)
        out = Py_BuildValue("(OOOn)", off, data, c->nulls ? valid : Py_None, c->nulls);
    Py_XDECREF(off);
    Py_XDECREF(data);
    Py_XDECREF(valid);
    c->nulls = 0;
    return out;
}

typedef struct {
    PyObject_HEAD
    ABuf offsets, timestamps; /* int64 per row */
    BinCol key, value;
    Py_ssize_t rows;
    int64_t item_bytes; /* key and value bytes of the rows (built or not) */
} Sink;

/* Validity bits past `rows` cleared (what a dropped row left in the last byte). */
static void
bincol_trim(BinCol *c, Py_ssize_t rows)
{
    if (c->on && (rows & 7))
        abuf_at(&c->valid)[rows >> 3] &= (uint8_t)((1u << (rows & 7)) - 1);
}

/* Room for `rows` more rows with at most `bytes` of keys and of values each. */
static int
sink_reserve(Sink *s, Py_ssize_t rows, Py_ssize_t bytes)
{
    if (abuf_reserve(&s->offsets, 8 * rows) < 0 || abuf_reserve(&s->timestamps, 8 * rows) < 0 ||
        bincol_reserve(&s->key, s->rows, rows, bytes) < 0 ||
        bincol_reserve(&s->value, s->rows, rows, bytes) < 0)
        return -1;
    return 0;
}

static void
sink_settle(Sink *s)
{
    s->offsets.len = s->timestamps.len = 8 * s->rows;
    bincol_settle(&s->key, s->rows);
    bincol_settle(&s->value, s->rows);
}

/* Where the next rows go: raw pointers into the sink's buffers, valid from a reserve until
 * cursor_close() (no Python code runs in between). Rows written through a cursor that is
 * dropped rather than closed are not in the sink (sink_trim clears their validity bits). */
typedef struct {
    int32_t *off;
    uint8_t *data, *bits;
    Py_ssize_t len, nulls;
    int on;
} ColCursor;

typedef struct {
    int64_t *off, *ts;
    ColCursor col[2]; /* key, value */
    Py_ssize_t rows;
    int64_t item_bytes;
} Cursor;

static void
cursor_open(Sink *s, Cursor *c)
{
    BinCol *cols[2] = {&s->key, &s->value};
    c->off = (int64_t *)abuf_at(&s->offsets), c->ts = (int64_t *)abuf_at(&s->timestamps);
    for (int k = 0; k < 2; k++) {
        ColCursor *cc = &c->col[k];
        cc->on = cols[k]->on, cc->len = cols[k]->data.len, cc->nulls = cols[k]->nulls;
        if (cc->on) {
            cc->off = (int32_t *)abuf_at(&cols[k]->off);
            cc->data = abuf_at(&cols[k]->data), cc->bits = abuf_at(&cols[k]->valid);
        }
    }
    c->rows = s->rows, c->item_bytes = s->item_bytes;
}

static void
cursor_close(Sink *s, const Cursor *c)
{
    BinCol *cols[2] = {&s->key, &s->value};
    for (int k = 0; k < 2; k++)
        cols[k]->data.len = c->col[k].len, cols[k]->nulls = c->col[k].nulls;
    s->rows = c->rows, s->item_bytes = c->item_bytes;
    sink_settle(s);
}

static void
sink_trim(Sink *s)
{
    bincol_trim(&s->key, s->rows);
    bincol_trim(&s->value, s->rows);
}

/* Item `row` (the next one): len < 0 is null (an empty item marked invalid). */
static inline void
col_put(ColCursor *c, Py_ssize_t row, const uint8_t *src, int64_t len)
{
    uint8_t bit = (uint8_t)(1u << (row & 7)), *at = c->bits + (row >> 3);
    uint8_t bits = bit == 1 ? 0 : *at; /* a new byte: no stale bits past the last row */
    if (len < 0) {
        bits &= (uint8_t)~bit;
        c->nulls++;
    }
    else {
        memcpy(c->data + c->len, src, (size_t)len);
        c->len += (Py_ssize_t)len;
        bits |= bit;
    }
    *at = bits;
    c->off[row + 1] = (int32_t)c->len;
}

/* One row: its offset, timestamp, key and value (d + kp, kl; d + vp, vl; -1 = null). */
static inline void
cursor_row(Cursor *c, int64_t offset, int64_t timestamp, const uint8_t *d, int64_t kp,
           int64_t kl, int64_t vp, int64_t vl)
{
    Py_ssize_t r = c->rows++;
    c->off[r] = offset;
    c->ts[r] = timestamp;
    if (c->col[0].on)
        col_put(&c->col[0], r, d + kp, kl);
    if (c->col[1].on)
        col_put(&c->col[1], r, d + vp, vl);
    c->item_bytes += (kl > 0 ? kl : 0) + (vl > 0 ? vl : 0);
}

/* fast_fields over a whole records section d[0, size) of n records, straight into the sink:
 * 1 when every record passed (the rows are in), 0 when anything differs from fast_fields'
 * common case (nothing is in; the caller decodes the batch the general way). It accepts only
 * batches decode() accepts with the same walk (each record ends where its length says, the
 * last one at the end of the section) and gives the same columns. */
static int
sink_fields(Cursor *c, const uint8_t *d, int64_t size, int64_t n, const BatchInfo *bi)
{
    int64_t p = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len, w;
        FastRecord r;
        if (fast_varint(d, p, size, 5, &len, &w) < 0 || len < MIN_BODY || len > size - p - w ||
            fast_record(d, p + w, p + w + len, bi, &r) < 0)
            return 0;
        p += w + len;
        cursor_row(c, record_offset(&r, bi), record_timestamp(&r, bi), d, r.kp, r.kl, r.vp, r.vl);
    }
    return p == size;
}

PyDoc_STRVAR(sink_append_doc,
"append(data, start, end, n, base_offset, base_timestamp, max_timestamp, last_offset_delta,\n"
"       log_append) -> int\n\n"
"The n records of the (uncompressed) records section data[start:end] appended as rows when\n"
"decode() reads them in its one-pass common case (well-formed records, none with headers);\n"
"returns the key and value bytes appended. -1 when the batch needs the general decoder\n"
"(damage, headers, n * 7 > end - start): then nothing was appended and decode() gives the\n"
"columns or the CorruptBatchError. Never reads outside data[start:end].");

static PyObject *
sink_append(Sink *s, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t start, end;
    long long n;
    BatchInfo bi;
    if (!PyArg_ParseTuple(args, "y*nnLLLLLp", &data, &start, &end, &n, &bi.base_offset,
                          &bi.base_timestamp, &bi.max_timestamp, &bi.last_offset_delta,
                          &bi.log_append))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > data.len) {
        PyErr_SetString(PyExc_ValueError, "section outside the data");
        goto done;
    }
    int64_t size = end - start, before = s->item_bytes;
    if (n <= 0 || n > size / 7) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (sink_reserve(s, (Py_ssize_t)n, (Py_ssize_t)size) < 0)
        goto done;
    Cursor c;
    cursor_open(s, &c);
    if (sink_fields(&c, (const uint8_t *)data.buf + start, size, n, &bi)) {
        cursor_close(s, &c);
        result = PyLong_FromLongLong(s->item_bytes - before);
    }
    else {
        sink_trim(s); /* nothing appended */
        result = PyLong_FromLong(-1);
    }
done:
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(sink_extend_doc,
"extend(data, offsets, timestamps, key_pos, key_len, value_pos, value_len) -> int\n\n"
"Rows from decoded columns (int64 offsets, timestamps, positions; int32 lengths, -1 = null)\n"
"over data; returns the key and value bytes appended. ValueError (nothing appended) when a\n"
"position lies outside data or the columns differ in length.");

static PyObject *
sink_extend(Sink *s, PyObject *args)
{
    Py_buffer data, v[6];
    PyObject *cols[6];
    if (!PyArg_ParseTuple(args, "y*OOOOOO", &data, &cols[0], &cols[1], &cols[2], &cols[3],
                          &cols[4], &cols[5]))
        return NULL;
    static const int sizes[6] = {8, 8, 8, 4, 8, 4};
    PyObject *result = NULL;
    Py_ssize_t n = PyObject_Length(cols[0]);
    int got = 0;
    for (; n >= 0 && got < 6; got++) {
        if (elc_get_column(cols[got], &v[got], sizes[got], 0, n) < 0)
            break;
    }
    if (got < 6)
        goto done;
    const int64_t *off = v[0].buf, *ts = v[1].buf, *kp = v[2].buf, *vp = v[4].buf;
    const int32_t *kl = v[3].buf, *vl = v[5].buf;
    Py_ssize_t nulls = 0;
    int64_t kbytes = elc_column_bytes(kp, kl, n, data.len, &nulls), vbytes;
    if (kbytes < 0 || (vbytes = elc_column_bytes(vp, vl, n, data.len, &nulls)) < 0)
        goto done;
    int64_t most = kbytes > vbytes ? kbytes : vbytes, before = s->item_bytes;
    if (most > INT32_MAX_) {
        PyErr_SetString(PyExc_OverflowError, "items pass 2 GiB");
        goto done;
    }
    if (sink_reserve(s, n, (Py_ssize_t)most) < 0)
        goto done;
    Cursor c;
    cursor_open(s, &c);
    for (Py_ssize_t i = 0; i < n; i++)
        cursor_row(&c, off[i], ts[i], data.buf, kp[i], kl[i], vp[i], vl[i]);
    cursor_close(s, &c);
    result = PyLong_FromLongLong(s->item_bytes - before);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(sink_finish_doc,
"finish() -> (rows, offsets, timestamps, key, value)\n\n"
"The rows so far: offsets and timestamps as native int64 bytearrays, key and value (None\n"
"when not built) as (int32 offsets, data, validity bitmap or None, null count), Arrow's\n"
"binary layout. The sink starts over empty.");

static PyObject *
sink_finish(Sink *s, PyObject *unused)
{
    (void)unused;
    Py_ssize_t rows = s->rows;
    PyObject *off = abuf_take(&s->offsets), *ts = abuf_take(&s->timestamps);
    PyObject *key = bincol_take(&s->key, rows), *value = bincol_take(&s->value, rows);
    PyObject *out = NULL;
    if (off && ts && key && value)
        out = Py_BuildValue("(nOOOO)", rows, off, ts, key, value);
    Py_XDECREF(off);
    Py_XDECREF(ts);
    Py_XDECREF(key);
    Py_XDECREF(value);
    s->rows = 0;
    s->item_bytes = 0;
    return out;
}

static PyObject *
sink_get_rows(Sink *s, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(s->rows);
}

static PyObject *
sink_get_item_bytes(Sink *s, void *unused)
{
    (void)unused;
    return PyLong_FromLongLong(s->item_bytes);
}

static int
sink_init(Sink *s, PyObject *args, PyObject *kwds)
{
    int keys, values;
    static char *names[] = {"keys", "values", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "pp", names, &keys, &values))
        return -1;
    if (s->rows || s->offsets.ba) {
        PyErr_SetString(PyExc_TypeError, "ArrowSink is initialised once");
        return -1;
    }
    s->key.on = keys, s->value.on = values;
    return 0;
}

static void
sink_dealloc(Sink *s)
{
    ABuf *bufs[] = {&s->offsets, &s->timestamps, &s->key.off, &s->key.data, &s->key.valid,
                    &s->value.off, &s->value.data, &s->value.valid};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        Py_XDECREF(bufs[i]->ba);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef sink_methods[] = {
    {"append", (PyCFunction)sink_append, METH_VARARGS, sink_append_doc},
    {"extend", (PyCFunction)sink_extend, METH_VARARGS, sink_extend_doc},
    {"finish", (PyCFunction)sink_finish, METH_NOARGS, sink_finish_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sink_getset[] = {
    {"rows", (getter)sink_get_rows, NULL, "rows appended since the last finish()", NULL},
    {"item_bytes", (getter)sink_get_item_bytes, NULL,
     "key and value bytes of those rows (nulls count 0), built or not", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject elc_sink_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "embedlog.segment._ccodec.ArrowSink",
    .tp_basicsize = sizeof(Sink),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ArrowSink(keys, values): the Arrow columns of one partition's rows, appended\n"
              "batch by batch (offset, timestamp; key and value when asked for).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sink_init,
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_methods = sink_methods,
    .tp_getset = sink_getset,
};
