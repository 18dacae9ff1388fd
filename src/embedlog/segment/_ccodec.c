/*
 * embedlog.segment._ccodec: the compiled core of the v2 record-batch codec.
 *
 * The hot loops of embedlog/segment/decode.py and encode.py, behind the same function
 * boundaries; the pure-Python modules stay the reference (EMBEDLOG_PURE=1 selects them) and
 * the two must agree byte for byte and error for error. The layout is documented in
 * embedlog/segment/header.py.
 *
 * Invariants:
 *  - every read of the input is bounds-checked against the length of the buffer handed in;
 *    a lying length or varint raises CorruptBatchError (the messages are the Python
 *    decoder's, checked field by field in the same order: one pass per record field over all
 *    records, so the error reported is the one the vectorised Python decoder reports);
 *  - writes go only to buffers this module sized itself, or to caller buffers whose size
 *    was checked against the record count;
 *  - no Python code runs between sizing and writing an output buffer (the encoder copies
 *    what it needs from user objects in its first pass and holds their buffers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptBatchError; /* embedlog.errors.CorruptBatchError */
static PyObject *Crc32c;            /* crc32c.crc32c */

#define MIN_BODY 6
#define INT32_MAX_ 2147483647LL
#define HEADER_SIZE 61

/* ------------------------------------------------------------------------ small helpers */

static int
corrupt(const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(CorruptBatchError, msg);
        Py_DECREF(msg);
    }
    return -1;
}

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

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

/* decode_varint of header.py: one zigzag varint at pos, bounded by end. */
static int
scalar_varint(const uint8_t *d, Py_ssize_t end, Py_ssize_t pos, int max_bytes, int64_t *out,
              Py_ssize_t *next)
{
    uint64_t z = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (pos + i >= end)
            return corrupt("varint runs past the end of the data");
        uint8_t b = d[pos + i];
        z |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            if (max_bytes <= 5 && z >= ((uint64_t)1 << 32))
                return corrupt("varint does not fit in 32 bits");
            *out = unzigzag(z);
            *next = pos + i + 1;
            return 0;
        }
    }
    return corrupt("varint longer than %d bytes", max_bytes);
}

/* A contiguous buffer of one fixed item size (the numpy columns handed in). */
static int
get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, Py_ssize_t n)
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

/* ------------------------------------------------------------------------ the record walk */

/* _walk of decode.py: starts of records skip..n-1 and the end of record n-1. */
static int
walk(const uint8_t *d, Py_ssize_t size, int64_t n, int64_t skip, int64_t *starts,
     int64_t *stop)
{
    int64_t p = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i >= skip)
            starts[i - skip] = p;
        if (p + 1 >= size) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            return -1;
        }
        unsigned b0 = d[p], b1 = d[p + 1];
        if (b0 < 0x80) {
            p += 1 + (b0 >> 1); /* the zigzag sign is ignored here, as in _walk */
        }
        else if (b1 < 0x80) {
            p += 2 + ((b0 & 0x7F) >> 1) + ((int64_t)b1 << 6);
        }
        else {
            int64_t length;
            Py_ssize_t q;
            if (scalar_varint(d, size, (Py_ssize_t)p, 5, &length, &q) < 0)
                return -1;
            if (length < MIN_BODY)
                return corrupt("invalid record length %lld", (long long)length);
            p = q + length;
        }
    }
    *stop = p;
    return 0;
}

/* ------------------------------------------------------------------------ field columns */

enum { ERR_NONE, ERR_PAST, ERR_OVERFLOW, ERR_LONGER };

/* _read_varints of decode.py: the varint at pos[i] of every record i, each ending at or
 * before lim[i] (<= the data size). Of several bad records the one the vectorised decoder
 * meets first is reported: it reads byte r of every unfinished varint before byte r + 1. */
