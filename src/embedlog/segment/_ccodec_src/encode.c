/*
 * encode(): the records section of values, keys and headers, or a whole batch with its
 * batchLength and CRC-32C (encode.py's reference). Two passes: the first takes what it needs
 * from the user's objects (and holds their buffers), the second writes into a buffer sized
 * in between, with no Python code running.
 */
#include "ccodec.h"

static inline uint64_t
zigzag(int64_t v)
{
    uint64_t u = (uint64_t)v;
    return (u << 1) ^ (0 - (u >> 63));
}

static inline Py_ssize_t
varint_width(uint64_t z)
{
    Py_ssize_t w = 1;
    while (z >= 0x80) {
        z >>= 7;
        w++;
    }
    return w;
}

static inline uint8_t *
put_varint(uint8_t *o, uint64_t z)
{
    while (z >= 0x80) {
        *o++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *o++ = (uint8_t)z;
    return o;
}

/* A key or value: its bytes and length (-1 = null); `view` holds a non-bytes buffer. */
typedef struct {
    const char *ptr;
    Py_ssize_t len;
} Item;

typedef struct {
    Py_ssize_t n;
    Item *keys, *values;
    PyObject **hsec;  /* encoded header sections (NULL = none: one 0x00 byte) */
    Py_buffer *views; /* buffers held for non-bytes items (allocated at the first one) */
    Py_ssize_t nviews;
} EncodeState;

static int
get_item(EncodeState *st, PyObject *obj, Item *it)
{
    if (obj == Py_None) {
        it->ptr = NULL, it->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        it->ptr = PyBytes_AS_STRING(obj), it->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (st->views == NULL) { /* the first non-bytes item: room for every key and value */
        st->views = PyMem_Malloc((2 * st->n + 1) * sizeof(Py_buffer));
        if (st->views == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_buffer *view = &st->views[st->nviews];
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "keys and values must be bytes-like or None, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    st->nviews++;
    it->ptr = view->buf, it->len = view->len;
    return 0;
}

/* A growable byte buffer (header sections). */
typedef struct {
    uint8_t *p;
    Py_ssize_t len, cap;
} Grow;

static uint8_t *
grow(Grow *g, Py_ssize_t more)
{
    if (g->len + more > g->cap) {
        Py_ssize_t cap = (g->len + more) * 2 + 32;
        uint8_t *p = PyMem_Realloc(g->p, (size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        g->p = p, g->cap = cap;
    }
    uint8_t *at = g->p + g->len;
    g->len += more;
    return at;
}

/* varint(len) + the bytes; len < 0 writes the null marker 0x01. */
static int
grow_item(Grow *g, const char *ptr, Py_ssize_t len)
{
    uint8_t *o = grow(g, len < 0 ? 1 : 10 + len);
    if (o == NULL)
        return -1;
    if (len < 0) {
        *o = 0x01;
        return 0;
    }
    uint8_t *e = put_varint(o, zigzag(len));
    memcpy(e, ptr, (size_t)len);
    g->len -= 10 - (e - o);
    return 0;
}

/* One (key, value) header pair of _encode_headers. */
static int
encode_pair(Grow *g, PyObject *item)
{
    PyObject *pair = PySequence_Fast(item, "a header must be a (key, value) pair");
    if (pair == NULL)
        return -1;
    int rc = -1;
    if (PySequence_Fast_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_ValueError, "a header must be a (key, value) pair");
        goto done;
    }
    PyObject *k = PySequence_Fast_GET_ITEM(pair, 0), *v = PySequence_Fast_GET_ITEM(pair, 1);
    if (!PyUnicode_Check(k)) {
        PyErr_Format(PyExc_TypeError, "header keys must be str, not %.100s", Py_TYPE(k)->tp_name);
        goto done;
    }
    Py_ssize_t klen;
    const char *kb = PyUnicode_AsUTF8AndSize(k, &klen);
    if (kb == NULL || grow_item(g, kb, klen) < 0)
        goto done;
    if (v == Py_None) {
        rc = grow_item(g, NULL, -1);
    }
    else {
        Py_buffer view;
        if (PyObject_GetBuffer(v, &view, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        rc = grow_item(g, view.buf, view.len);
        PyBuffer_Release(&view);
    }
done:
    Py_DECREF(pair);
    return rc;
}

/* _encode_headers of encode.py: one record's header section (count, then key/value pairs). */
static PyObject *
encode_headers(PyObject *hs)
{
    PyObject *seq = PySequence_Fast(hs, "headers must be sequences of (key, value) pairs");
    if (seq == NULL)
        return NULL;
    Grow g = {NULL, 0, 0};
    PyObject *out = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    uint8_t *o = grow(&g, 10);
    if (o == NULL)
        goto done;
    g.len = put_varint(o, zigzag(count)) - g.p;
    for (Py_ssize_t j = 0; j < count; j++) {
        if (encode_pair(&g, PySequence_Fast_GET_ITEM(seq, j)) < 0)
            goto done;
    }
    out = PyBytes_FromStringAndSize((const char *)g.p, g.len);
done:
    PyMem_Free(g.p);
    Py_DECREF(seq);
    return out;
}

static void
encode_state_free(EncodeState *st)
{
    for (Py_ssize_t i = 0; i < st->nviews; i++)
        PyBuffer_Release(&st->views[i]);
    if (st->hsec != NULL) {
        for (Py_ssize_t i = 0; i < st->n; i++)
            Py_XDECREF(st->hsec[i]);
    }
    PyMem_Free(st->keys);
    PyMem_Free(st->values);
    PyMem_Free(st->hsec);
    PyMem_Free(st->views);
}

/* First pass: every key, value and header section, held until the batch is written. */
static int
encode_gather(EncodeState *st, PyObject *values, PyObject *keys, PyObject *headers)
{
    Py_ssize_t n = st->n;
    st->keys = PyMem_Malloc((n + 1) * sizeof(Item));
    st->values = PyMem_Malloc((n + 1) * sizeof(Item));
    if (!st->keys || !st->values) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (get_item(st, PySequence_Fast_GET_ITEM(values, i), &st->values[i]) < 0)
            return -1;
        if (keys == NULL)
            st->keys[i].len = -1;
        else if (get_item(st, PySequence_Fast_GET_ITEM(keys, i), &st->keys[i]) < 0)
            return -1;
    }
    if (headers == NULL)
        return 0;
    st->hsec = PyMem_Calloc(n + 1, sizeof(PyObject *));
    if (st->hsec == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        int truth = PyObject_IsTrue(h);
        if (truth < 0)
            return -1;
        if (truth && (st->hsec[i] = encode_headers(h)) == NULL)
            return -1;
    }
    return 0;
}

/* Per-record deltas: an int64 column, or one int for every record. */
typedef struct {
    Py_buffer view;
    int64_t scalar;
    int has_view;
} Deltas;

static int
get_deltas(PyObject *obj, Py_ssize_t n, Deltas *out, int64_t dflt_step)
{
    out->has_view = 0;
    out->scalar = 0;
    if (obj == Py_None) {
        out->scalar = dflt_step; /* offset deltas 0..n-1 */
        return 0;
    }
    if (PyLong_Check(obj)) {
        int overflow;
        out->scalar = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow) {
            PyErr_Format(PyExc_ValueError, "varint out of int64 range: %S", obj);
            return -1;
        }
        return out->scalar == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (elc_get_column(obj, &out->view, 8, 0, n) < 0)
        return -1;
    out->has_view = 1;
    return 0;
}

static inline int64_t
delta_at(const Deltas *dl, Py_ssize_t i, int is_offset)
{
    if (dl->has_view)
        return ((const int64_t *)dl->view.buf)[i];
    return is_offset ? (int64_t)i : dl->scalar;
}

static Py_ssize_t
record_body(const EncodeState *st, Py_ssize_t i, int64_t tsd, int64_t od)
{
    const Item *k = &st->keys[i], *v = &st->values[i];
    Py_ssize_t body = 1 + varint_width(zigzag(tsd)) + varint_width(zigzag(od));
    body += k->len < 0 ? 1 : varint_width(zigzag(k->len)) + k->len;
    body += v->len < 0 ? 1 : varint_width(zigzag(v->len)) + v->len;
    body += st->hsec && st->hsec[i] ? PyBytes_GET_SIZE(st->hsec[i]) : 1;
    return body;
}

static uint8_t *
put_item(uint8_t *o, const Item *it)
{
    if (it->len < 0) {
        *o++ = 0x01;
        return o;
    }
    o = put_varint(o, zigzag(it->len));
    memcpy(o, it->ptr, (size_t)it->len);
    return o + it->len;
}

/* Second pass: the records, written into out[0, total). */
static void
encode_write(const EncodeState *st, const Deltas *tsd, const Deltas *od, uint8_t *o)
{
    for (Py_ssize_t i = 0; i < st->n; i++) {
        int64_t t = delta_at(tsd, i, 0), f = delta_at(od, i, 1);
        o = put_varint(o, zigzag(record_body(st, i, t, f)));
        *o++ = 0x00;
        o = put_varint(o, zigzag(t));
        o = put_varint(o, zigzag(f));
        o = put_item(o, &st->keys[i]);
        o = put_item(o, &st->values[i]);
        if (st->hsec && st->hsec[i]) {
            memcpy(o, PyBytes_AS_STRING(st->hsec[i]), PyBytes_GET_SIZE(st->hsec[i]));
            o += PyBytes_GET_SIZE(st->hsec[i]);
        }
        else {
            *o++ = 0x00;
        }
    }
}

static int
finish_batch(PyObject *out, Py_ssize_t records)
{
    uint8_t *b = (uint8_t *)PyBytes_AS_STRING(out);
    uint32_t length = (uint32_t)(HEADER_SIZE - 12 + records);
    b[8] = length >> 24, b[9] = length >> 16, b[10] = length >> 8, b[11] = length;
    Py_ssize_t size = PyBytes_GET_SIZE(out);
    PyObject *mv = PyMemoryView_FromMemory((char *)b + 21, size - 21, PyBUF_READ);
    if (mv == NULL)
        return -1;
    PyObject *crc = PyObject_CallOneArg(elc_crc32c, mv);
    Py_DECREF(mv);
    if (crc == NULL)
        return -1;
    unsigned long c = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (c == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    b[17] = (uint8_t)(c >> 24), b[18] = (uint8_t)(c >> 16), b[19] = (uint8_t)(c >> 8);
    b[20] = (uint8_t)c;
    return 0;
}

static PyObject *
fast_or_null(PyObject *obj, Py_ssize_t n, const char *what)
{
    if (obj == Py_None)
        return NULL;
    PyObject *seq = PySequence_Fast(obj, "keys/headers must be sequences");
    if (seq != NULL && PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%zd %s for %zd values", PySequence_Fast_GET_SIZE(seq),
                     what, n);
        Py_CLEAR(seq);
    }
    return seq;
}

ELC_DOC(encode,
"encode(values, keys, headers, tsd, od, header) -> bytes\n\n"
"The records section of values/keys/headers (keys, headers: None or one per value) with\n"
"timestampDeltas tsd (int64 column or one int) and offsetDeltas od (int64 column, or None\n"
"for 0..n-1). With header (61 packed bytes, batchLength and CRC ignored): the whole batch,\n"
"batchLength and CRC-32C written in place.");

PyObject *
elc_py_encode(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ovalues, *okeys, *oheaders, *otsd, *ood, *hdr;
    if (!PyArg_ParseTuple(args, "OOOOOO", &ovalues, &okeys, &oheaders, &otsd, &ood, &hdr))
        return NULL;
    if (hdr != Py_None && (!PyBytes_Check(hdr) || PyBytes_GET_SIZE(hdr) != HEADER_SIZE)) {
        PyErr_SetString(PyExc_ValueError, "header must be 61 bytes");
        return NULL;
    }
    PyObject *values = PySequence_Fast(ovalues, "values must be a sequence"), *out = NULL;
    if (values == NULL)
        return NULL;
    EncodeState st = {.n = PySequence_Fast_GET_SIZE(values)};
    Deltas tsd = {.has_view = 0}, od = {.has_view = 0};
    PyObject *keys = fast_or_null(okeys, st.n, "keys");
    PyObject *headers = keys || okeys == Py_None ? fast_or_null(oheaders, st.n, "headers") : NULL;
    if (PyErr_Occurred() || get_deltas(otsd, st.n, &tsd, 0) < 0 ||
        get_deltas(ood, st.n, &od, 1) < 0 || encode_gather(&st, values, keys, headers) < 0)
        goto done;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < st.n; i++) {
        Py_ssize_t body = record_body(&st, i, delta_at(&tsd, i, 0), delta_at(&od, i, 1));
        if (body > INT32_MAX_) {
            PyErr_SetString(PyExc_ValueError, "record too large");
            goto done;
        }
        total += varint_width(zigzag(body)) + body;
    }
    Py_ssize_t at = hdr == Py_None ? 0 : HEADER_SIZE;
    if (at && total > INT32_MAX_ - (HEADER_SIZE - 12)) {
        PyErr_SetString(PyExc_ValueError, "batch too large");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, at + total);
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    if (at)
        memcpy(o, PyBytes_AS_STRING(hdr), HEADER_SIZE);
    encode_write(&st, &tsd, &od, o + at);
    if (at && finish_batch(out, total) < 0)
        Py_CLEAR(out);
done:
    encode_state_free(&st);
    if (tsd.has_view)
        PyBuffer_Release(&tsd.view);
    if (od.has_view)
        PyBuffer_Release(&od.view);
    Py_XDECREF(keys);
    Py_XDECREF(headers);
    Py_DECREF(values);
    return out;
}
