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
 *
 * One extension module from several translation units, each owning one part:
 *   decode.c      the record walk, field columns, headers, decode() and decode_stored()
 *   records.c     slices(), gather() and records(): Python objects from decoded columns
 *   encode.c      encode() and encode_listed(): records sections and whole batches
 *   arrow_sink.c  the ArrowSink type: stored batches straight into Arrow buffers
 *   scans.c       first_not_bytes() and first_not_int64(): argument scans; floor_index():
 *                 the point-read memo's search by offset
 *   point.c       run_records(): a point read's run of records straight into Records;
 *                 file_identity(): a segment file's identity (four fields of fstat);
 *                 point_run(): identity check, pread and run_records in one call
 *   deferred.c    deferred(): the lazy iterator a point read hands its records out through
 *   builder.c     the SlotBuilder type: frozen, slotted dataclasses built without a frame
 *   module.c      the shared objects, the method table and PyInit__ccodec
 * This header holds what they share: constants, the one-pass record reader (decode()'s
 * common case, also the Arrow sink's), and the declarations of the few functions and objects
 * defined in one file and used in another. Those carry the elc_ prefix and hidden visibility,
 * so the module exports PyInit__ccodec only; everything else is static to its file.
 */
#ifndef EMBEDLOG_CCODEC_H
#define EMBEDLOG_CCODEC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(__CYGWIN__)
#define ELC_INTERNAL __attribute__((visibility("hidden")))
#else
#define ELC_INTERNAL
#endif

#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define HOT_INLINE static inline
#define PREFETCH(address) ((void)0)
#endif

/* Reading the user's objects is bound by memory latency (a batch's values, keys and ints are
 * rarely in cache): the encoder asks for what it reads PREFETCH_AHEAD items ahead. */
#define PREFETCH_AHEAD 16

#define MIN_BODY 6
#define INT32_MAX_ 2147483647LL
#define HEADER_SIZE 61

/* ------------------------------------------------------------------------ shared objects */

ELC_INTERNAL extern PyObject *elc_corrupt_batch_error; /* embedlog.errors.CorruptBatchError */
ELC_INTERNAL extern PyObject *elc_crc32c;              /* crc32c.crc32c */
ELC_INTERNAL extern PyTypeObject elc_sink_type;        /* ArrowSink (arrow_sink.c) */
ELC_INTERNAL extern PyTypeObject elc_deferred_type;    /* Deferred (deferred.c) */
ELC_INTERNAL extern PyTypeObject elc_builder_type;     /* SlotBuilder (builder.c) */

/* A contiguous buffer of one fixed item size (the numpy columns handed in). module.c */
ELC_INTERNAL int elc_get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize,
                                int writable, Py_ssize_t n);

/* Bytes of the items of one column (nulls counted into *nulls), or -1 with ValueError when
 * one lies outside the data. records.c */
ELC_INTERNAL int64_t elc_column_bytes(const int64_t *pos, const int32_t *len, Py_ssize_t n,
                                      int64_t size, Py_ssize_t *nulls);

/* TypeError unless t is a slotted tuple subclass (the Record type); one such record of the 8
 * fields, untracked by the GC when atomic_prefix and fields[7] is untracked. records.c */
ELC_INTERNAL int elc_check_record_type(PyTypeObject *t);
ELC_INTERNAL PyObject *elc_new_record(PyTypeObject *t, PyObject *fields[8], int atomic_prefix);

/* The module's functions and their docstrings (one pair per file that defines them). */
#define ELC_FUNCTION(name)                                                                     \
    ELC_INTERNAL PyObject *elc_py_##name(PyObject *self, PyObject *args);                       \
    ELC_INTERNAL extern const char elc_##name##_doc[]
#define ELC_DOC(name, text) const char elc_##name##_doc[] = PyDoc_STR(text)

ELC_FUNCTION(decode);          /* decode.c */
ELC_FUNCTION(decode_stored);   /* decode.c */
ELC_FUNCTION(slices);          /* records.c */
ELC_FUNCTION(gather);          /* records.c */
ELC_FUNCTION(records);         /* records.c */
ELC_FUNCTION(encode);          /* encode.c */
ELC_FUNCTION(encode_listed);   /* encode.c */
ELC_FUNCTION(first_not_bytes); /* scans.c */
ELC_FUNCTION(first_not_int64); /* scans.c */
ELC_FUNCTION(run_records);     /* point.c */
ELC_FUNCTION(file_identity);   /* point.c */
ELC_INTERNAL PyObject *elc_py_point_run(PyObject *self, PyObject *const *args,
                                        Py_ssize_t nargs); /* point.c, METH_FASTCALL */
ELC_INTERNAL extern const char elc_point_run_doc[];
ELC_INTERNAL PyObject *elc_py_deferred(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs); /* deferred.c, METH_FASTCALL */
ELC_INTERNAL extern const char elc_deferred_doc[];
ELC_INTERNAL PyObject *elc_py_floor_index(PyObject *self, PyObject *const *args,
                                          Py_ssize_t nargs); /* scans.c, METH_FASTCALL */
ELC_INTERNAL extern const char elc_floor_index_doc[];

/* ------------------------------------------------------------------------ small helpers */

static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

/* ------------------------------------------------------------------------ one-pass records */

/* decode()'s common case, one pass per record, shared by decode.c (fast_fields) and
 * arrow_sink.c (sink_fields): the batch header fields a record's columns need. */
typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, last_offset_delta;
    int log_append;
} BatchInfo;

/* One varint at p (below end, at most max_bytes; a 5-byte one must fit 32 bits): 0, or -1 for
 * anything read_column (decode.c) would refuse (the fast path then gives way to it). */
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

#endif /* EMBEDLOG_CCODEC_H */
