/*
 * embedlog.compaction._ckeymap: the cleaner's key digests and key -> offset map, compiled.
 *
 * The reference is pure numpy (digest.py, offset_map.py); these functions give the same
 * digests bit for bit and the same map contents (a key's slot may differ: the numpy insert
 * resolves collisions in rounds, this one key by key, and both are linear probing from
 * lane0 % slots, so lookups agree). The map's arrays stay numpy arrays owned by OffsetMap:
 *
 *     lane0  uint64[slots]   first half of the key digest
 *     lane1  uint64[slots]   second half
 *     value  int64[slots]    latest offset of the key; < 0 = empty slot
 *
 * Every index and length is checked before memory is touched; a full table or a key outside
 * its buffer raises ValueError and changes nothing further. The GIL is held throughout
 * (the arrays belong to Python objects that other threads could resize).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POSITION UINT64_C(0x9E3779B97F4A7C15)

static const struct { int s1; uint64_t m1; int s2; uint64_t m2; int s3; } LANES[2] = {
    {33, UINT64_C(0xFF51AFD7ED558CCD), 33, UINT64_C(0xC4CEB9FE1A85EC53), 33}, /* murmur3 fmix64 */
    {30, UINT64_C(0xBF58476D1CE4E5B9), 27, UINT64_C(0x94D049BB133111EB), 31}, /* splitmix64 */
};

static inline uint64_t
mix(uint64_t x, int lane)
{
    x ^= x >> LANES[lane].s1;
    x *= LANES[lane].m1;
    x ^= x >> LANES[lane].s2;
    x *= LANES[lane].m2;
    x ^= x >> LANES[lane].s3;
    return x;
}

/* A contiguous buffer of n items of itemsize bytes (n < 0: any length, returned in *n). */
static int
column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, Py_ssize_t *n)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->len % itemsize || (*n >= 0 && view->len != *n * itemsize)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "column of the wrong item size or length");
        return -1;
    }
    *n = view->len / itemsize;
    return 0;
}

