package embedlog;

/**
 * A record batch fails validation (length, magic, CRC-32C, codec, varints, record layout,
 * offset order): what embedlog's Python reader raises as CorruptBatchError. {@link #reason()}
 * is the bare cause; the message adds the file and position once {@link #located} named them.
 */
public class CorruptBatchException extends EmbedlogReadException {
    private static final long serialVersionUID = 1L;
    private final String reason;

    public CorruptBatchException(String reason) {
        super(reason);
        this.reason = reason;
    }

    protected CorruptBatchException(String reason, String path, long position) {
        super(reason + " (" + path + ", position " + position + ")");
        this.reason = reason;
    }

    /** The violation alone, without the file and position. */
    public String reason() {
        return reason;
    }

    /** The same error, naming the file and the batch's byte position in it. */
    public CorruptBatchException located(String path, long position) {
        CorruptBatchException e = new CorruptBatchException(reason, path, position);
        e.initCause(this);
        return e;
    }
}
