/*
 * The cleaner's record walks over stored batches, compiled: part of embedlog.compaction._ckeymap
 * (included by _ckeymap.c after the digests and the map, so one module is built from one file).
 *
 * Both functions take one buffer holding whole uncompressed data batches (a read of a segment)
 * and a table of those batches, 8 int64 per batch, filled by cleaner.py / mapping.py from the
 * batch headers the segment walk already checked (CRC, sizes, offsets):
 *
 *     start, size, records_count, base_offset, last_offset_delta, base_timestamp,
 *     max_timestamp, flags (FLAG_LOG_APPEND | FLAG_HAS_HORIZON | FLAG_EXPIRED)
 *
 * Each batch's records are read with the codec's one-pass reader (fast_record, ccodec.h), which
 * accepts exactly what the codec's decode accepts for records without headers. A batch with
 * anything else (a damaged record, headers, a record count that does not fill the batch, a
 * batch outside the buffer) is left alone, nothing of it used, and named in the answer: the
 * caller takes the numpy path (columns.py) for it, which gives the answer or the
 * CorruptBatchError. So these functions never decide what is corrupt; they only skip the
 * decode of batches that are not. Whether a batch is read depends on that batch alone.
 *
 * Every read is bounded by the batch's [start, start + size), checked against the buffer.
 */
#include "../segment/_ccodec_src/ccodec.h"

#define TABLE_COLS 8
#define FLAG_LOG_APPEND 1
#define FLAG_HAS_HORIZON 2
#define FLAG_EXPIRED 4
#define MIN_RECORD 7 /* length varint + MIN_BODY */

/* One record of a walked batch: its bytes [start, end) in the buffer and its fields. */
typedef struct {
    int64_t start, end;
    FastRecord r;
    int minimal; /* every varint minimal: the record's bytes can be copied on their own */
} Walked;

/* Bytes of the minimal zigzag varint of v. */
static inline int64_t
varint_width(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int64_t w = 1;
    while (z >= 0x80) {
        z >>= 7;
        w++;
    }
    return w;
}

/* The table row of batch i checked against the buffer: 0, or -1 (not for the fast path). */
static int
check_row(const int64_t *row, Py_ssize_t size)
{
    int64_t start = row[0], len = row[1], count = row[2];
    if (start < 0 || len < HEADER_SIZE || start > size - len)
        return -1;
    if (count < 1 || count > (len - HEADER_SIZE) / MIN_RECORD)
        return -1;
    if (row[4] < 0 || row[4] > INT32_MAX_)
        return -1;
    return 0;
}

/* The records of one batch (table row `row`) into out[0..count): 0, or -1 when a record is
 * not one fast_record reads or the records do not end exactly at the end of the batch. */
static int
walk_batch(const uint8_t *d, const int64_t *row, Walked *out)
{
    int64_t p = row[0] + HEADER_SIZE, end = row[0] + row[1];
    BatchInfo bi = {row[3], row[5], row[6], row[4], (int)(row[7] & FLAG_LOG_APPEND)};
    for (int64_t i = 0; i < row[2]; i++) {
        int64_t len, w;
        if (fast_varint(d, p, end, 5, &len, &w) < 0 || len < MIN_BODY || len > end - p - w)
            return -1;
        Walked *x = &out[i];
        x->start = p;
        x->end = p + w + len;
        if (fast_record(d, p + w, x->end, &bi, &x->r) < 0)
            return -1;
        if (i > 0 && x->r.od <= out[i - 1].r.od) /* out of offset order: the columns' error */
            return -1;
        x->minimal = w == varint_width(len) &&
                     x->r.kp == p + w + 1 + varint_width(x->r.tsd) + varint_width(x->r.od) +
                                    varint_width(x->r.kl) &&
                     x->r.vp == x->r.kp + (x->r.kl > 0 ? x->r.kl : 0) + varint_width(x->r.vl);
        p = x->end;
    }
    return p == end ? 0 : -1;
}

/* The buffer and the batch table of a call; 0, or -1 with an exception set. */
static int
take_batches(PyObject *buf_obj, PyObject *table_obj, Py_buffer *buf, Py_buffer *table,
             Py_ssize_t *n)
{
    if (PyObject_GetBuffer(buf_obj, buf, PyBUF_SIMPLE) < 0)
        return -1;
    *n = -1;
    if (column(table_obj, table, 8, 0, n) < 0) {
        PyBuffer_Release(buf);
        return -1;
    }
    if (*n % TABLE_COLS) {
        PyBuffer_Release(table);
        PyBuffer_Release(buf);
        PyErr_SetString(PyExc_ValueError, "batch table of the wrong width");
        return -1;
    }
    *n /= TABLE_COLS;
    return 0;
}

