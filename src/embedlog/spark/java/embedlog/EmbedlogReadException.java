package embedlog;

import java.io.IOException;

/**
 * Any failure of the JVM reader core to read a partition. Subclasses tell the caller what to
 * do: {@link CorruptBatchException} (the stored bytes are invalid, as the Python reader's
 * CorruptBatchError), {@link OffsetOutOfRangeException} (a range outside the log) and
 * {@link FallbackException} (read this partition with the Python reader instead).
 * Messages name the file, byte position and offset where they are known.
 */
public class EmbedlogReadException extends IOException {
    private static final long serialVersionUID = 1L;

    public EmbedlogReadException(String message) {
        super(message);
    }

    public EmbedlogReadException(String message, Throwable cause) {
        super(message, cause);
    }
}