static int
read_column(const uint8_t *d, Py_ssize_t m, const int64_t *pos, const int64_t *lim,
            int max_bytes, const char *what, int64_t *val, int64_t *width)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        if (pos[i] >= lim[i])
            return corrupt("record too short for its %s", what);
    }
    int best = INT32_MAX_, best_kind = ERR_NONE, too_wide = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t p = pos[i], end = lim[i];
        uint8_t b = d[p];
        uint64_t z = b & 0x7F;
        int w = 1;
        while (b >= 0x80) {
            int key, kind;
            if (w >= max_bytes) {
                key = 2 * w, kind = ERR_LONGER;
            }
            else if (p + w >= end) {
                key = 2 * w, kind = ERR_PAST;
            }
            else if ((b = d[p + w]), w == 9 && b > 1) {
                key = 2 * w + 1, kind = ERR_OVERFLOW;
            }
            else {
                z |= (uint64_t)(b & 0x7F) << (7 * w);
                w++;
                continue;
            }
            if (key < best)
                best = key, best_kind = kind;
            break;
        }
        if (max_bytes <= 5 && (z >> 32))
            too_wide = 1;
        val[i] = unzigzag(z);
        width[i] = w;
    }
    switch (best_kind) {
    case ERR_LONGER:
        return corrupt("%s varint longer than %d bytes", what, max_bytes);
    case ERR_PAST:
        return corrupt("%s varint runs past the record", what);
    case ERR_OVERFLOW:
        return corrupt("%s varlong overflows 64 bits", what);
    }
    if (too_wide)
        return corrupt("%s varint does not fit in 32 bits", what);
    return 0;
}

/* ------------------------------------------------------------------------ headers */

/* _parse_headers of decode.py: the header tuple of one record, p..end. */
static PyObject *
parse_headers(const uint8_t *d, Py_ssize_t size, Py_ssize_t p, Py_ssize_t end, int64_t count)
{
    if (count * 2 > end - p) {
        corrupt("header count %lld exceeds the record", (long long)count);
        return NULL;
    }
    PyObject *out = PyTuple_New((Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    for (int64_t j = 0; j < count; j++) {
        int64_t klen, vlen;
        if (scalar_varint(d, size, p, 5, &klen, &p) < 0)
            goto fail;
        if (klen < 0 || p + klen > end) {
            corrupt("invalid header key length %lld", (long long)klen);
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)d + p, (Py_ssize_t)klen, "strict");
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt("header key is not valid UTF-8");
            }
            goto fail;
        }
        p += (Py_ssize_t)klen;
        if (scalar_varint(d, size, p, 5, &vlen, &p) < 0 || vlen < -1 || p + vlen > end) {
            if (!PyErr_Occurred())
                corrupt("invalid header value length %lld", (long long)vlen);
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value;
        if (vlen < 0) {
            value = Py_NewRef(Py_None);
        }
        else {
            value = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)vlen);
            p += (Py_ssize_t)vlen;
        }
        PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_XDECREF(value);
        if (pair == NULL)
            goto fail;
        PyObject_GC_UnTrack(pair); /* a str and bytes/None: atomic */
        PyTuple_SET_ITEM(out, (Py_ssize_t)j, pair);
    }
    if (p != end) {
        corrupt("record headers do not end at the record's end");
        goto fail;
    }
    PyObject_GC_UnTrack(out); /* holds only untracked pairs */
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* _decode_headers of decode.py: None when no record has headers, else one tuple each. */
static PyObject *
decode_headers(const uint8_t *d, Py_ssize_t size, Py_ssize_t m, const int64_t *p,
               const int64_t *ends, const int64_t *hc)
{
    int any = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (hc[i] > 0)
            any = 1;
        else if (p[i] != ends[i]) {
            corrupt("record does not consume exactly its length");
            return NULL;
        }
    }
    if (!any)
        Py_RETURN_NONE;
    PyObject *empty = PyTuple_New(0);
    PyObject *out = empty == NULL ? NULL : PyList_New(m);
    if (out == NULL) {
        Py_XDECREF(empty);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *h = hc[i] > 0 ? parse_headers(d, size, p[i], ends[i], hc[i])
                                : Py_NewRef(empty);
        if (h == NULL) {
            Py_DECREF(out);
            Py_DECREF(empty);
            return NULL;
        }
        PyList_SET_ITEM(out, i, h);
    }
    Py_DECREF(empty);
    return out;
}

/* ------------------------------------------------------------------------ decode */

typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, last_offset_delta;
    int log_append;
} BatchInfo;

/* Scratch columns of one decode (one allocation). */
typedef struct {
    int64_t *chain, *a, *b, *w, *p;
} Scratch;

static int
check_min(Py_ssize_t m, const int64_t *v, int64_t lo, const char *msg)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        if (v[i] < lo)
            return corrupt("%s", msg);
    }
    return 0;
}

