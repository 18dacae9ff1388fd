package embedlog;


/**
 * The records of one decoded batch as reusable columns over {@link #data} (the batch's bytes
 * or its decompressed section): record {@code i} has offset {@code offsets[i]}, timestamp
 * {@code timestamps[i]} (maxTimestamp for every record of a LogAppendTime batch), key
 * {@code data[keyOff[i] .. +keyLen[i])} (keyLen -1: null), value likewise, and
 * {@code headerCount[i]} headers starting at {@code headersOff[i]}. The arrays only grow: a
 * scan decodes every batch into the same instance, allocating nothing per record.
 *
 * <p>{@link #decode} validates the whole batch before any column is read (what the Python
 * decoder checks, all of it: record lengths chained to the exact end of the section, varint
 * widths, offset deltas in [0, lastOffsetDelta], key/value lengths &gt;= -1, header count
 * &gt;= 0, header key lengths &gt;= 0 with strict UTF-8 keys, header value lengths &gt;= -1, every
 * record consuming exactly its length), so a batch is either wholly valid or an error.
 */
public final class RecordColumns {
    private static final int MIN_BODY = BatchFormat.MIN_RECORD - 1;

    public byte[] data;
    public int count;
    public long[] offsets = new long[64];
    public long[] timestamps = new long[64];
    public int[] keyOff = new int[64];
    public int[] keyLen = new int[64];
    public int[] valueOff = new int[64];
    public int[] valueLen = new int[64];
    public int[] headerCount = new int[64];
    public int[] headersOff = new int[64];
    private final GrowBuffer scratch = new GrowBuffer(1 << 16);
    /** Position after the last varint read. */
    private int pos;

    GrowBuffer scratch() {
        return scratch;
    }

    /** Frees the native decompression state kept for the next batches. */
    public void close() {
        scratch.close();
    }

    private void grow(int n) {
        if (offsets.length >= n) {
            return;
        }
        int m = Math.max(n, offsets.length * 2);
        offsets = java.util.Arrays.copyOf(offsets, m);
        timestamps = java.util.Arrays.copyOf(timestamps, m);
        keyOff = java.util.Arrays.copyOf(keyOff, m);
        keyLen = java.util.Arrays.copyOf(keyLen, m);
        valueOff = java.util.Arrays.copyOf(valueOff, m);
        valueLen = java.util.Arrays.copyOf(valueLen, m);
        headerCount = java.util.Arrays.copyOf(headerCount, m);
        headersOff = java.util.Arrays.copyOf(headersOff, m);
    }

    /** Zigzag varint at {@code p}, ending at or before {@code lim}; sets {@link #pos}. */
    private long varint(byte[] d, int p, int lim, int maxBytes, String what)
            throws CorruptBatchException {
        if (p >= lim) {
            throw new CorruptBatchException("record too short for its " + what);
        }
        long z = 0;
        for (int w = 0; ; w++) {
            int b = d[p + w] & 0xFF;
            if (w == 9 && b > 1) {
                throw new CorruptBatchException(what + " varlong overflows 64 bits");
            }
            z |= (long) (b & 0x7F) << (7 * w);
            if (b < 0x80) {
                pos = p + w + 1;
                break;
            }
            if (w + 1 >= maxBytes) {
                throw new CorruptBatchException(what + " varint longer than " + maxBytes
                    + " bytes");
            }
            if (p + w + 1 >= lim) {
                throw new CorruptBatchException(what + " varint runs past the record");
            }
        }
        if (maxBytes <= 5 && (z >>> 32) != 0) {
            throw new CorruptBatchException(what + " varint does not fit in 32 bits");
        }
        return (z >>> 1) ^ -(z & 1);
    }

    /** Decode and validate the {@code h.recordCount} records of {@code d[start..end)}. */
    void decode(byte[] d, int start, int end, BatchHeader h) throws CorruptBatchException {
        data = d;
        count = 0;
        int n = h.recordCount;
        int size = end - start;
        if (n == 0) {
            if (size != 0) {
                throw new CorruptBatchException("bytes after the last record");
            }
            return;
        }
        if ((long) n * BatchFormat.MIN_RECORD > size) {
            throw new CorruptBatchException("records count " + n + " cannot fit in " + size
                + " bytes");
        }
        grow(n);
        boolean logAppend = h.logAppendTime();
        int p = start;
        for (int i = 0; i < n; i++) {
            if (p + 1 >= end) {
                throw new CorruptBatchException("malformed records: index out of range");
            }
            long len = varint(d, p, end, 5, "length");
            int q = pos;
            if (len < MIN_BODY) {
                throw new CorruptBatchException("invalid record length " + len);
            }
            if (len > end - q) {
                throw new CorruptBatchException("record runs past the end of the batch");
            }
            int re = q + (int) len;
            p = record(d, q + 1, re, i, h);
            if (p != re) {
                throw new CorruptBatchException("record does not consume exactly its length");
            }
            timestamps[i] = logAppend ? h.maxTimestamp : timestamps[i] + h.baseTimestamp;
            offsets[i] += h.baseOffset;
        }
        if (p != end) {
            throw new CorruptBatchException("records do not end at the end of the batch");
        }
        count = n;
    }

