package embedlog;

/**
 * Receives the data records of a scan, one call per record, in offset order. The arguments
 * point into {@code buf}, a buffer the scan reuses: it is valid only during the call, so the
 * sink copies what it keeps. No object is allocated per record.
 *
 * <p>{@code keyLen}/{@code valueLen} are -1 for a null key/value. {@code headersOff} is the
 * position in {@code buf} of the record's first header (validated: key length, UTF-8 key,
 * value length); walk them with
 * {@link RecordColumns#headers(byte[], int, int, HeaderVisitor)}.
 */
public interface RecordSink {
    void record(long offset, long timestampMs, boolean logAppendTime, byte[] buf, int keyOff,
                int keyLen, int valueOff, int valueLen, int headerCount, int headersOff);
}
