/*
 * encode(): the records section of values, keys and headers, or a whole batch with its
 * batchLength and CRC-32C (encode.py's reference); encode_listed(): a whole uncompressed batch
 * from timestamps given as Python ints, checking append_batch's arguments as it reads them.
 * Two passes: the first takes what it needs from the user's objects (and holds their
 * buffers), the second writes into a buffer sized in between, with no Python code running.
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
    int strict;       /* encode_listed's STRICT: unchecked arguments (see there) */
    Item *keys, *values;
    Py_ssize_t *body; /* each record's length without its length varint */
    PyObject **hsec;  /* encoded header sections (NULL = none: one 0x00 byte) */
    Py_buffer *views; /* buffers held for non-bytes items (allocated at the first one) */
    Py_ssize_t nviews;
} EncodeState;

/* What the steps of encode_listed return besides 0 and -1 (an exception): an argument it
 * does not take as is, no exception set (the caller takes its general path). */
#define NOT_PLAIN 1

/* Flags of encode_listed. */
#define LISTED_STRICT 1
#define LISTED_MUTABLE 2
#define LISTED_KEEP_BASE 4
#define LISTED_KEEP_MAX 8

/* 0, -1 with an exception, or NOT_PLAIN (strict: not None, bytes, a bytearray or a
 * C-contiguous one-dimensional memoryview of single bytes). */
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
    if (st->strict && !PyByteArray_Check(obj) && !PyMemoryView_Check(obj))
        return NOT_PLAIN;
    if (st->strict && PyMemoryView_Check(obj)) { /* the checks flatten any other view */
        const Py_buffer *mv = PyMemoryView_GET_BUFFER(obj);
        if (mv->ndim != 1 || mv->itemsize != 1)
            return NOT_PLAIN;
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
        if (st->strict) {
            PyErr_Clear();
            return NOT_PLAIN;
        }
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
    PyMem_Free(st->body);
    PyMem_Free(st->hsec);
    PyMem_Free(st->views);
}

/* First pass: every key, value and header section, held until the batch is written. 0, -1
 * with an exception, or NOT_PLAIN (strict). */
static int
encode_gather(EncodeState *st, PyObject *values, PyObject *keys, PyObject *headers)
{
    Py_ssize_t n = st->n;
    st->keys = PyMem_Malloc((n + 1) * sizeof(Item));
    st->values = PyMem_Malloc((n + 1) * sizeof(Item));
    st->body = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (!st->keys || !st->values || !st->body) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject **vs = PySequence_Fast_ITEMS(values), **ks = keys ? PySequence_Fast_ITEMS(keys) : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) {
            PREFETCH(vs[i + PREFETCH_AHEAD]);
            if (ks != NULL)
                PREFETCH(ks[i + PREFETCH_AHEAD]);
        }
        int rc = get_item(st, vs[i], &st->values[i]);
        if (rc == 0) {
            if (ks == NULL)
                st->keys[i].len = -1;
            else
                rc = get_item(st, ks[i], &st->keys[i]);
        }
        if (rc != 0)
            return rc;
        /* The value's bytes past its object's first line (which this pass just read) are
         * asked for now, a whole pass before the write pass copies them: most of them are in
         * cache by then (3-5% less CPU per 1,000-record append_batch call). */
        const Item *v = &st->values[i];
        if (v->len > 64) {
            PREFETCH(v->ptr + 64);
            PREFETCH(v->ptr + v->len - 1);
        }
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
    Py_buffer view;     /* held when has_view */
    const int64_t *col; /* one delta per record, or NULL: `scalar` (timestamps), i (offsets) */
    int64_t scalar;
    int has_view;
} Deltas;

static int
get_deltas(PyObject *obj, Py_ssize_t n, Deltas *out, int64_t dflt_step)
{
    out->has_view = 0;
    out->col = NULL;
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
    out->col = out->view.buf;
    return 0;
}

static inline int64_t
delta_at(const Deltas *dl, Py_ssize_t i, int is_offset)
{
    if (dl->col != NULL)
        return dl->col[i];
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

/* The bytes of the records section (each record's body kept in st->body), or -1 with
 * ValueError for a record or, with a header (`whole`), a batch too large for its int32
 * length. */
static Py_ssize_t
encode_size(EncodeState *st, const Deltas *tsd, const Deltas *od, int whole)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < st->n; i++) {
        Py_ssize_t body = record_body(st, i, delta_at(tsd, i, 0), delta_at(od, i, 1));
        if (body > INT32_MAX_) {
            PyErr_SetString(PyExc_ValueError, "record too large");
            return -1;
        }
        st->body[i] = body;
        total += varint_width(zigzag(body)) + body;
    }
    if (whole && total > INT32_MAX_ - (HEADER_SIZE - 12)) {
        PyErr_SetString(PyExc_ValueError, "batch too large");
        return -1;
    }
    return total;
}

