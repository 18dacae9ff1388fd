package embedlog;

/** Receives the headers of one record: a UTF-8 key (never null) and a value (null when -1). */
public interface HeaderVisitor {
    /** {@code valueLen} is -1 for a null value; the bytes are valid only during the call. */
    void header(String key, byte[] buf, int valueOff, int valueLen);
}
