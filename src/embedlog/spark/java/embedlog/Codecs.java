package embedlog;

import com.github.luben.zstd.ZstdInputStream;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.CRC32;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;
import org.xerial.snappy.Snappy;

/**
 * Decompression of a batch's records section, as embedlog's codecs.py accepts it: gzip (one
 * or more complete RFC 1952 members, header flags, CRC-32 and size checked, nothing after the
 * last), snappy (xerial framing: magic {@code 82 'SNAPPY' 00}, two int32 versions, blocks of
 * int32 BE length + raw snappy block; or one unframed raw block), lz4 (frames, {@link Lz4Frames}),
 * zstd (frames, skippable frames; the frame and block headers are walked first so a truncated
 * frame is an error, {@link ZstdFrames}). Invariants: the output never exceeds {@code max} bytes (more is an error, and no
 * buffer larger than max + 1 is made from a size the stream declares); every failure,
 * including the codec libraries' own exceptions, is a {@link CorruptBatchException}.
 */
final class Codecs {
    static final int NONE = 0;
    static final int GZIP = 1;
    static final int SNAPPY = 2;
    static final int LZ4 = 3;
    static final int ZSTD = 4;
    private static final String[] NAMES = {"none", "gzip", "snappy", "lz4", "zstd"};
    private static final byte[] XERIAL_MAGIC = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
    private static final int XERIAL_HEADER = 16;

    private Codecs() {
    }

    static CorruptBatchException tooBig(int max) {
        return new CorruptBatchException("decompressed size exceeds the limit of " + max
            + " bytes");
    }

    /** Decompress {@code b[off..off+len)} with {@code codec} (1-4) into {@code out}. */
    static void decompress(int codec, byte[] b, int off, int len, int max, GrowBuffer out)
            throws CorruptBatchException, FallbackException {
        out.len = 0;
        try {
            switch (codec) {
                case GZIP -> gunzip(b, off, len, max, out);
                case SNAPPY -> unsnappy(b, off, len, max, out);
                case LZ4 -> Lz4Frames.decode(b, off, len, max, out);
                case ZSTD -> unzstd(b, off, len, max, out);
                default -> throw new UnsupportedFormatException(
                    "unknown compression codec id " + codec);
            }
        } catch (CorruptBatchException e) {
            throw e;
        } catch (OutOfMemoryError e) {
            throw new CorruptBatchException(NAMES[codec] + " stream needs too much memory");
        } catch (FallbackException e) {
            throw e;
        } catch (IOException | RuntimeException | DataFormatException e) {
            throw new CorruptBatchException("invalid " + NAMES[codec] + " data: " + e);
        }
        if (out.len > max) {
            throw tooBig(max);
        }
    }

    /**
     * zstd frames: one call of a reused decompression context into a buffer of the size the
     * frame headers declare (at most max; libzstd checks every frame against its declared
     * size), else (a size not declared, as Kafka's streaming writer leaves it) a stream
     * read bounded by max.
     */
    private static void unzstd(byte[] b, int off, int len, int max, GrowBuffer out)
            throws IOException, CorruptBatchException {
        long declared = ZstdFrames.check(b, off, len);
        if (declared > max) {
            throw tooBig(max);
        }
        if (declared < 0) {
            stream(new ZstdInputStream(new ByteArrayInputStream(b, off, len)), max, out);
            return;
        }
        out.ensure(declared, max + 1);
        int got = out.zstd().decompressByteArray(out.buf, 0, (int) declared, b, off, len);
        if (got != declared) {
            throw new CorruptBatchException("invalid zstd data: content size mismatch");
        }
        out.len = got;
    }

    private static void stream(InputStream in, int max, GrowBuffer out)
            throws IOException, CorruptBatchException {
        try (in) {
            out.readAll(in, max);
        }
    }

    // ------------------------------------------------------------------ gzip

    private static void gunzip(byte[] b, int off, int len, int max, GrowBuffer out)
            throws CorruptBatchException, DataFormatException {
        int end = off + len;
        int p = off;
        Inflater inf = new Inflater(true);
        CRC32 crc = new CRC32();
        try {
            do {
                p = gzipHeader(b, p, end);
                int memberStart = out.len;
                inf.reset();
                inf.setInput(b, p, end - p);
                while (!inf.finished()) {
                    if (out.len == out.buf.length) {
                        if (out.len > max) {
                            throw tooBig(max);
                        }
                        out.ensure(Math.min(Math.max(out.buf.length, 1 << 16), max + 1L - out.len),
                            max + 1);
                    }
                    int room = Math.min(out.buf.length, max + 1) - out.len;
                    int n = inf.inflate(out.buf, out.len, room);
                    out.len += n;
                    if (out.len > max) {
                        throw tooBig(max);
                    }
                    if (n == 0 && (inf.needsInput() || inf.needsDictionary())) {
                        throw new CorruptBatchException("truncated gzip stream");
                    }
                }
                p = end - inf.getRemaining();
                if (end - p < 8) {
                    throw new CorruptBatchException("truncated gzip stream");
                }
                crc.reset();
                crc.update(out.buf, memberStart, out.len - memberStart);
                long storedCrc = le32(b, p);
                long storedSize = le32(b, p + 4);
                if (storedCrc != crc.getValue()) {
                    throw new CorruptBatchException("invalid gzip data: incorrect data check");
                }
                if (storedSize != ((out.len - memberStart) & 0xFFFFFFFFL)) {
                    throw new CorruptBatchException("invalid gzip data: incorrect length check");
                }
                p += 8;
            } while (p < end);
        } finally {
            inf.end();
        }
    }