static void
release(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

/* Take `count` columns: objs[i] with sizes[i]-byte items, writable[i]; the first one fixes the
 * length of those whose expected length is -2 (same length as column 0). */
static int
columns(PyObject **objs, const Py_ssize_t *sizes, const int *writable, const int *same,
        int count, Py_buffer *views, Py_ssize_t *lens)
{
    for (int i = 0; i < count; i++) {
        lens[i] = same[i] >= 0 ? lens[same[i]] : -1;
        if (column(objs[i], &views[i], sizes[i], writable[i], &lens[i]) < 0) {
            release(views, i);
            return -1;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------------------- digests */

static inline uint64_t
key_word(const uint8_t *key, int64_t left)
{
    uint64_t w = 0;
    if (left >= 8) { /* a whole word, little-endian */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&w, key, 8);
        return w;
#else
        left = 8;
#endif
    }
    for (int64_t b = 0; b < left; b++)
        w |= (uint64_t)key[b] << (8 * b);
    return w;
}

/* The two lanes of a key's digest (digest.py), in one pass over its words: lane l is
 * fin_{1-l}(sum_j mix_l(w_j ^ (seed_l + j * POSITION)) ^ mix_l(len ^ seed_{1-l})). */
static inline void
digest_pair(const uint8_t *key, int64_t len, uint64_t seed0, uint64_t seed1, uint64_t *k0,
            uint64_t *k1)
{
    uint64_t h0 = 0, h1 = 0;
    int64_t nwords = (len + 7) >> 3;
    for (int64_t j = 0; j < nwords; j++) {
        uint64_t w = key_word(key + 8 * j, len - 8 * j);
        h0 += mix(w ^ (seed0 + (uint64_t)j * POSITION), 0);
        h1 += mix(w ^ (seed1 + (uint64_t)j * POSITION), 1);
    }
    h0 ^= mix((uint64_t)len ^ seed1, 0);
    h1 ^= mix((uint64_t)len ^ seed0, 1);
    *k0 = mix(h0, 1);
    *k1 = mix(h1, 0);
}

PyDoc_STRVAR(digests_doc,
"digests(buf, pos, lens, seed0, seed1, out0, out1)\n"
"Digester.digests of digest.py for keys buf[pos[i]:pos[i]+lens[i]] (int64 pos/lens), written\n"
"into the uint64 arrays out0/out1. A key reaching past len(buf) - 8 rounded to its words, or a\n"
"negative position or length, raises ValueError.");

static PyObject *
py_digests(PyObject *self, PyObject *args)
{
    PyObject *objs[6];
    unsigned long long seed0, seed1;
    if (!PyArg_ParseTuple(args, "OOOKKOO", &objs[0], &objs[1], &objs[2], &seed0, &seed1,
                          &objs[3], &objs[4]))
        return NULL;
    static const Py_ssize_t sizes[5] = {1, 8, 8, 8, 8};
    static const int writable[5] = {0, 0, 0, 1, 1};
    static const int same[5] = {-1, -1, 1, 1, 1};
    Py_buffer v[5];
    Py_ssize_t n[5];
    if (columns(objs, sizes, writable, same, 5, v, n) < 0)
        return NULL;
    const uint8_t *buf = v[0].buf;
    const int64_t *pos = v[1].buf, *lens = v[2].buf;
    uint64_t *out0 = v[3].buf, *out1 = v[4].buf;
    int64_t size = (int64_t)n[0];
    for (Py_ssize_t i = 0; i < n[1]; i++) {
        int64_t p = pos[i], len = lens[i];
        if (p < 0 || len < 0 || len > size || p > size - ((len + 7) & ~INT64_C(7))) {
            release(v, 5);
            PyErr_SetString(PyExc_ValueError, "key extends past the digest buffer");
            return NULL;
        }
        digest_pair(buf + p, len, seed0, seed1, &out0[i], &out1[i]);
    }
    release(v, 5);
    Py_RETURN_NONE;
}

/* ----------------------------------------------------------------------------- the map */

/* The slot holding (k0, k1), or the empty slot where it belongs; -1 when the table is full. */
static Py_ssize_t
probe(const uint64_t *lane0, const uint64_t *lane1, const int64_t *value, Py_ssize_t slots,
      uint64_t k0, uint64_t k1)
{
    Py_ssize_t s = (Py_ssize_t)(k0 % (uint64_t)slots);
    for (Py_ssize_t tries = 0; tries < slots; tries++) {
        if (value[s] < 0 || (lane0[s] == k0 && lane1[s] == k1))
            return s;
        if (++s == slots)
            s = 0;
    }
    return -1;
}

PyDoc_STRVAR(put_doc,
"put(lane0, lane1, value, keys0, keys1, offsets) -> added\n"
"OffsetMap.put over the table arrays: record offsets[i] for digest (keys0[i], keys1[i]) unless\n"
"a larger offset is held; returns how many new keys were added. A full table raises ValueError\n"
"(the keys before the one that found no slot stay recorded).");

static PyObject *
py_put(PyObject *self, PyObject *args)
{
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5]))
        return NULL;
    static const Py_ssize_t sizes[6] = {8, 8, 8, 8, 8, 8};
    static const int writable[6] = {1, 1, 1, 0, 0, 0};
    static const int same[6] = {-1, 0, 0, -1, 3, 3};
    Py_buffer v[6];
    Py_ssize_t n[6];
    if (columns(objs, sizes, writable, same, 6, v, n) < 0)
        return NULL;
    uint64_t *lane0 = v[0].buf, *lane1 = v[1].buf;
    int64_t *value = v[2].buf;
    const uint64_t *k0 = v[3].buf, *k1 = v[4].buf;
    const int64_t *offsets = v[5].buf;
    Py_ssize_t slots = n[0], added = 0;
    for (Py_ssize_t i = 0; i < n[3]; i++) {
        Py_ssize_t s = slots ? probe(lane0, lane1, value, slots, k0[i], k1[i]) : -1;
        if (s < 0) {
            release(v, 6);
            PyErr_SetString(PyExc_ValueError, "the key map is full");
            return NULL;
        }
        if (value[s] < 0) {
            lane0[s] = k0[i];
            lane1[s] = k1[i];
            value[s] = offsets[i];
            added++;
        } else if (offsets[i] > value[s]) {
            value[s] = offsets[i];
        }
    }
    release(v, 6);
    return PyLong_FromSsize_t(added);
}

PyDoc_STRVAR(get_doc,
"get(lane0, lane1, value, keys0, keys1, out)\n"
"OffsetMap.get: out[i] = the offset recorded for (keys0[i], keys1[i]), -1 where there is none.");

static PyObject *
py_get(PyObject *self, PyObject *args)
{
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5]))
        return NULL;
    static const Py_ssize_t sizes[6] = {8, 8, 8, 8, 8, 8};
    static const int writable[6] = {0, 0, 0, 0, 0, 1};
    static const int same[6] = {-1, 0, 0, -1, 3, 3};
    Py_buffer v[6];
    Py_ssize_t n[6];
    if (columns(objs, sizes, writable, same, 6, v, n) < 0)
        return NULL;
    const uint64_t *lane0 = v[0].buf, *lane1 = v[1].buf, *k0 = v[3].buf, *k1 = v[4].buf;
    const int64_t *value = v[2].buf;
    int64_t *out = v[5].buf;
    Py_ssize_t slots = n[0];
    for (Py_ssize_t i = 0; i < n[3]; i++) {
        Py_ssize_t s = slots ? probe(lane0, lane1, value, slots, k0[i], k1[i]) : -1;
        out[i] = (s < 0 || value[s] < 0) ? -1 : value[s];
    }
    release(v, 6);
    Py_RETURN_NONE;
}

#include "_cclean.h"

static PyMethodDef methods[] = {
    {"digests", py_digests, METH_VARARGS, digests_doc},
    {"map_batches", py_map_batches, METH_VARARGS, map_batches_doc},
    {"filter_batches", py_filter_batches, METH_VARARGS, filter_batches_doc},
    {"put", py_put, METH_VARARGS, put_doc},
    {"get", py_get, METH_VARARGS, get_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "embedlog.compaction._ckeymap",
    "The cleaner's key digests and key map, compiled (reference: digest.py, offset_map.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__ckeymap(void)
{
    return PyModule_Create(&module);
}