/* The headers of every record, p[i] = the position of its headersCount: None when every
 * record ends with headersCount 0 there (the common case), else _decode_headers. */
static PyObject *
headers_field(const uint8_t *d, Py_ssize_t size, Py_ssize_t m, int64_t *p, const int64_t *ends,
              int64_t *v, int64_t *w)
{
    int plain = 1;
    for (Py_ssize_t i = 0; plain && i < m; i++) {
        if (p[i] + 1 != ends[i])
            plain = 0;
    }
    for (Py_ssize_t i = 0; plain && i < m; i++) {
        if (d[p[i]] != 0)
            plain = 0;
    }
    if (plain)
        Py_RETURN_NONE;
    if (read_column(d, m, p, ends, 5, "headersCount", v, w) < 0)
        return NULL;
    if (check_min(m, v, 0, "negative headers count") < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++)
        p[i] += w[i];
    return decode_headers(d, size, m, p, ends, v);
}

/* One varint at p (below end, at most max_bytes; a 5-byte one must fit 32 bits): 0, or -1 for
 * anything read_column would refuse (the fast path then gives way to it). */
static inline int
fast_varint(const uint8_t *d, int64_t p, int64_t end, int max_bytes, int64_t *val, int64_t *w)
{
    if (p + 1 < end && d[p + 1] < 0x80) { /* one or two bytes, the common widths */
        uint64_t z = d[p];
        *w = 1;
        if (z >= 0x80)
            z = (z & 0x7F) | ((uint64_t)d[p + 1] << 7), *w = 2;
        *val = unzigzag(z);
        return 0;
    }
    uint64_t z = 0;
    int i = 0;
    for (;;) {
        if (p + i >= end || i >= max_bytes)
            return -1;
        uint8_t b = d[p + i];
        if (i == 9 && b > 1)
            return -1;
        z |= (uint64_t)(b & 0x7F) << (7 * i);
        i++;
        if (b < 0x80)
            break;
    }
    if (max_bytes <= 5 && (z >> 32))
        return -1;
    *val = unzigzag(z);
    *w = i;
    return 0;
}

/* The fields of the record whose body (the attributes byte) starts at p and which ends at
 * end, read in one pass: 0 when every field is well formed and the record has no headers,
 * else -1 (decode_fields then reads the batch field by field, with its checks and errors). */
typedef struct {
    int64_t tsd, od, kp, kl, vp, vl;
} FastRecord;

#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

HOT_INLINE int
fast_record(const uint8_t *d, int64_t p, int64_t end, const BatchInfo *bi, FastRecord *r)
{
    int64_t w;
    p += 1; /* the attributes byte */
    if (fast_varint(d, p, end, 10, &r->tsd, &w) < 0)
        return -1;
    p += w;
    if (fast_varint(d, p, end, 5, &r->od, &w) < 0 || r->od < 0 || r->od > bi->last_offset_delta)
        return -1;
    p += w;
    if (fast_varint(d, p, end, 5, &r->kl, &w) < 0 || r->kl < -1)
        return -1;
    r->kp = p + w;
    p = r->kp + (r->kl > 0 ? r->kl : 0);
    if (fast_varint(d, p, end, 5, &r->vl, &w) < 0 || r->vl < -1)
        return -1;
    r->vp = p + w;
    p = r->vp + (r->vl > 0 ? r->vl : 0);
    if (p + 1 != end || d[p] != 0) /* headersCount 0, ending the record */
        return -1;
    return 0;
}

static inline int64_t
record_offset(const FastRecord *r, const BatchInfo *bi)
{
    return (int64_t)((uint64_t)r->od + (uint64_t)bi->base_offset);
}

static inline int64_t
record_timestamp(const FastRecord *r, const BatchInfo *bi)
{
    return bi->log_append ? bi->max_timestamp
                          : (int64_t)((uint64_t)r->tsd + (uint64_t)bi->base_timestamp);
}

/* decode_fields in one pass per record for the common case: every field well formed and no
 * record with headers. Returns 1 with the columns filled, or 0 when anything differs from that
 * (a damaged record, headers): decode_fields then reads the batch field by field, with its
 * checks and errors. It accepts exactly the batches decode_fields accepts without headers. */