    private static long le32(byte[] b, int p) {
        return (b[p] & 0xFFL) | (b[p + 1] & 0xFFL) << 8 | (b[p + 2] & 0xFFL) << 16
            | (b[p + 3] & 0xFFL) << 24;
    }

    /** The position after the gzip member header at {@code p} (RFC 1952), checked. */
    private static int gzipHeader(byte[] b, int p, int end) throws CorruptBatchException {
        int start = p;
        if (end - p < 10) {
            throw new CorruptBatchException("truncated gzip stream");
        }
        if ((b[p] & 0xFF) != 0x1F || (b[p + 1] & 0xFF) != 0x8B) {
            throw new CorruptBatchException("invalid gzip data: incorrect header check");
        }
        if (b[p + 2] != 8) {
            throw new CorruptBatchException("invalid gzip data: unknown compression method");
        }
        int flg = b[p + 3] & 0xFF;
        if ((flg & 0xE0) != 0) {
            throw new CorruptBatchException("invalid gzip data: unknown header flags set");
        }
        p += 10;
        if ((flg & 4) != 0) {
            if (end - p < 2) {
                throw new CorruptBatchException("truncated gzip stream");
            }
            p += 2 + ((b[p] & 0xFF) | (b[p + 1] & 0xFF) << 8);
        }
        for (int bit = 8; bit <= 16; bit <<= 1) {
            if ((flg & bit) != 0) {
                while (p < end && b[p] != 0) {
                    p++;
                }
                p++;
            }
        }
        if ((flg & 2) != 0) {
            if (p + 2 > end) {
                throw new CorruptBatchException("truncated gzip stream");
            }
            CRC32 h = new CRC32();
            h.update(b, start, p - start);
            if ((h.getValue() & 0xFFFF) != ((b[p] & 0xFF) | (b[p + 1] & 0xFF) << 8)) {
                throw new CorruptBatchException("invalid gzip data: header crc mismatch");
            }
            p += 2;
        }
        if (p > end) {
            throw new CorruptBatchException("truncated gzip stream");
        }
        return p;
    }

    // ------------------------------------------------------------------ snappy

    private static void unsnappy(byte[] b, int off, int len, int max, GrowBuffer out)
            throws IOException, CorruptBatchException {
        if (!startsWith(b, off, len, XERIAL_MAGIC)) {
            snappyBlock(b, off, len, max, max, out);
            return;
        }
        if (len < XERIAL_HEADER) {
            throw new CorruptBatchException("truncated snappy (xerial) header");
        }
        int end = off + len;
        int p = off + XERIAL_HEADER;
        while (p < end) {
            if (end - p < 4) {
                throw new CorruptBatchException("truncated snappy (xerial) block length");
            }
            int n = BatchFormat.i32(b, p);
            p += 4;
            if (n < 0 || n > end - p) {
                throw new CorruptBatchException("snappy (xerial) block extends past the data");
            }
            snappyBlock(b, p, n, max - out.len, max, out);
            p += n;
        }
    }

    private static boolean startsWith(byte[] b, int off, int len, byte[] prefix) {
        if (len < prefix.length) {
            return false;
        }
        for (int i = 0; i < prefix.length; i++) {
            if (b[off + i] != prefix[i]) {
                return false;
            }
        }
        return true;
    }

    /** One raw snappy block appended to out; its declared length at most {@code budget}. */
    private static void snappyBlock(byte[] b, int off, int len, int budget, int max,
                                    GrowBuffer out) throws IOException, CorruptBatchException {
        long declared = -1;
        long n = 0;
        for (int i = 0; i < Math.min(5, len); i++) {
            int x = b[off + i] & 0xFF;
            n |= (long) (x & 0x7F) << (7 * i);
            if (x < 0x80) {
                declared = n;
                break;
            }
        }
        if (declared < 0) {
            throw new CorruptBatchException("invalid snappy block length");
        }
        if (declared > budget) {
            throw tooBig(max);
        }
        out.ensure(declared, max + 1);
        int got = Snappy.uncompress(b, off, len, out.buf, out.len);
        if (got != declared) {
            throw new CorruptBatchException("snappy block length mismatch");
        }
        out.len += got;
    }
}
