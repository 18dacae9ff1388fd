package embedlog;

/**
 * The structural walk of a zstd stream that codecs.py makes before decompressing (no
 * decompression): every frame complete, skippable frames allowed, nothing after the last
 * frame, no reserved block type. The streaming decoder alone would stop quietly at a
 * truncated frame.
 */
final class ZstdFrames {
    private static final long MAGIC = 0xFD2FB528L;
    private static final long SKIPPABLE_MASK = 0xFFFFFFF0L;
    private static final long SKIPPABLE = 0x184D2A50L;
    private static final int[] DID_SIZE = {0, 1, 2, 4};
    private static final int[] FCS_SIZE = {0, 2, 4, 8};

    private ZstdFrames() {
    }

    private static long le32(byte[] b, int p) {
        return (b[p] & 0xFFL) | (b[p + 1] & 0xFFL) << 8 | (b[p + 2] & 0xFFL) << 16
            | (b[p + 3] & 0xFFL) << 24;
    }

    /**
     * Walk the frames; returns the content size their headers declare in all, or -1 when a
     * frame declares none.
     */
    static long check(byte[] b, int off, int len) throws CorruptBatchException {
        long end = (long) off + len;
        long pos = off;
        long declared = 0;
        if (len == 0) {
            throw new CorruptBatchException("empty zstd stream");
        }
        while (pos < end) {
            if (pos + 4 > end) {
                throw new CorruptBatchException("truncated zstd frame magic");
            }
            long magic = le32(b, (int) pos);
            if ((magic & SKIPPABLE_MASK) == SKIPPABLE) {
                if (pos + 8 > end) {
                    throw new CorruptBatchException("truncated zstd skippable frame");
                }
                pos += 8 + le32(b, (int) pos + 4);
                if (pos > end) {
                    throw new CorruptBatchException("truncated zstd skippable frame");
                }
                continue;
            }
            if (magic != MAGIC) {
                throw new CorruptBatchException("bad zstd frame magic");
            }
            pos += 4;
            if (pos >= end) {
                throw new CorruptBatchException("truncated zstd frame header");
            }
            int fhd = b[(int) pos] & 0xFF;
            int single = (fhd >> 5) & 1;
            int fcsFlag = fhd >> 6;
            pos += 1 + (single != 0 ? 0 : 1) + DID_SIZE[fhd & 3];
            int fcsLen = (fcsFlag == 0 && single != 0) ? 1 : FCS_SIZE[fcsFlag];
            declared = fcsLen == 0 || declared < 0 || pos + fcsLen > end ? -1
                : declared + contentSize(b, (int) pos, fcsLen);
            pos += fcsLen;
            while (true) {
                if (pos + 3 > end) {
                    throw new CorruptBatchException("truncated zstd block header");
                }
                int p = (int) pos;
                int bh = (b[p] & 0xFF) | (b[p + 1] & 0xFF) << 8 | (b[p + 2] & 0xFF) << 16;
                int btype = (bh >> 1) & 3;
                if (btype == 3) {
                    throw new CorruptBatchException("reserved zstd block type");
                }
                pos += 3 + (btype == 1 ? 1 : (bh >>> 3));
                if ((bh & 1) != 0) {
                    break;
                }
            }
            if ((fhd & 4) != 0) {
                pos += 4;
            }
            if (pos > end) {
                throw new CorruptBatchException("truncated zstd frame");
            }
        }
        return declared;
    }

    /** The Frame_Content_Size field of {@code n} bytes at {@code p} (RFC 8878 3.1.1.1.4). */
    private static long contentSize(byte[] b, int p, int n) {
        long v = 0;
        for (int i = n - 1; i >= 0; i--) {
            v = v << 8 | (b[p + i] & 0xFF);
        }
        return n == 2 ? v + 256 : v < 0 ? Long.MAX_VALUE : v;
    }
}