HOT_INLINE uint8_t *
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

/* The bytes of the record the write pass reaches PREFETCH_AHEAD records later: its value's
 * first two cache lines and last one, its key's last one (its first shares the value's
 * object's lines or was read by the first pass). Always inlined: GCC takes a function that
 * only prefetches for one without effect and drops its calls. */
HOT_INLINE void
prefetch_record(const EncodeState *st, Py_ssize_t i)
{
    const Item *v = &st->values[i], *k = &st->keys[i];
    if (v->len > 0) {
        PREFETCH(v->ptr);
        PREFETCH(v->ptr + 64);
        PREFETCH(v->ptr + v->len - 1);
    }
    if (k->len > 0)
        PREFETCH(k->ptr + k->len - 1);
}

/* Second pass: the records, written into out[0, total). */
static void
encode_write(const EncodeState *st, const Deltas *tsd, const Deltas *od, uint8_t *o)
{
    for (Py_ssize_t i = 0; i < st->n; i++) {
        if (i + PREFETCH_AHEAD < st->n)
            prefetch_record(st, i + PREFETCH_AHEAD);
        int64_t t = delta_at(tsd, i, 0), f = delta_at(od, i, 1);
        o = put_varint(o, zigzag(st->body[i]));
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

/* A new bytes or bytearray object (`mutable`) of `size` bytes; *buf its bytes. */
static PyObject *
new_output(int mutable, Py_ssize_t size, uint8_t **buf)
{
    PyObject *out = mutable ? PyByteArray_FromStringAndSize(NULL, size)
                            : PyBytes_FromStringAndSize(NULL, size);
    if (out != NULL)
        *buf = (uint8_t *)(mutable ? PyByteArray_AS_STRING(out) : PyBytes_AS_STRING(out));
    return out;
}

/* batchLength and CRC-32C of the batch b[0, size) with `records` bytes of records. */
static int
finish_batch(uint8_t *b, Py_ssize_t size, Py_ssize_t records)
{
    uint32_t length = (uint32_t)(HEADER_SIZE - 12 + records);
    b[8] = length >> 24, b[9] = length >> 16, b[10] = length >> 8, b[11] = length;
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

/* The records of st with deltas tsd/od after the 61 bytes of `hdr` (or alone when hdr is
 * NULL), batchLength and CRC-32C written with the header; a bytearray when `mutable`. */
static PyObject *
encode_output(EncodeState *st, const Deltas *tsd, const Deltas *od, const char *hdr,
              int mutable)
{
    Py_ssize_t at = hdr == NULL ? 0 : HEADER_SIZE;
    Py_ssize_t total = encode_size(st, tsd, od, at != 0);
    if (total < 0)
        return NULL;
    uint8_t *o;
    PyObject *out = new_output(mutable, at + total, &o);
    if (out == NULL)
        return NULL;
    if (at)
        memcpy(o, hdr, HEADER_SIZE);
    encode_write(st, tsd, od, o + at);
    if (at && finish_batch(o, at + total, total) < 0)
        Py_CLEAR(out);
    return out;
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
    out = encode_output(&st, &tsd, &od, hdr == Py_None ? NULL : PyBytes_AS_STRING(hdr), 0);
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

/* ------------------------------------------------------------------------ encode_listed */

/* One timestamp: an exact int of int64's range ([0, 2**63) when strict), else NOT_PLAIN. */
HOT_INLINE int
plain_timestamp(PyObject *obj, int strict, int64_t *v)
{
    if (!PyLong_CheckExact(obj))
        return NOT_PLAIN;
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    /* Before CPython 3.12 an int is its signed digit count (ob_size) and 30-bit digits: a
     * non-negative one of at most two digits (below 2**60: every millisecond timestamp for
     * the next 36 million years) is read directly, the value the call below gives. */
    Py_ssize_t digits = Py_SIZE(obj);
    if (digits >= 0 && digits <= 2) {
        const digit *d = ((PyLongObject *)obj)->ob_digit;
        *v = digits == 0 ? 0 : digits == 1 ? (int64_t)d[0] : (int64_t)d[0] | (int64_t)d[1] << 30;
        return 0;
    }
#endif
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || (strict && x < 0))
        return NOT_PLAIN;
    *v = x;
    return 0;
}

/* The timestamps as deltas from the base timestamp (the first one, or the header's with
 * KEEP_BASE, in int64 arithmetic that wraps, as numpy's), and the base and largest ones;
 * 0, -1 with an exception, or NOT_PLAIN (not one int nor a list or tuple of n plain ones). */
static int
listed_deltas(PyObject *obj, Py_ssize_t n, int flags, const char *hdr, Deltas *out,
              int64_t *base, int64_t *max)
{
    int strict = flags & LISTED_STRICT, rc;
    int64_t *col = NULL, first;
    if (PyLong_CheckExact(obj)) {
        if ((rc = plain_timestamp(obj, strict, &first)) != 0)
            return rc;
        *max = first;
    }
    else {
        if ((!PyList_CheckExact(obj) && !PyTuple_CheckExact(obj)) ||
            PySequence_Fast_GET_SIZE(obj) != n)
            return NOT_PLAIN;
        PyObject **items = PySequence_Fast_ITEMS(obj);
        if ((col = PyMem_Malloc((size_t)n * sizeof(int64_t))) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + PREFETCH_AHEAD < n)
                PREFETCH(items[i + PREFETCH_AHEAD]);
            if ((rc = plain_timestamp(items[i], strict, &col[i])) != 0) {
                PyMem_Free(col);
                return rc;
            }
        }
        first = *max = col[0];
        for (Py_ssize_t i = 1; i < n; i++)
            *max = col[i] > *max ? col[i] : *max;
    }
    *base = first;
    if (flags & LISTED_KEEP_BASE) {
        const uint8_t *b = (const uint8_t *)hdr + 27;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++)
            u = u << 8 | b[i];
        *base = (int64_t)u;
    }
    out->col = col;
    out->scalar = (int64_t)((uint64_t)first - (uint64_t)*base);
    for (Py_ssize_t i = 0; col != NULL && i < n; i++)
        col[i] = (int64_t)((uint64_t)col[i] - (uint64_t)*base);
    return 0;
}

/* The length of a list or tuple, -1 for anything else. */
static Py_ssize_t
listed_size(PyObject *obj)
{
    return PyList_CheckExact(obj) || PyTuple_CheckExact(obj) ? PySequence_Fast_GET_SIZE(obj) : -1;
}

static void
put_be64(char *at, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--, u >>= 8)
        at[i] = (char)(u & 0xFF);
}