    /** The fields of record {@code i}, from its timestampDelta at {@code p} to {@code re}. */
    private int record(byte[] d, int p, int re, int i, BatchHeader h)
            throws CorruptBatchException {
        timestamps[i] = varint(d, p, re, 10, "timestampDelta");
        long od = varint(d, pos, re, 5, "offsetDelta");
        if (od < 0 || od > h.lastOffsetDelta) {
            throw new CorruptBatchException("offset delta outside [0, lastOffsetDelta]");
        }
        offsets[i] = od;
        long kl = varint(d, pos, re, 5, "keyLength");
        if (kl < -1) {
            throw new CorruptBatchException("negative key length");
        }
        keyOff[i] = pos;
        keyLen[i] = (int) kl;
        if (kl > re - pos) {
            throw new CorruptBatchException("record too short for its valueLength");
        }
        long vl = varint(d, pos + (int) Math.max(kl, 0), re, 5, "valueLength");
        if (vl < -1) {
            throw new CorruptBatchException("negative value length");
        }
        valueOff[i] = pos;
        valueLen[i] = (int) vl;
        if (vl > re - pos) {
            throw new CorruptBatchException("record too short for its headersCount");
        }
        long hc = varint(d, pos + (int) Math.max(vl, 0), re, 5, "headersCount");
        if (hc < 0) {
            throw new CorruptBatchException("negative headers count");
        }
        headerCount[i] = (int) hc;
        headersOff[i] = pos;
        return hc == 0 ? pos : headers(d, pos, re, hc);
    }

    /** Validate {@code count} headers from {@code p}; they must end exactly at {@code end}. */
    private int headers(byte[] d, int p, int end, long count) throws CorruptBatchException {
        if (count * 2 > end - p) {
            throw new CorruptBatchException("header count " + count + " exceeds the record");
        }
        for (long j = 0; j < count; j++) {
            long klen = headerVarint(d, p, end);
            p = pos;
            if (klen < 0 || klen > end - p) {
                throw new CorruptBatchException("invalid header key length " + klen);
            }
            if (!Utf8.valid(d, p, (int) klen)) {
                throw new CorruptBatchException("header key is not valid UTF-8");
            }
            p += (int) klen;
            long vlen = headerVarint(d, p, end);
            p = pos;
            if (vlen < -1 || vlen > end - p) {
                throw new CorruptBatchException("invalid header value length " + vlen);
            }
            p += (int) Math.max(vlen, 0);
        }
        if (p != end) {
            throw new CorruptBatchException("record headers do not end at the record's end");
        }
        return p;
    }

    /** A header's length varint (decode_varint of header.py, bounded by the record). */
    private long headerVarint(byte[] d, int p, int end) throws CorruptBatchException {
        long z = 0;
        for (int i = 0; i < 5; i++) {
            if (p + i >= end) {
                throw new CorruptBatchException("varint runs past the end of the data");
            }
            int b = d[p + i] & 0xFF;
            z |= (long) (b & 0x7F) << (7 * i);
            if (b < 0x80) {
                if ((z >>> 32) != 0) {
                    throw new CorruptBatchException("varint does not fit in 32 bits");
                }
                pos = p + i + 1;
                return (z >>> 1) ^ -(z & 1);
            }
        }
        throw new CorruptBatchException("varint longer than 5 bytes");
    }

    /**
     * Walk the {@code count} headers at {@code headersOff} of {@code buf}: what a
     * {@link RecordSink} is handed (validated when its batch was decoded, so no check is made
     * here). Allocates the key strings only.
     */
    public static void headers(byte[] buf, int headersOff, int count, HeaderVisitor v) {
        int p = headersOff;
        for (int j = 0; j < count; j++) {
            long k = validVarint(buf, p);
            int kl = (int) (k >> 32);
            p = (int) k;
            int ko = p;
            long val = validVarint(buf, p + kl);
            int vl = (int) (val >> 32);
            p = (int) val;
            v.header(buf, ko, kl, p, vl);
            p += Math.max(vl, 0);
        }
    }

    /** A well-formed 32-bit varint at {@code p}: its value in the high half, the position
     * after it in the low half. */
    private static long validVarint(byte[] buf, int p) {
        long z = 0;
        for (int shift = 0; ; shift += 7) {
            int b = buf[p++] & 0xFF;
            z |= (long) (b & 0x7F) << shift;
            if (b < 0x80) {
                return ((z >>> 1) ^ -(z & 1)) << 32 | p;
            }
        }
    }
}
