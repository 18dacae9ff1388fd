package embedlog;

import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;
import net.jpountz.xxhash.XXHash32;
import net.jpountz.xxhash.XXHashFactory;

/**
 * LZ4 frames (the lz4 frame format, as Kafka's Lz4BlockOutputStream and embedlog write them)
 * decoded block by block into a reusable buffer, with what the lz4 library Python uses checks:
 * magic, version 01, reserved bits 0, block size id 4-7, header checksum, every block no
 * larger than the block size, block and content checksums when flagged, the declared content
 * size, an end mark; skippable frames skipped; frames follow each other to the end of the
 * data (bytes after the last frame are one more frame, and must be one). Frames of dependent
 * blocks (never written by Kafka or embedlog) are left to the Python reader.
 */
final class Lz4Frames {
    private static final int MAGIC = 0x184D2204;
    private static final int SKIPPABLE_MASK = 0xFFFFFFF0;
    private static final int SKIPPABLE = 0x184D2A50;
    private static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();
    private static final XXHash32 XXH = XXHashFactory.fastestInstance().hash32();

    private Lz4Frames() {
    }

    private static int le32(byte[] b, int p) {
        return (b[p] & 0xFF) | (b[p + 1] & 0xFF) << 8 | (b[p + 2] & 0xFF) << 16
            | (b[p + 3] & 0xFF) << 24;
    }

    private static CorruptBatchException bad(String why) {
        return new CorruptBatchException("invalid lz4 data: " + why);
    }

    /** Decode every frame of {@code b[off..off+len)} into {@code out} (at most max bytes). */
    static void decode(byte[] b, int off, int len, int max, GrowBuffer out)
            throws CorruptBatchException, FallbackException {
        int end = off + len;
        int p = off;
        do {
            if (end - p < 4) {
                throw new CorruptBatchException("truncated lz4 frame");
            }
            int magic = le32(b, p);
            if ((magic & SKIPPABLE_MASK) == SKIPPABLE) {
                if (end - p < 8 || (le32(b, p + 4) & 0xFFFFFFFFL) > end - p - 8L) {
                    throw new CorruptBatchException("truncated lz4 frame");
                }
                p += 8 + le32(b, p + 4);
                continue;
            }
            if (magic != MAGIC) {
                throw bad("unknown frame magic");
            }
            p = frame(b, p + 4, end, max, out);
        } while (p < end);
    }

    /** One frame from its descriptor at {@code p}; the position after it. */
    private static int frame(byte[] b, int p, int end, int max, GrowBuffer out)
            throws CorruptBatchException, FallbackException {
        if (end - p < 3) {
            throw new CorruptBatchException("truncated lz4 frame");
        }
        int flg = b[p] & 0xFF;
        int bd = b[p + 1] & 0xFF;
        boolean blockSum = (flg & 0x10) != 0;
        boolean hasSize = (flg & 0x08) != 0;
        boolean contentSum = (flg & 0x04) != 0;
        int descLen = 2 + (hasSize ? 8 : 0) + ((flg & 1) != 0 ? 4 : 0);
        if ((flg >> 6) != 1 || (flg & 0x02) != 0 || (bd & 0x8F) != 0 || ((bd >> 4) & 7) < 4) {
            throw bad("invalid frame descriptor");
        }
        if (end - p < descLen + 1) {
            throw new CorruptBatchException("truncated lz4 frame");
        }
        if (((XXH.hash(b, p, descLen, 0) >> 8) & 0xFF) != (b[p + descLen] & 0xFF)) {
            throw bad("frame header checksum mismatch");
        }
        if ((flg & 0x20) == 0 || (flg & 1) != 0) {
            throw new FallbackException("lz4 frame with dependent blocks or a dictionary");
        }
        long declared = hasSize ? (le32(b, p + 2) & 0xFFFFFFFFL) | (long) le32(b, p + 6) << 32
            : -1;
        int blockMax = 1 << (8 + 2 * ((bd >> 4) & 7));
        int start = out.len;
        p += descLen + 1;
        while (true) {
            if (end - p < 4) {
                throw new CorruptBatchException("truncated lz4 frame");
            }
            int word = le32(b, p);
            p += 4;
            if (word == 0) {
                break;
            }
            p = block(b, p, end, word, blockSum, blockMax, max, out);
        }
        if (contentSum) {
            if (end - p < 4) {
                throw new CorruptBatchException("truncated lz4 frame");
            }
            if (XXH.hash(out.buf, start, out.len - start, 0) != le32(b, p)) {
                throw bad("content checksum mismatch");
            }
            p += 4;
        }
        if (declared >= 0 && declared != out.len - start) {
            throw bad("frame content size mismatch");
        }
        return p;
    }

    /** One data block (its size word already read); the position after it. */
    private static int block(byte[] b, int p, int end, int word, boolean blockSum, int blockMax,
                             int max, GrowBuffer out) throws CorruptBatchException {
        boolean stored = word < 0;
        int size = word & 0x7FFFFFFF;
        if (size > blockMax) {
            throw bad("block larger than the frame's block size");
        }
        if (end - p < size + (blockSum ? 4 : 0)) {
            throw new CorruptBatchException("truncated lz4 frame");
        }
        if (blockSum && XXH.hash(b, p, size, 0) != le32(b, p + size)) {
            throw bad("block checksum mismatch");
        }
        int room = Math.min(blockMax, max + 1 - out.len);
        out.ensure(room, max + 1);
        if (stored) {
            if (size > room) {
                throw Codecs.tooBig(max);
            }
            System.arraycopy(b, p, out.buf, out.len, size);
            out.len += size;
        } else {
            out.len += LZ4.decompress(b, p, size, out.buf, out.len, room);
        }
        if (out.len > max) {
            throw Codecs.tooBig(max);
        }
        return p + size + (blockSum ? 4 : 0);
    }
}