/* Walk every batch of the table into one array of records (PyMem; batch b's at first[b], for
 * the row's count of records); ok[b] = 0 for a batch that is not for the fast path (its
 * records are then garbage). NULL with an exception when out of memory. */
static Walked *
walk_all(const uint8_t *d, Py_ssize_t size, const int64_t *table, Py_ssize_t n, int64_t *first,
         uint8_t *ok)
{
    int64_t count = 0;
    for (Py_ssize_t b = 0; b < n; b++) {
        const int64_t *row = table + b * TABLE_COLS;
        ok[b] = check_row(row, size) == 0;
        first[b] = count;
        count += ok[b] ? row[2] : 0;
    }
    first[n] = count;
    Walked *recs = PyMem_Malloc(sizeof(Walked) * (size_t)(count ? count : 1));
    if (recs == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t b = 0; b < n; b++) {
        if (ok[b] && walk_batch(d, table + b * TABLE_COLS, recs + first[b]) < 0)
            ok[b] = 0;
    }
    return recs;
}

/* A list of the indexes b with ok[b] == 0 (the batches left to the caller), or NULL. */
static PyObject *
not_read(const uint8_t *ok, Py_ssize_t n)
{
    PyObject *out = PyList_New(0);
    for (Py_ssize_t b = 0; out != NULL && b < n; b++) {
        if (ok[b])
            continue;
        PyObject *i = PyLong_FromSsize_t(b);
        if (i == NULL || PyList_Append(out, i) < 0)
            Py_CLEAR(out);
        Py_XDECREF(i);
    }
    return out;
}

/* ----------------------------------------------------------------------------- map_batches */

#define PREFETCH_AHEAD 16

/* put() of _ckeymap.c for the m keys (lane0, lane1, offset triples): the keys added, or -1
 * when the table is full (the keys before stay recorded). */
static Py_ssize_t
insert(uint64_t *lane0, uint64_t *lane1, int64_t *value, Py_ssize_t slots,
       const uint64_t *keys, int64_t m)
{
    Py_ssize_t added = 0;
    for (int64_t i = 0; i < m; i++) {
#if defined(__GNUC__)
        if (i + PREFETCH_AHEAD < m && slots) {
            Py_ssize_t h = (Py_ssize_t)(keys[3 * (i + PREFETCH_AHEAD)] % (uint64_t)slots);
            __builtin_prefetch(&value[h], 1);
            __builtin_prefetch(&lane0[h], 1);
            __builtin_prefetch(&lane1[h], 1);
        }
#endif
        uint64_t k0 = keys[3 * i], k1 = keys[3 * i + 1];
        int64_t off = (int64_t)keys[3 * i + 2];
        Py_ssize_t s = slots ? probe(lane0, lane1, value, slots, k0, k1) : -1;
        if (s < 0)
            return -1;
        if (value[s] < 0) {
            lane0[s] = k0, lane1[s] = k1, value[s] = off;
            added++;
        }
        else if (off > value[s]) {
            value[s] = off;
        }
    }
    return added;
}

PyDoc_STRVAR(map_batches_doc,
"map_batches(buf, table, first_dirty, seed0, seed1, lane0, lane1, value) -> (added, left)\n"
"KeyMapper._map_chunk of mapping.py over the batches of table (see _cclean.h) in buf: the\n"
"digest of the key of every record at or past first_dirty with a key is put in the map\n"
"(lane0, lane1, value: OffsetMap's arrays) with the record's offset. Returns how many keys\n"
"were added and the indexes of the batches the fast path does not read (nothing of them is\n"
"put). A full map raises ValueError as put() does.");

/* The digests and offsets of the mapped records of the batches read, in order, as (lane0,
 * lane1, offset) triples into keys; returns how many. */
