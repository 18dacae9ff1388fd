package embedlog;

import java.io.IOException;
import java.io.InputStream;

import com.github.luben.zstd.ZstdDecompressCtx;

/**
 * A reusable byte buffer: {@code buf[0..len)} holds the data. It never grows past the bound
 * its caller gives (plus one byte, to tell "exactly the bound" from "more").
 */
final class GrowBuffer implements AutoCloseable {
    byte[] buf;
    int len;
    private ZstdDecompressCtx zstd;

    GrowBuffer(int initial) {
        buf = new byte[initial];
    }

    /** A zstd decompression context kept with the buffer (made on first use). */
    ZstdDecompressCtx zstd() {
        if (zstd == null) {
            zstd = new ZstdDecompressCtx();
        }
        return zstd;
    }

    /** Frees the zstd context's native memory. */
    @Override
    public void close() {
        if (zstd != null) {
            zstd.close();
            zstd = null;
        }
    }

    /** Room for {@code extra} more bytes after {@code len}, the array at most {@code cap}. */
    void ensure(long extra, int cap) {
        long need = len + extra;
        if (need <= buf.length) {
            return;
        }
        long size = Math.max(need, Math.min((long) buf.length * 2, cap));
        byte[] bigger = new byte[(int) Math.min(size, Integer.MAX_VALUE - 16)];
        System.arraycopy(buf, 0, bigger, 0, len);
        buf = bigger;
    }

    /**
     * Append everything {@code in} yields; {@link CorruptBatchException} once it yields more
     * than {@code max} bytes in all (never holding more than max + 1).
     */
    void readAll(InputStream in, int max) throws IOException, CorruptBatchException {
        int cap = max + 1;
        while (true) {
            if (len == buf.length) {
                if (len >= cap) {
                    throw Codecs.tooBig(max);
                }
                ensure(Math.min(Math.max(buf.length, 1 << 16), cap - len), cap);
            }
            int n = in.read(buf, len, Math.min(buf.length, cap) - len);
            if (n < 0) {
                return;
            }
            len += n;
            if (len > max) {
                throw Codecs.tooBig(max);
            }
        }
    }
}
