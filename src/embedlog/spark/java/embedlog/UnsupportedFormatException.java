package embedlog;

/**
 * A batch in a format the reader does not read (message format v0/v1, codec ids 5-7): as
 * embedlog's UnsupportedFormatError, a kind of corrupt batch (no reader of embedlog reads it).
 */
public class UnsupportedFormatException extends CorruptBatchException {
    private static final long serialVersionUID = 1L;

    public UnsupportedFormatException(String reason) {
        super(reason);
    }

    private UnsupportedFormatException(String reason, String path, long position) {
        super(reason, path, position);
    }

    @Override
    public CorruptBatchException located(String path, long position) {
        UnsupportedFormatException e = new UnsupportedFormatException(reason(), path, position);
        e.initCause(this);
        return e;
    }
}
