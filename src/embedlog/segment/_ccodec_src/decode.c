/*
 * decode(): the record walk, the field columns, the headers and the one-pass common case
 * (see ccodec.h for the module's invariants). Errors are CorruptBatchError with the
 * messages of decode.py, checked in the same order.
 */
#include "ccodec.h"

/* ------------------------------------------------------------------------ small helpers */

static int
corrupt(const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(elc_corrupt_batch_error, msg);
        Py_DECREF(msg);
    }
    return -1;
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

/* Row i of the m rows of the columns out64 (offsets, timestamps, key_pos, value_pos) and out32
 * (key_len, value_len): the record r read by fast_record. */
HOT_INLINE void
store_record(const FastRecord *r, const BatchInfo *bi, Py_ssize_t i, Py_ssize_t m, int64_t *out64,
             int32_t *out32)
{
    out64[i] = record_offset(r, bi);
    out64[m + i] = record_timestamp(r, bi);
    out64[2 * m + i] = r->kp;
    out64[3 * m + i] = r->vp;
    out32[i] = (int32_t)r->kl;
    out32[m + i] = (int32_t)r->vl;
}

/* decode_fields in one pass per record (fast_record, ccodec.h) for the common case: every
 * field well formed and no record with headers. Returns 1 with the columns filled, or 0 when
 * anything differs from that (a damaged record, headers): decode_fields then reads the batch
 * field by field, with its checks and errors. It accepts exactly the batches decode_fields
 * accepts without headers. */
static int
fast_fields(const uint8_t *d, Py_ssize_t m, const BatchInfo *bi, const int64_t *rs,
            int64_t *out64, int32_t *out32)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t p = rs[i], end = rs[i + 1], len, w;
        FastRecord r;
        if (fast_varint(d, p, end, 5, &len, &w) < 0 || p + w + len != end || len < MIN_BODY ||
            fast_record(d, p + w, end, bi, &r) < 0)
            return 0;
        store_record(&r, bi, i, m, out64, out32);
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

/* Every record of a records section of n records in one pass, when every one is well formed
 * and none has headers (fast_record): the record-length chain is followed and each record's
 * fields read while it is at hand. Returns 1 with the columns filled, or 0 when anything
 * differs (the columns then hold garbage): walk and decode_fields read the section again, with
 * their checks and errors. A section it accepts is one walk and decode_fields accept with
 * the same columns (a record's length varint read alone, bounded by the section, ends where
 * walk's chain puts the next record). */
static int
one_pass(const uint8_t *d, Py_ssize_t size, Py_ssize_t m, const BatchInfo *bi, int64_t *out64,
         int32_t *out32)
{
    int64_t p = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t len, w;
        FastRecord r;
        /* the chain is serial: fetch the bytes ahead before the loads that depend on them */
        PREFETCH(d + (p + 512 < size ? p + 512 : 0));
        if (fast_varint(d, p, size, 5, &len, &w) < 0 || len < MIN_BODY || len > size - p - w ||
            fast_record(d, p + w, p + w + len, bi, &r) < 0)
            return 0;
        store_record(&r, bi, i, m, out64, out32);
        p += w + len;
    }
    return p == size;
}

/* Records first..last-1 of the section d[0:size] of n records into the columns o64 (int64,
 * 4 x m) and o32 (int32, 2 x m): the headers (None or a list), or NULL with the error. */
static PyObject *
decode_section(const uint8_t *d, Py_ssize_t size, long long n, long long first, long long last,
               const BatchInfo *bi, PyObject *o64, PyObject *o32)
{
    Py_buffer c64, c32;
    if (first < 0 || last < first || n < last || n > size / 7 + 1) {
        PyErr_SetString(PyExc_ValueError, "invalid record range");
        return NULL;
    }
    Py_ssize_t m = (Py_ssize_t)(last - first);
    if (elc_get_column(o64, &c64, 8, 1, 4 * m) < 0)
        return NULL;
    if (elc_get_column(o32, &c32, 4, 1, 2 * m) < 0) {
        PyBuffer_Release(&c64);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *mem = NULL;
    if (m > 0 && first == 0 && last == n &&
        one_pass(d, size, m, bi, (int64_t *)c64.buf, (int32_t *)c32.buf)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    mem = PyMem_Malloc(sizeof(int64_t) * (5 * (size_t)m + 1));
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
        result = decode_fields(d, size, m, bi, &s, (int64_t *)c64.buf, (int32_t *)c32.buf);
done:
    PyMem_Free(mem);
    PyBuffer_Release(&c32);
    PyBuffer_Release(&c64);
    return result;
}

ELC_DOC(decode,
"decode(data, n, first, last, base_offset, base_timestamp, max_timestamp,\n"
"       last_offset_delta, log_append, cols64, cols32) -> headers\n\n"
"Records first..last-1 of a records section holding n records (first <= last <= n,\n"
"n * 7 <= len(data)) into cols64 (int64: offsets, timestamps, key_pos, value_pos; m = last -\n"
"first each) and cols32 (int32: key_len, value_len). Returns None (no record has headers) or\n"
"one header tuple per record. CorruptBatchError / IndexError as decode.py's _decode.");

PyObject *
elc_py_decode(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data;
    long long n, first, last;
    BatchInfo bi;
    PyObject *o64, *o32;
    if (!PyArg_ParseTuple(args, "y*LLLLLLLpOO", &data, &n, &first, &last, &bi.base_offset,
                          &bi.base_timestamp, &bi.max_timestamp, &bi.last_offset_delta,
                          &bi.log_append, &o64, &o32))
        return NULL;
    PyObject *result = decode_section((const uint8_t *)data.buf, data.len, n, first, last, &bi,
                                      o64, o32);
    PyBuffer_Release(&data);
    return result;
}

ELC_DOC(decode_stored,
"decode_stored(buf, pos, size, n, base_offset, base_timestamp, max_timestamp,\n"
"              last_offset_delta, log_append, cols64, cols32) -> (data, headers)\n\n"
"decode() of all n records of the uncompressed batch of size bytes at pos of buf, whose\n"
"records section buf[pos + 61 : pos + size] is first copied into data (a new bytes object,\n"
"which the columns' positions refer to; no view of buf is kept). ValueError when the batch\n"
"does not lie within buf; else raises as decode() does.");

PyObject *
elc_py_decode_stored(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buf;
    Py_ssize_t pos, size;
    long long n;
    BatchInfo bi;
    PyObject *o64, *o32;
    if (!PyArg_ParseTuple(args, "y*nnLLLLLpOO", &buf, &pos, &size, &n, &bi.base_offset,
                          &bi.base_timestamp, &bi.max_timestamp, &bi.last_offset_delta,
                          &bi.log_append, &o64, &o32))
        return NULL;
    PyObject *data = NULL, *headers = NULL, *result = NULL;
    if (pos < 0 || size < HEADER_SIZE || pos > buf.len || size > buf.len - pos) {
        PyErr_SetString(PyExc_ValueError, "batch outside the buffer");
        goto done;
    }
    data = PyBytes_FromStringAndSize((const char *)buf.buf + pos + HEADER_SIZE,
                                     size - HEADER_SIZE);
    if (data == NULL)
        goto done;
    headers = decode_section((const uint8_t *)PyBytes_AS_STRING(data), size - HEADER_SIZE, n, 0,
                             n, &bi, o64, o32);
    if (headers != NULL)
        result = PyTuple_Pack(2, data, headers);
done:
    Py_XDECREF(headers);
    Py_XDECREF(data);
    PyBuffer_Release(&buf);
    return result;
}