static int
fast_fields(const uint8_t *d, Py_ssize_t m, const BatchInfo *bi, const int64_t *rs,
            int64_t *out64, int32_t *out32)
{
    int64_t *offsets = out64, *timestamps = out64 + m, *kp = out64 + 2 * m;
    int64_t *vp = out64 + 3 * m;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t p = rs[i], end = rs[i + 1], len, w;
        FastRecord r;
        if (fast_varint(d, p, end, 5, &len, &w) < 0 || p + w + len != end || len < MIN_BODY ||
            fast_record(d, p + w, end, bi, &r) < 0)
            return 0;
        kp[i] = r.kp, vp[i] = r.vp;
        out32[i] = (int32_t)r.kl;
        out32[m + i] = (int32_t)r.vl;
        timestamps[i] = record_timestamp(&r, bi);
        offsets[i] = record_offset(&r, bi);
    }
    return 1;
}

/* _decode_fields of decode.py. out64 = offsets, timestamps, key_pos, value_pos (m each);
 * out32 = key_len, value_len. Returns the headers (None or a list) or NULL. */
static PyObject *
decode_fields(const uint8_t *d, Py_ssize_t size, Py_ssize_t m, const BatchInfo *bi,
              Scratch *s, int64_t *out64, int32_t *out32)
{
    const int64_t *rs = s->chain, *ends = s->chain + 1;
    int64_t *offsets = out64, *timestamps = out64 + m, *kp = out64 + 2 * m;
    int64_t *vp = out64 + 3 * m, *p = s->p, *v = s->a, *tsd = s->b, *w = s->w;
    if (fast_fields(d, m, bi, rs, out64, out32))
        Py_RETURN_NONE;

    if (read_column(d, m, rs, ends, 5, "length", v, w) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        p[i] = rs[i] + w[i]; /* start of the body: the attributes byte */
        if (p[i] + v[i] != ends[i] || v[i] < MIN_BODY) {
            corrupt("invalid record length");
            return NULL;
        }
        p[i] += 1;
    }
    if (read_column(d, m, p, ends, 10, "timestampDelta", tsd, w) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++)
        p[i] += w[i];
    if (read_column(d, m, p, ends, 5, "offsetDelta", offsets, w) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        p[i] += w[i];
        if (offsets[i] < 0 || offsets[i] > bi->last_offset_delta) {
            corrupt("offset delta outside [0, lastOffsetDelta]");
            return NULL;
        }
    }
    if (read_column(d, m, p, ends, 5, "keyLength", v, w) < 0)
        return NULL;
    if (check_min(m, v, -1, "negative key length") < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        kp[i] = p[i] + w[i];
        out32[i] = (int32_t)v[i];
        p[i] = kp[i] + (v[i] > 0 ? v[i] : 0);
    }
    if (read_column(d, m, p, ends, 5, "valueLength", v, w) < 0)
        return NULL;
    if (check_min(m, v, -1, "negative value length") < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        vp[i] = p[i] + w[i];
        out32[m + i] = (int32_t)v[i];
        p[i] = vp[i] + (v[i] > 0 ? v[i] : 0);
    }
    PyObject *headers = headers_field(d, size, m, p, ends, v, w);
    if (headers == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++) {
        timestamps[i] = bi->log_append
                            ? bi->max_timestamp
                            : (int64_t)((uint64_t)tsd[i] + (uint64_t)bi->base_timestamp);
        offsets[i] = (int64_t)((uint64_t)offsets[i] + (uint64_t)bi->base_offset);
    }
    return headers;
}

PyDoc_STRVAR(decode_doc,
"decode(data, n, first, last, base_offset, base_timestamp, max_timestamp,\n"
"       last_offset_delta, log_append, cols64, cols32) -> headers\n\n"
"Records first..last-1 of a records section holding n records (first <= last <= n,\n"
"n * 7 <= len(data)) into cols64 (int64: offsets, timestamps, key_pos, value_pos; m = last -\n"
"first each) and cols32 (int32: key_len, value_len). Returns None (no record has headers) or\n"
"one header tuple per record. CorruptBatchError / IndexError as decode.py's _decode.");

