package embedlog;

/**
 * The partition cannot be read by the JVM core right now, but the Python reader can: a
 * compaction swap in progress ({@code .swap} files), a checkpoint it does not parse, anything
 * unsupported. The caller reads the partition with the Python reader instead.
 */
public class FallbackException extends EmbedlogReadException {
    private static final long serialVersionUID = 1L;

    public FallbackException(String message) {
        super(message);
    }

    public FallbackException(String message, Throwable cause) {
        super(message, cause);
    }
}
