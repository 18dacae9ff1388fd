package embedlog;

/**
 * The 61-byte header of a v2 (magic 2) record batch, big endian, as parsed by
 * {@link BatchFormat#parseHeader}: baseOffset i64 @0, batchLength i32 @8,
 * partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC-32C of bytes [21, end)),
 * attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27, maxTimestamp i64 @35,
 * producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53, recordCount i32 @57.
 * Mutable so that a scan reuses one instance; after a successful parse
 * {@code batchLength >= 49}, {@code recordCount >= 0}, {@code lastOffsetDelta >= 0}.
 */
public final class BatchHeader {
    public long baseOffset;
    public int batchLength;
    public int leaderEpoch;
    public byte magic;
    public long crc;
    public short attributes;
    public int lastOffsetDelta;
    public long baseTimestamp;
    public long maxTimestamp;
    public long producerId;
    public short producerEpoch;
    public int baseSequence;
    public int recordCount;

    /** Total bytes of the batch: batchLength + 12. */
    public long size() {
        return (long) batchLength + BatchFormat.LOG_OVERHEAD;
    }

    public long lastOffset() {
        return baseOffset + lastOffsetDelta;
    }

    public long nextOffset() {
        return baseOffset + lastOffsetDelta + 1;
    }

    public int codec() {
        return attributes & BatchFormat.COMPRESSION_MASK;
    }

    public boolean logAppendTime() {
        return (attributes & BatchFormat.TIMESTAMP_TYPE_MASK) != 0;
    }

    public boolean isTransactional() {
        return (attributes & BatchFormat.TRANSACTIONAL_MASK) != 0;
    }

    public boolean isControl() {
        return (attributes & BatchFormat.CONTROL_MASK) != 0;
    }
}