static int64_t
mapped_keys(const uint8_t *d, const int64_t *table, Py_ssize_t n, const Walked *recs,
            const int64_t *first, const uint8_t *ok, int64_t first_dirty, uint64_t seed0,
            uint64_t seed1, uint64_t *keys)
{
    int64_t m = 0;
    for (Py_ssize_t b = 0; b < n; b++) {
        if (!ok[b])
            continue;
        int64_t base = table[b * TABLE_COLS + 3];
        for (int64_t i = first[b]; i < first[b + 1]; i++) {
            const Walked *x = &recs[i];
            int64_t off = (int64_t)((uint64_t)x->r.od + (uint64_t)base);
            if (off < first_dirty || x->r.kl < 0)
                continue;
            digest_pair(d + x->r.kp, x->r.kl, seed0, seed1, &keys[3 * m], &keys[3 * m + 1]);
            keys[3 * m + 2] = (uint64_t)off;
            m++;
        }
    }
    return m;
}

static PyObject *
py_map_batches(PyObject *self, PyObject *args)
{
    PyObject *buf_obj, *table_obj, *objs[3];
    long long first_dirty;
    unsigned long long seed0, seed1;
    if (!PyArg_ParseTuple(args, "OOLKKOOO", &buf_obj, &table_obj, &first_dirty, &seed0, &seed1,
                          &objs[0], &objs[1], &objs[2]))
        return NULL;
    Py_buffer buf, table, v[3];
    Py_ssize_t n, lens[3];
    if (take_batches(buf_obj, table_obj, &buf, &table, &n) < 0)
        return NULL;
    static const Py_ssize_t sizes[3] = {8, 8, 8};
    static const int writable[3] = {1, 1, 1};
    static const int same[3] = {-1, 0, 0};
    if (columns(objs, sizes, writable, same, 3, v, lens) < 0) {
        PyBuffer_Release(&table);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *result = NULL;
    Walked *recs = NULL;
    uint64_t *keys = NULL;
    int64_t *first = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint8_t *ok = PyMem_Malloc((size_t)(n ? n : 1));
    if (first == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    recs = walk_all(buf.buf, buf.len, table.buf, n, first, ok);
    if (recs == NULL)
        goto done;
    /* the digests first, then the inserts in the same order, each slot prefetched a few keys
     * ahead (the table is far larger than the caches: a probe is a memory access) */
    keys = PyMem_Malloc(sizeof(uint64_t) * 3 * (size_t)(first[n] ? first[n] : 1));
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t m = mapped_keys(buf.buf, table.buf, n, recs, first, ok, first_dirty, seed0, seed1,
                            keys);
    Py_ssize_t added = insert(v[0].buf, v[1].buf, v[2].buf, lens[0], keys, m);
    if (added < 0) {
        PyErr_SetString(PyExc_ValueError, "the key map is full");
        goto done;
    }
    PyObject *left = not_read(ok, n);
    if (left != NULL)
        result = Py_BuildValue("(nN)", added, left);
done:
    PyMem_Free(keys);
    PyMem_Free(recs);
    PyMem_Free(ok);
    PyMem_Free(first);
    release(v, 3);
    PyBuffer_Release(&table);
    PyBuffer_Release(&buf);
    return result;
}

/* ----------------------------------------------------------------------------- filter */

/* Whether x is in the sorted array a[0..n); *cur is where the previous search ended (the
 * records come in offset order, so the search is usually one comparison). */
static int
in_sorted(const int64_t *a, Py_ssize_t n, int64_t x, Py_ssize_t *cur)
{
    Py_ssize_t lo = *cur, hi = n;
    if (lo > n || (lo > 0 && a[lo - 1] >= x))
        lo = 0;
    if (lo < n && a[lo] < x) {
        lo++;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (a[mid] < x)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    *cur = lo;
    return lo < n && a[lo] == x;
}

/* What the pass knows to decide on a record (cleaner._Pass). */
typedef struct {
    int64_t first_dirty, end_offset;
    const int64_t *survivors;
    Py_ssize_t n_survivors, cursor;
    const uint64_t *lane0, *lane1;
    const int64_t *value;
    Py_ssize_t slots, map_size;
    uint64_t seed0, seed1;
} Decide;

/* _decide_decoded of cleaner.py for one record: 1 kept, 0 dropped; *gone counts a tombstone
 * that is the latest for its key and removed because its delete horizon has passed. */
static int
decide(Decide *k, const uint8_t *d, const Walked *x, int64_t off, int expired, int64_t *gone)
{
    if (off >= k->end_offset)
        return 1;
    if (x->r.kl < 0)
        return 0;
    int latest;
    if (off >= k->first_dirty) {
        latest = in_sorted(k->survivors, k->n_survivors, off, &k->cursor);
    }
    else if (k->map_size == 0) {
        latest = 1;
    }
    else {
        uint64_t k0, k1;
        digest_pair(d + x->r.kp, x->r.kl, k->seed0, k->seed1, &k0, &k1);
        Py_ssize_t s = k->slots ? probe(k->lane0, k->lane1, k->value, k->slots, k0, k1) : -1;
        latest = s < 0 || k->value[s] < 0;
    }
    if (!latest)
        return 0;
    if (x->r.vl < 0 && expired) {
        (*gone)++;
        return 0;
    }
    return 1;
}

static inline void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void
put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* crc32c.crc32c(data[0:len]), or -1 with an exception. */
static int64_t
crc32c_of(const uint8_t *data, Py_ssize_t len)
{
    static PyObject *fn = NULL;
    if (fn == NULL) {
        PyObject *mod = PyImport_ImportModule("crc32c");
        if (mod == NULL)
            return -1;
        fn = PyObject_GetAttrString(mod, "crc32c");
        Py_DECREF(mod);
        if (fn == NULL)
            return -1;
    }
    PyObject *view = PyMemoryView_FromMemory((char *)data, len, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *crc = PyObject_CallOneArg(fn, view);
    Py_DECREF(view);
    if (crc == NULL)
        return -1;
    unsigned long v = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    return (int64_t)(v & 0xFFFFFFFFu);
}

/* fmt.rebuild_batch of the batch (row) with only its kept records: the header copied with
 * batchLength, maxTimestamp, recordsCount and the CRC set; the records' bytes unchanged. */
static PyObject *
shrunk(const uint8_t *d, const int64_t *row, const Walked *recs, const uint8_t *kept,
       int64_t n_kept)
{
    int64_t body = 0, max_ts = INT64_MIN;
    BatchInfo bi = {row[3], row[5], row[6], row[4], (int)(row[7] & FLAG_LOG_APPEND)};
    for (int64_t i = 0; i < row[2]; i++) {
        if (!kept[i])
            continue;
        body += recs[i].end - recs[i].start;
        int64_t ts = record_timestamp(&recs[i].r, &bi);
        max_ts = ts > max_ts ? ts : max_ts;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(HEADER_SIZE + body));
    if (out == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out), *w = o + HEADER_SIZE;
    memcpy(o, d + row[0], HEADER_SIZE);
    for (int64_t i = 0; i < row[2]; i++) {
        if (!kept[i])
            continue;
        int64_t a = recs[i].start, z = recs[i].end;
        while (i + 1 < row[2] && kept[i + 1]) /* a run of kept records: one copy */
            z = recs[++i].end;
        memcpy(w, d + a, (size_t)(z - a));
        w += z - a;
    }
    put_be32(o + 8, (uint32_t)(HEADER_SIZE - 12 + body));
    if (!bi.log_append)
        put_be64(o + 35, (uint64_t)max_ts);
    put_be32(o + 57, (uint32_t)n_kept);
    int64_t crc = crc32c_of(o + 21, (Py_ssize_t)(HEADER_SIZE - 21 + body));
    if (crc < 0) {
        Py_DECREF(out);
        return NULL;
    }
    put_be32(o + 17, (uint32_t)crc);
    return out;
}

enum { OUT_NONE, OUT_COPY, OUT_SHRUNK, OUT_REENCODE, OUT_NOT_READ };

/* The outcome of one batch (see filter_batches); a new reference, or NULL. */
static PyObject *
filter_one(Decide *k, const uint8_t *d, const int64_t *row, const Walked *recs, uint8_t *kept,
           int64_t *res, int64_t *gone)
{
    int64_t n = row[2], n_kept = 0;
    int expired = (row[7] & FLAG_EXPIRED) != 0, tomb_kept = 0, minimal = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = (int64_t)((uint64_t)recs[i].r.od + (uint64_t)row[3]);
        kept[i] = (uint8_t)decide(k, d, &recs[i], off, expired, gone);
        n_kept += kept[i];
        tomb_kept |= kept[i] && recs[i].r.vl < 0;
        minimal &= recs[i].minimal;
    }
    res[0] = OUT_NONE;
    res[1] = n_kept;
    if (n_kept == 0)
        return Py_NewRef(Py_None);
    if ((row[7] & FLAG_HAS_HORIZON) || !tomb_kept) {
        if (n_kept == n) {
            res[0] = OUT_COPY;
            return Py_NewRef(Py_None);
        }
        if (minimal) {
            res[0] = OUT_SHRUNK;
            return shrunk(d, row, recs, kept, n_kept);
        }
    }
    res[0] = OUT_REENCODE; /* a kept tombstone without a horizon, or records to re-encode */
    PyObject *mask = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (mask != NULL) {
        uint8_t *m = (uint8_t *)PyBytes_AS_STRING(mask);
        for (int64_t i = 0; i < n; i++)
            m[i] = (uint8_t)(kept[i] | (recs[i].r.vl < 0 ? 2 : 0));
    }
    return mask;
}

PyDoc_STRVAR(filter_batches_doc,
"filter_batches(buf, table, first_dirty, end_offset, survivors, lane0, lane1, value,\n"
"               map_size, seed0, seed1, out) -> (outputs, tombstones_removed)\n"
"_Pass._filter of cleaner.py for the data batches of table (see _cclean.h) in buf: decides\n"
"for each record whether it is kept (survivors: the map's sorted latest offsets; lane0,\n"
"lane1, value, map_size: the map, for records before first_dirty) and writes, per batch,\n"
"out[2b] = what became of it (0 nothing kept, 1 copied whole, 2 shrunk, 3 to re-encode,\n"
"4 not read: a batch the fast path does not read, left to the caller) and out[2b + 1] =\n"
"records kept. outputs[b] is the shrunk batch (bytes) for 2, one byte per record for 3\n"
"(bit 0: kept, bit 1: null value), else None.");

static PyObject *
filter_batches_run(Decide *k, const uint8_t *d, Py_ssize_t size, const int64_t *table,
                   Py_ssize_t n, int64_t *out)
{
    int64_t gone = 0;
    PyObject *outputs = NULL, *result = NULL;
    Walked *recs = NULL;
    uint8_t *kept = NULL;
    int64_t *first = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint8_t *ok = PyMem_Malloc((size_t)(n ? n : 1));
    if (first == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    recs = walk_all(d, size, table, n, first, ok);
    if (recs == NULL)
        goto done;
    outputs = PyList_New(n);
    kept = PyMem_Malloc((size_t)(first[n] ? first[n] : 1));
    if (outputs == NULL || kept == NULL) {
        if (kept == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t b = 0; b < n; b++) {
        PyObject *o;
        if (ok[b]) {
            o = filter_one(k, d, table + b * TABLE_COLS, recs + first[b], kept + first[b],
                           out + 2 * b, &gone);
            if (o == NULL)
                goto done;
        }
        else {
            out[2 * b] = OUT_NOT_READ, out[2 * b + 1] = 0;
            o = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(outputs, b, o);
    }
    result = Py_BuildValue("(OL)", outputs, (long long)gone);
done:
    Py_XDECREF(outputs);
    PyMem_Free(kept);
    PyMem_Free(recs);
    PyMem_Free(ok);
    PyMem_Free(first);
    return result;
}

static PyObject *
py_filter_batches(PyObject *self, PyObject *args)
{
    PyObject *buf_obj, *table_obj, *objs[5];
    Decide k;
    long long first_dirty, end_offset, map_size;
    unsigned long long seed0, seed1;
    if (!PyArg_ParseTuple(args, "OOLLOOOOLKKO", &buf_obj, &table_obj, &first_dirty, &end_offset,
                          &objs[0], &objs[1], &objs[2], &objs[3], &map_size, &seed0, &seed1,
                          &objs[4]))
        return NULL;
    Py_buffer buf, table, v[5];
    Py_ssize_t n, lens[5];
    if (take_batches(buf_obj, table_obj, &buf, &table, &n) < 0)
        return NULL;
    static const Py_ssize_t sizes[5] = {8, 8, 8, 8, 8};
    static const int writable[5] = {0, 0, 0, 0, 1};
    static const int same[5] = {-1, -1, 1, 1, -1};
    if (columns(objs, sizes, writable, same, 5, v, lens) < 0) {
        PyBuffer_Release(&table);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *result = NULL;
    if (lens[4] != 2 * n) {
        PyErr_SetString(PyExc_ValueError, "out must hold two int64 per batch");
        goto done;
    }
    k = (Decide){first_dirty, end_offset, v[0].buf, lens[0], 0, v[1].buf, v[2].buf, v[3].buf,
                 lens[1], map_size, seed0, seed1};
    result = filter_batches_run(&k, buf.buf, buf.len, table.buf, n, v[4].buf);
done:
    release(v, 5);
    PyBuffer_Release(&table);
    PyBuffer_Release(&buf);
    return result;
}