static PyObject *
py_decode(PyObject *self, PyObject *args)
{
    Py_buffer data, c64, c32;
    long long n, first, last;
    BatchInfo bi;
    PyObject *o64, *o32;
    if (!PyArg_ParseTuple(args, "y*LLLLLLLpOO", &data, &n, &first, &last, &bi.base_offset,
                          &bi.base_timestamp, &bi.max_timestamp, &bi.last_offset_delta,
                          &bi.log_append, &o64, &o32))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = data.len;
    const uint8_t *d = (const uint8_t *)data.buf;
    if (first < 0 || last < first || n < last || n > size / 7 + 1) {
        PyErr_SetString(PyExc_ValueError, "invalid record range");
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t m = (Py_ssize_t)(last - first);
    if (get_column(o64, &c64, 8, 1, 4 * m) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (get_column(o32, &c32, 4, 1, 2 * m) < 0) {
        PyBuffer_Release(&c64);
        PyBuffer_Release(&data);
        return NULL;
    }
    int64_t *mem = PyMem_Malloc(sizeof(int64_t) * (5 * (size_t)m + 1));
    if (mem == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Scratch s = {mem, mem + m + 1, mem + 2 * m + 1, mem + 3 * m + 1, mem + 4 * m + 1};
    int64_t stop = 0;
    if (walk(d, size, last, first, s.chain, &stop) < 0)
        goto done;
    if (last == n && stop != size) {
        corrupt("records do not end at the end of the batch");
        goto done;
    }
    if (stop > size) {
        corrupt("record runs past the end of the batch");
        goto done;
    }
    s.chain[m] = stop;
    if (m == 0)
        result = Py_NewRef(Py_None);
    else
        result = decode_fields(d, size, m, &bi, &s, (int64_t *)c64.buf, (int32_t *)c32.buf);
done:
    PyMem_Free(mem);
    PyBuffer_Release(&c32);
    PyBuffer_Release(&c64);
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------------ slices, records */

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

PyDoc_STRVAR(slices_doc,
"slices(data, pos, lens) -> list\n\n"
"[data[p:p+n] or None if n < 0 for p, n in zip(pos, lens)]; pos int64, lens int32.");

static PyObject *
py_slices(PyObject *self, PyObject *args)
{
    PyObject *data, *opos, *olen;
    Py_buffer pos, len;
    if (!PyArg_ParseTuple(args, "SOO", &data, &opos, &olen))
        return NULL;
    if (PyObject_GetBuffer(olen, &len, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = len.len / 4;
    if (len.itemsize != 4 || get_column(opos, &pos, 8, 0, n) < 0) {
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

PyDoc_STRVAR(gather_doc,
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
    if (c->len.itemsize != 4 || get_column(opos, &c->pos, 8, 0, c->n) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "column of the wrong item size");
        PyBuffer_Release(&c->len);
        return -1;
    }
    return 0;
}

/* Bytes of the items of one column (nulls counted into *nulls), or -1 with ValueError when
 * one lies outside the data. */
static int64_t
column_bytes(const int64_t *pos, const int32_t *len, Py_ssize_t n, int64_t size,
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
    return column_bytes(c->pos.buf, c->len.buf, c->n, PyBytes_GET_SIZE(c->data), nulls);
}

static PyObject *
py_gather(PyObject *self, PyObject *arg)
{
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

static int
check_record_type(PyTypeObject *t)
{
    if (!PyType_IsSubtype(t, &PyTuple_Type) || t->tp_basicsize != PyTuple_Type.tp_basicsize ||
        t->tp_itemsize != sizeof(PyObject *) || t->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record type must be a slotted tuple subclass");
        return -1;
    }
    return 0;
}

/* One Record(topic, partition, offset, timestamp, ttype, key, value, headers); untracked
 * by the GC when every field is atomic (or an untracked tuple). */
static PyObject *
new_record(PyTypeObject *t, PyObject *fields[8], int atomic_prefix)
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

PyDoc_STRVAR(records_doc,
"records(record_type, topic, partition, ttype, data, offsets, timestamps, key_pos, key_len,\n"
"        value_pos, value_len, headers) -> list\n\n"
"One record_type(topic, partition, offset, timestamp, ttype, key, value, headers) per row.");

static PyObject *
py_records(PyObject *self, PyObject *args)
{
    PyTypeObject *t;
    PyObject *topic, *partition, *ttype, *data, *cols[6], *headers;
    if (!PyArg_ParseTuple(args, "O!OOOSOOOOOOO", &PyType_Type, &t, &topic, &partition, &ttype,
                          &data, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &headers))
        return NULL;
    if (check_record_type(t) < 0)
        return NULL;
    Py_buffer v[6];
    Py_ssize_t n = PyObject_Length(cols[0]);
    if (n < 0)
        return NULL;
    static const int sizes[6] = {8, 8, 8, 4, 8, 4};
    int got = 0;
    for (; got < 6; got++) {
        if (get_column(cols[got], &v[got], sizes[got], 0, n) < 0)
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
            r = new_record(t, f, atomic);
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

/* ------------------------------------------------------------------------ encode */

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
    if (get_column(obj, &out->view, 8, 0, n) < 0)
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
    PyObject *crc = PyObject_CallOneArg(Crc32c, mv);
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

PyDoc_STRVAR(encode_doc,
"encode(values, keys, headers, tsd, od, header) -> bytes\n\n"
"The records section of values/keys/headers (keys, headers: None or one per value) with\n"
"timestampDeltas tsd (int64 column or one int) and offsetDeltas od (int64 column, or None\n"
"for 0..n-1). With header (61 packed bytes, batchLength and CRC ignored): the whole batch,\n"
"batchLength and CRC-32C written in place.");

static PyObject *
py_encode(PyObject *self, PyObject *args)
{
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
    EncodeState st = {PySequence_Fast_GET_SIZE(values)};
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

/* ------------------------------------------------------------------------ Arrow sink */

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
        if (get_column(cols[got], &v[got], sizes[got], 0, n) < 0)
            break;
    }
    if (got < 6)
        goto done;
    const int64_t *off = v[0].buf, *ts = v[1].buf, *kp = v[2].buf, *vp = v[4].buf;
    const int32_t *kl = v[3].buf, *vl = v[5].buf;
    Py_ssize_t nulls = 0;
    int64_t kbytes = column_bytes(kp, kl, n, data.len, &nulls), vbytes;
    if (kbytes < 0 || (vbytes = column_bytes(vp, vl, n, data.len, &nulls)) < 0)
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

static PyTypeObject SinkType = {
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

/* ------------------------------------------------------------------------ module */

/* ------------------------------------------------------------------------ argument scans */

PyDoc_STRVAR(first_not_bytes_doc,
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

static PyObject *
py_first_not_bytes(PyObject *self, PyObject *seq)
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

PyDoc_STRVAR(first_not_int64_doc,
"first_not_int64(seq, out=None) -> int\n\n"
"The index of the first item of the list or tuple seq that is not exactly an int in\n"
"[0, 2**63); -1 when there is none. With ``out`` (a writable int64 column of len(seq)) the\n"
"items before that index are stored in it.");

static PyObject *
py_first_not_int64(PyObject *self, PyObject *args)
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
        if (get_column(out, &view, 8, 1, n) < 0)
            return NULL;
        o = view.buf;
    }
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        int overflow = 0;
        long long v = PyLong_CheckExact(items[i]) ? PyLong_AsLongLongAndOverflow(items[i], &overflow)
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

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"slices", py_slices, METH_VARARGS, slices_doc},
    {"gather", py_gather, METH_O, gather_doc},
    {"records", py_records, METH_VARARGS, records_doc},
    {"encode", py_encode, METH_VARARGS, encode_doc},
    {"first_not_bytes", py_first_not_bytes, METH_O, first_not_bytes_doc},
    {"first_not_int64", py_first_not_int64, METH_VARARGS, first_not_int64_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ccodec",
    "The compiled core of embedlog's v2 batch codec (see embedlog.segment.decode/encode).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__ccodec(void)
{
    PyObject *errors = PyImport_ImportModule("embedlog.errors");
    if (errors == NULL)
        return NULL;
    CorruptBatchError = PyObject_GetAttrString(errors, "CorruptBatchError");
    Py_DECREF(errors);
    PyObject *crc = PyImport_ImportModule("crc32c");
    if (crc == NULL)
        return NULL;
    Crc32c = PyObject_GetAttrString(crc, "crc32c");
    Py_DECREF(crc);
    if (CorruptBatchError == NULL || Crc32c == NULL || PyType_Ready(&SinkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "ArrowSink", (PyObject *)&SinkType) < 0)
        Py_CLEAR(m);
    return m;
}
