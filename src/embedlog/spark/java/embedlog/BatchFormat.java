package embedlog;

import java.util.zip.CRC32C;

/**
 * Kafka's v2 record batch (magic 2) as pure functions on byte arrays: no file I/O. The layout
 * is {@link BatchHeader}'s; the records section (bytes 61..end) is the records back to back,
 * or one compressed stream of them (codec = attributes &amp; 7). Record layout, varints zigzag
 * base-128 (varint at most 5 bytes and 32 bits, varlong at most 10): length varint,
 * attributes i8, timestampDelta varlong, offsetDelta varint, keyLength varint (-1 null), key,
 * valueLength varint (-1 null), value, headersCount varint, headers (keyLength varint &gt;= 0,
 * UTF-8 key, valueLength varint &gt;= -1, value). Every check is the one embedlog's Python
 * decoder (src/embedlog/segment/header.py, decode.py, codecs.py) applies: what it rejects as
 * CorruptBatchError this rejects as {@link CorruptBatchException}.
 */
public final class BatchFormat {
    public static final int HEADER_SIZE = 61;
    public static final int LOG_OVERHEAD = 12;
    public static final int MAGIC_OFFSET = 16;
    public static final int ATTRIBUTES_OFFSET = 21;
    public static final int MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD;
    /** Smallest batchLength of any message format; below it Kafka calls the batch corrupt. */
    public static final int LEGACY_MIN_LENGTH = 14;
    public static final int COMPRESSION_MASK = 0x07;
    public static final int TIMESTAMP_TYPE_MASK = 0x08;
    public static final int TRANSACTIONAL_MASK = 0x10;
    public static final int CONTROL_MASK = 0x20;
    /** Smallest encoded record (seven one-byte fields). */
    public static final int MIN_RECORD = 7;
    /** The largest records section a batch decompresses to (Python's MAX_DECOMPRESSED). */
    public static final int MAX_DECOMPRESSED = 64 * 1024 * 1024;

    private BatchFormat() {
    }

    public static long i64(byte[] b, int p) {
        return ((long) i32(b, p) << 32) | (i32(b, p + 4) & 0xFFFFFFFFL);
    }

    public static int i32(byte[] b, int p) {
        return (b[p] & 0xFF) << 24 | (b[p + 1] & 0xFF) << 16 | (b[p + 2] & 0xFF) << 8
            | (b[p + 3] & 0xFF);
    }

    public static short i16(byte[] b, int p) {
        return (short) ((b[p] & 0xFF) << 8 | (b[p + 1] & 0xFF));
    }

    /**
     * Parse and sanity-check the header at {@code b[off..off+avail)} into {@code h} (the CRC is
     * not checked). Errors: fewer than 17 bytes, or magic 2 and fewer than 61 (truncated); magic
     * 0/1 (unsupported); any other magic; batchLength &lt; 49; recordCount &lt; 0;
     * lastOffsetDelta &lt; 0.
     */
    public static void parseHeader(byte[] b, int off, int avail, BatchHeader h)
            throws CorruptBatchException {
        if (avail < MAGIC_OFFSET + 1) {
            throw new CorruptBatchException("truncated batch header");
        }
        byte magic = b[off + MAGIC_OFFSET];
        if (magic == 0 || magic == 1) {
            throw new UnsupportedFormatException(
                "message format v0/v1 (magic " + magic + ") is not supported");
        }
        if (magic != 2) {
            throw new CorruptBatchException("invalid magic byte " + magic);
        }
        if (avail < HEADER_SIZE) {
            throw new CorruptBatchException("truncated batch header");
        }
        h.baseOffset = i64(b, off);
        h.batchLength = i32(b, off + 8);
        h.leaderEpoch = i32(b, off + 12);
        h.magic = magic;
        h.crc = i32(b, off + 17) & 0xFFFFFFFFL;
        h.attributes = i16(b, off + 21);
        h.lastOffsetDelta = i32(b, off + 23);
        h.baseTimestamp = i64(b, off + 27);
        h.maxTimestamp = i64(b, off + 35);
        h.producerId = i64(b, off + 43);
        h.producerEpoch = i16(b, off + 51);
        h.baseSequence = i32(b, off + 53);
        h.recordCount = i32(b, off + 57);
        if (h.batchLength < MIN_BATCH_LENGTH) {
            throw new CorruptBatchException("batch length " + h.batchLength + " below 49");
        }
        if (h.recordCount < 0) {
            throw new CorruptBatchException("negative records count " + h.recordCount);
        }
        if (h.lastOffsetDelta < 0) {
            throw new CorruptBatchException("negative last offset delta " + h.lastOffsetDelta);
        }
    }

    /** Check the CRC-32C over {@code b[off+21 .. off+size)}, the whole batch being in b. */
    public static void verifyCrc(byte[] b, int off, BatchHeader h, CRC32C crc)
            throws CorruptBatchException {
        long size = h.size();
        if (off + size > b.length) {
            throw new CorruptBatchException("batch extends past the end of the data");
        }
        crc.reset();
        crc.update(b, off + ATTRIBUTES_OFFSET, (int) size - ATTRIBUTES_OFFSET);
        long got = crc.getValue();
        if (got != h.crc) {
            throw new CorruptBatchException(String.format(
                "CRC-32C mismatch: stored %#010x, computed %#010x", h.crc, got));
        }
    }

    /**
     * Decode (decompressing first when the codec bits are set, at most
     * {@link #MAX_DECOMPRESSED} bytes) and fully validate the records of the whole batch at
     * {@code b[off..off+size)} into {@code out}. The CRC is not checked here. FallbackException
     * for what only the Python reader decodes (lz4 frames of dependent blocks).
     */
    public static void decodeBatch(byte[] b, int off, BatchHeader h, RecordColumns out)
            throws CorruptBatchException, FallbackException {
        int size = (int) h.size();
        int codec = h.codec();
        if (codec > Codecs.ZSTD) {
            throw new UnsupportedFormatException("unknown compression codec id " + codec);
        }
        int start = off + HEADER_SIZE;
        int len = size - HEADER_SIZE;
        if (codec == Codecs.NONE || (h.recordCount == 0 && len == 0)) {
            out.decode(b, start, start + len, h);
            return;
        }
        GrowBuffer raw = out.scratch();
        Codecs.decompress(codec, b, start, len, MAX_DECOMPRESSED, raw);
        out.decode(raw.buf, 0, raw.len, h);
    }
}
