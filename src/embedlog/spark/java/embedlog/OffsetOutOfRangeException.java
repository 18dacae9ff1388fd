package embedlog;

/** A read range starting below the partition's log start offset (or otherwise invalid). */
public class OffsetOutOfRangeException extends EmbedlogReadException {
    private static final long serialVersionUID = 1L;

    public OffsetOutOfRangeException(String message) {
        super(message);
    }
}