ELC_DOC(encode_listed,
"encode_listed(values, keys, headers, timestamps, header, flags) -> bytes | bytearray | None\n\n"
"A whole uncompressed batch of values/keys/headers (keys, headers: None or one per value)\n"
"with offset deltas 0..n-1 and absolute timestamps: a list or tuple of one int per value, or\n"
"one int for all. header: the 61 packed header bytes; baseTimestamp becomes the first\n"
"timestamp (flags & 4: the header's is kept and the deltas are taken from it), maxTimestamp\n"
"the largest (flags & 8: the header's is kept); batchLength and CRC-32C are written. flags\n"
"& 2: a bytearray. None, with nothing raised, when values, keys or headers are not lists or\n"
"tuples of one item per value, there are no values, a timestamp is not an int of int64's\n"
"range, and with flags & 1 (strict: arguments not checked yet) when an\n"
"item is not what append_batch takes as is: values and keys None, bytes, a bytearray or a\n"
"C-contiguous memoryview, timestamps ints in [0, 2**63).");

PyObject *
elc_py_encode_listed(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ovalues, *okeys, *oheaders, *ots, *hdr;
    int flags;
    if (!PyArg_ParseTuple(args, "OOOOSi", &ovalues, &okeys, &oheaders, &ots, &hdr, &flags))
        return NULL;
    if (PyBytes_GET_SIZE(hdr) != HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "header must be 61 bytes");
        return NULL;
    }
    /* Lists and tuples only, so that nothing is consumed (an iterator) before it may give
     * way to the general path. */
    Py_ssize_t n = listed_size(ovalues);
    if (n <= 0 || (okeys != Py_None && listed_size(okeys) != n) ||
        (oheaders != Py_None && listed_size(oheaders) != n))
        Py_RETURN_NONE;
    PyObject *values = ovalues, *out = NULL;
    PyObject *keys = okeys == Py_None ? NULL : okeys;
    PyObject *headers = oheaders == Py_None ? NULL : oheaders;
    EncodeState st = {.n = n, .strict = flags & LISTED_STRICT};
    Deltas tsd = {.has_view = 0, .col = NULL}, od = {.has_view = 0, .col = NULL};
    int64_t base, max;
    int rc = listed_deltas(ots, n, flags, PyBytes_AS_STRING(hdr), &tsd, &base, &max);
    if (rc == 0)
        rc = encode_gather(&st, values, keys, headers);
    if (rc == NOT_PLAIN)
        out = Py_NewRef(Py_None);
    if (rc != 0)
        goto done;
    char head[HEADER_SIZE];
    memcpy(head, PyBytes_AS_STRING(hdr), HEADER_SIZE);
    if (!(flags & LISTED_KEEP_BASE))
        put_be64(head + 27, base);
    if (!(flags & LISTED_KEEP_MAX))
        put_be64(head + 35, max);
    out = encode_output(&st, &tsd, &od, head, flags & LISTED_MUTABLE);
done:
    encode_state_free(&st);
    PyMem_Free((void *)tsd.col);
    return out;
}
