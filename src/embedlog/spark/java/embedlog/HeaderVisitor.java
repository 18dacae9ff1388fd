package embedlog;

/** Receives the headers of one record: a key (never null, valid UTF-8: the decoder checked it)
 *  and a value (null when its length is -1), both as bytes of {@code buf}. */
public interface HeaderVisitor {
    /** The bytes are valid only during the call. */
    void header(byte[] buf, int keyOff, int keyLen, int valueOff, int valueLen);
}
