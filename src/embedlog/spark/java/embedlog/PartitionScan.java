package embedlog;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * Reads the data records with offsets in [start, end) of one partition folder, read only.
 *
 * <p>Invariants: the folder is listed once, at construction (exact {@code <20 digits>.log}
 * names; a folder with a compaction swap in progress is refused with
 * {@link FallbackException}). The segments read are the last one whose base offset is at most
 * {@code start} and the following ones whose base is below {@code end}. The first one is
 * entered at the position its {@code .index} gives for {@code start} (an entry that does not
 * fall inside the batch found there, or damage in that batch, and the segment is walked from
 * position 0 instead). Every batch read has its length, header and CRC-32C checked and its
 * offsets checked against embedlog's order rules (rules.check_order: base offsets at or above
 * the segment's base and the previous batch's next offset, lastOffset within a 32-bit delta of
 * the segment's base, below the next segment's base); a batch overlapping the range is
 * decoded whole ({@link BatchFormat#decodeBatch}) and only its records in range handed on.
 * The scan stops at the first batch whose base offset is at or above {@code end} (and not
 * below the previous batch's end) before reading its body: the active segment may be being
 * appended to past {@code end}. An incomplete batch at the end of the last segment ends the
 * scan quietly (an append in progress); anywhere else bytes that do not form a whole batch are
 * corrupt. A sealed segment (any but the last listed) whose size is not the one the folder's
 * {@code embedlog.segments} recorded is left to the Python reader ({@link FallbackException}),
 * whose verdict tells damage from a writer's swap. Control batches and batches of no record are
 * skipped undecoded. Records below the log start offset are never
 * returned: a start below it is an {@link OffsetOutOfRangeException}.
 *
 * <p>Not thread safe; one scan per thread.
 */
public final class PartitionScan implements Closeable {
    /** The largest batch read; a larger one is left to the Python reader (FallbackException). */
    public static final long MAX_BATCH_BYTES = 64L * 1024 * 1024;
    private static final int CHUNK = 1 << 18;
    private static final long NO_FLOOR = Long.MIN_VALUE;
    private static final long INT32_MAX = Integer.MAX_VALUE;

    private final Path dir;
    private final long start;
    private final long end;
    private final long[] bases;
    private Map<Long, Long> sealed; // embedlog.segments, read when a sealed segment is entered
    private final long logStart;
    private boolean denseTail;
    private final BatchHeader h = new BatchHeader();
    private final RecordColumns cols = new RecordColumns();
    private final CRC32C crc = new CRC32C();
    private int seg = -1;
    private FileChannel ch;
    private Path logPath;
    private long fileSize;
    private long position;
    private long floor;
    private long indexOffset = -1;
    private long reached = -1;
    private boolean done;
    private TxnFilter filter;
    private byte[] win = new byte[CHUNK];
    private long winPos;
    private int winLen;

    /** A scan of [start, end) of the partition folder {@code dir} ({@code <topic>-<n>}). */
    public PartitionScan(Path dir, long start, long end) throws IOException {
        this(dir, start, end, false);
    }

    /**
     * A scan whose last segment, when {@code denseTail} (a topic embedlog created: its active
     * segment has no offset gap, rules.Bounds.dense), must have each batch start exactly where
     * the previous one ended, as the Python views check it: a gap there is damage, unless the
     * folder lists a later segment by then (the writer rolled: it is sealed, and compaction may
     * have rewritten it with gaps).
     */
    public PartitionScan(Path dir, long start, long end, boolean denseTail) throws IOException {
        this(dir, start, end, denseTail, null, false);
    }

    /**
     * The scan above, for a caller reading many partitions of one log dir: {@code starts} is its
     * log start checkpoint read once ({@link PartitionFolder#persistedStarts}; null: read it
     * here), and with {@code clampStart} a start below the log start reads from the log start
     * ({@link #logStartOffset} tells the caller) instead of raising
     * {@link OffsetOutOfRangeException}.
     */
    public PartitionScan(Path dir, long start, long end, boolean denseTail,
                         Map<String, Long> starts, boolean clampStart) throws IOException {
        this.dir = dir;
        this.denseTail = denseTail;
        this.end = end;
        String name = dir.getFileName().toString();
        int dash = name.lastIndexOf('-');
        if (dash <= 0) {
            throw new FallbackException("not a partition folder: " + dir);
        }
        String topic = name.substring(0, dash);
        int partition;
        try {
            partition = Integer.parseInt(name.substring(dash + 1));
        } catch (NumberFormatException e) {
            throw new FallbackException("not a partition folder: " + dir, e);
        }
        this.bases = PartitionFolder.segmentBases(dir);
        Path parent = dir.toAbsolutePath().getParent();
        Map<String, Long> table = starts != null || parent == null ? starts
            : PartitionFolder.persistedStarts(parent);
        long persisted = table == null ? 0
            : table.getOrDefault(PartitionFolder.startKey(topic, partition), 0L);
        this.logStart = bases.length == 0 ? persisted : Math.max(persisted, bases[0]);
        if (start > end || start < 0) {
            throw new OffsetOutOfRangeException("invalid range [" + start + ", " + end + ") of "
                + dir);
        }
        if (start < logStart && start < end) {
            if (!clampStart) {
                throw new OffsetOutOfRangeException("offset " + start + " is below the log start "
                    + "offset " + logStart + " of " + dir);
            }
            start = Math.min(logStart, end);
        }
        this.start = start;
        done = start >= end || bases.length == 0;
    }

    /**
     * {@code <logDir>/<topic>-<partition>} for a topic name from untrusted input, checked as
     * Kafka's legal names (1-249 of [a-zA-Z0-9._-], not "." or "..") and a partition &gt;= 0.
     */
    public static Path partitionDir(Path logDir, String topic, int partition) {
        PartitionFolder.validateTopic(topic);
        if (partition < 0) {
            throw new IllegalArgumentException("partition must be non-negative: " + partition);
        }
        return logDir.resolve(topic + "-" + partition);
    }

    /**
     * The partition's log start offset as embedlog's read-only views compute it: the first
     * segment's base offset raised to the partition's {@code log-start-offset-checkpoint} entry
     * (not lowered to the log end: a start above the data reads nothing).
     */
    public long logStartOffset() {
        return logStart;
    }

    /**
     * The next offset after the last batch checked so far (control batches included), -1 before
     * any: once the scan is done, a value below {@code end} means the partition ends before the
     * range does (its log end offset is that value), as when it was truncated after planning.
     */
    public long reachedOffset() {
        return reached;
    }

    /**
     * Hand the in-range records of the next data batch holding any to {@code sink}; false when
     * the range is done (nothing was handed on).
     */
    public boolean nextBatch(RecordSink sink) throws IOException {
        while (!done) {
            if (!nextHeader()) {
                continue;
            }
            if (skipped()) {
                continue;
            }
            if (decodeAt() && emit(sink) > 0) {
                return true;
            }
        }
        return false;
    }

    /**
     * The number of data records in [start, end): recordCount of the batches wholly inside it
     * (their CRC checked), the records of the (at most two) batches cut by start or end
     * decoded and counted. Consumes the scan.
     */
    public long countRecords() throws IOException {
        long n = 0;
        while (!done) {
            if (!nextHeader() || skipped()) {
                continue;
            }
            if (h.baseOffset >= start && h.lastOffset() < end) {
                n += h.recordCount;
            } else if (decodeAt()) {
                for (int i = 0; i < cols.count; i++) {
                    long o = cols.offsets[i];
                    n += o >= start && o < end ? 1 : 0;
                }
            }
        }
        return n;
    }

    /** Batches never decoded (as reader.scan): before the range, control, no records; with a
     *  {@link #filter}, those of aborted transactions. */
    private boolean skipped() {
        return h.isControl() || h.lastOffset() < start || h.recordCount == 0
            || (filter != null && filter.aborted(h));
    }

    /** {@code read_committed}: leave out the batches of aborted transactions, decided by a
     *  {@link TxnFilter} walk over this scan's listing and log start (call it before the first
     *  batch is read). */
    public void readCommitted() throws IOException {
        TxnFilter f;
        try (PartitionScan walk = new PartitionScan(this)) {
            f = TxnFilter.decide(walk, start, end);
        }
        filter = f.none() ? null : f;
    }

    /** A walk of {@code of}'s partition from its start to the end of the log: the same folder
     *  listing, manifest, log start and dense rule, nothing listed or read again. */
    private PartitionScan(PartitionScan of) {
        this.dir = of.dir;
        this.denseTail = of.denseTail;
        this.end = Long.MAX_VALUE;
        this.bases = of.bases;
        this.sealed = of.sealed;
        this.logStart = of.logStart;
        this.start = of.start;
        done = bases.length == 0;
    }

    /** The partition folder read. */
    Path folder() {
        return dir;
    }

    /**
     * Walk to the next batch, control batches included; false when the range is done. The
     * batch's header is then in {@link #header()} (checked as {@link #nextBatch} checks it),
     * its records not decoded.
     */
    boolean nextChecked() throws IOException {
        while (!done) {
            if (nextHeader()) {
                return true;
            }
        }
        return false;
    }

    /** The header {@link #nextChecked} fills (one instance, reused). */
    BatchHeader header() {
        return h;
    }

    /**
     * The marker type of the control batch {@link #nextChecked} just read (0 ABORT, 1 COMMIT,
     * others unknown), -1 when it holds no record (emptied by compaction). Its first record's
     * key must be at least 4 bytes of {@code version i16, type i16} with a version &gt;= 0
     * (transactions.control_type), else {@link CorruptBatchException}.
     */
    int markerType() throws IOException {
        if (h.recordCount == 0) {
            return -1;
        }
        decodeAt();
        if (cols.count == 0) {
            return -1;
        }
        int at = cols.keyOff[0];
        String what = null;
        if (cols.keyLen[0] < 4) {
            what = "control record key shorter than 4 bytes";
        } else if (BatchFormat.i16(cols.data, at) < 0) {
            what = "negative control record version " + BatchFormat.i16(cols.data, at);
        }
        if (what != null) {
            throw new CorruptBatchException(what).located(
                logPath.toString() + ", offset " + h.baseOffset, position - h.size());
        }
        return BatchFormat.i16(cols.data, at + 2);
    }

    @Override
    public void close() throws IOException {
        done = true;
        cols.close();
        closeSegment();
    }

    /** The records the current batch holds in range, handed to the sink. */
    private int emit(RecordSink sink) {
        boolean lat = h.logAppendTime();
        int n = 0;
        for (int i = 0; i < cols.count; i++) {
            long o = cols.offsets[i];
            if (o < start || o >= end) {
                continue;
            }
            sink.record(o, cols.timestamps[i], lat, cols.data, cols.keyOff[i], cols.keyLen[i],
                cols.valueOff[i], cols.valueLen[i], cols.headerCount[i], cols.headersOff[i]);
            n++;
        }
        return n;
    }

    /** The columns of the batch just read (position already past it); false = none. */
    private boolean decodeAt() throws IOException {
        long at = position - h.size();
        try {
            BatchFormat.decodeBatch(win, (int) (at - winPos), h, cols);
        } catch (CorruptBatchException e) {
            throw e.located(logPath.toString() + ", offset " + h.baseOffset, at);
        }
        return true;
    }

    /** Walks to the next batch: true with {@link #h} set, false when a segment or all ended. */
    private boolean nextHeader() throws IOException {
        if (ch == null && !openNextSegment()) {
            done = true;
            return false;
        }
        long remain = fileSize - position;
        if (remain <= BatchFormat.MAGIC_OFFSET + 1) {
            return tailEnd(remain);
        }
        ensure(position, (int) Math.min(remain, BatchFormat.HEADER_SIZE));
        int p = (int) (position - winPos);
        int batchLength = BatchFormat.i32(win, p + 8);
        long size = batchLength + (long) BatchFormat.LOG_OVERHEAD;
        boolean indexed = indexOffset >= 0;
        if (indexed && (batchLength < BatchFormat.LEGACY_MIN_LENGTH || size > remain
                || size > MAX_BATCH_BYTES)) {
            return restartSegment(); // the index led to no whole batch: walk the segment
        }
        if (batchLength < BatchFormat.LEGACY_MIN_LENGTH) {
            throw corrupt("invalid batch length " + batchLength);
        }
        if (size > MAX_BATCH_BYTES && size > remain) {
            throw corrupt("batch size " + size + " exceeds the maximum of " + MAX_BATCH_BYTES);
        }
        if (size > MAX_BATCH_BYTES) { // the topic's max.message.bytes may allow it
            throw new FallbackException("batch of " + size + " bytes in " + logPath + " at "
                + position + ": larger than the JVM reader reads");
        }
        if (size > remain) {
            return tailEnd(remain);
        }
        if (!checkedBatch((int) size)) {
            return false;
        }
        return h.baseOffset < end || stop(); // the first batch past the range: checked only
    }

    private boolean stop() throws IOException {
        done = true;
        closeSegment();
        return false;
    }

    /** Read and check the whole batch at {@link #position} of {@code size} bytes. */
    private boolean checkedBatch(int size) throws IOException {
        ensure(position, size);
        int p = (int) (position - winPos);
        try {
            BatchFormat.parseHeader(win, p, size, h);
            if (h.lastOffset() >= start) { // a batch walked over to the range: header only
                BatchFormat.verifyCrc(win, p, h, crc);
            }
            checkOrder();
        } catch (CorruptBatchException e) {
            if (indexOffset >= 0) {
                return restartSegment(); // the index led into damage: walk the segment
            }
            throw e.located(logPath.toString(), position);
        }
        if (indexOffset >= 0) {
            if (indexOffset < h.baseOffset || indexOffset > h.lastOffset()) {
                return restartSegment(); // the entry does not belong to this batch
            }
            indexOffset = -1;
        }
        floor = h.nextOffset();
        reached = Math.max(reached, floor);
        position += size;
        return true;
    }

    /** rules.check_order for the batch in {@link #h} at {@link #position}. */
    private void checkOrder() throws IOException {
        long segBase = bases[seg];
        if (denseTail && seg == bases.length - 1 && floor != NO_FLOOR && h.baseOffset != floor) {
            checkDense();
        }
        long low = floor == NO_FLOOR ? segBase : floor;
        long last = h.lastOffset();
        if (h.baseOffset < low || last < h.baseOffset) {
            throw new CorruptBatchException("batch offsets " + h.baseOffset + ".." + last
                + " are out of order (expected >= " + low + ")");
        }
        if (last - segBase > INT32_MAX) {
            throw new CorruptBatchException("batch offsets " + h.baseOffset + ".." + last
                + " do not fit a 32-bit delta from the segment's base offset " + segBase);
        }
        if (seg + 1 < bases.length && last >= bases[seg + 1]) {
            String what = "batch offsets " + h.baseOffset + ".." + last
                + " reach into the next segment (base " + bases[seg + 1] + ")";
            if (!java.util.Arrays.equals(bases, PartitionFolder.segmentBases(dir))) {
                throw new FallbackException(what + " (" + logPath + ", position " + position
                    + ") while the folder changed: a compaction swap half way");
            }
            throw new CorruptBatchException(what); // the same listing again: damage
        }
    }

    /** A gap in the last segment of a dense tail: damage while no later segment is listed. */
    private void checkDense() throws IOException {
        long[] now = PartitionFolder.segmentBases(dir);
        if (now.length > 0 && now[now.length - 1] > bases[seg]) {
            denseTail = false; // rolled since the listing: a sealed segment may have gaps
            return;
        }
        throw new CorruptBatchException("batch offsets " + h.baseOffset + ".." + h.lastOffset()
            + " do not follow the previous batch (expected base offset " + floor
            + "): embedlog writes this segment without gaps");
    }

    private boolean restartSegment() {
        indexOffset = -1;
        position = 0;
        floor = bases[seg];
        return false;
    }

    /** {@code remain} bytes left that hold no whole batch: the end of the segment. */
    private boolean tailEnd(long remain) throws IOException {
        if (remain > 0 && seg + 1 < bases.length) {
            throw corrupt(remain + " bytes at the end do not form a whole batch");
        }
        closeSegment();
        if (seg + 1 >= bases.length) {
            done = true;
        }
        return false;
    }

    private CorruptBatchException corrupt(String reason) {
        return new CorruptBatchException(reason).located(logPath.toString(), position);
    }

    /** Open the next segment holding part of the range; false when there is none. */
    private boolean openNextSegment() throws IOException {
        if (seg < 0) {
            seg = 0;
            while (seg + 1 < bases.length && bases[seg + 1] <= start) {
                seg++;
            }
        } else {
            seg++;
            if (seg >= bases.length || bases[seg] >= end) {
                return false;
            }
        }
        long base = bases[seg];
        logPath = PartitionFolder.segmentPath(dir, base, ".log");
        ch = PartitionFolder.openRegular(logPath);
        fileSize = ch.size();
        if (seg < bases.length - 1 && sealed == null) {
            sealed = PartitionFolder.sealedSizes(dir); // a read of the active segment needs none
        }
        Long recorded = seg < bases.length - 1 ? sealed.get(base) : null;
        if (recorded != null && recorded.longValue() != fileSize) {
            // A cut at a batch boundary would read as a gap; or the writer is swapping it in
            // now. The Python reader tells them apart (embedlog.manifest.view_damage).
            throw new FallbackException("sealed segment " + logPath + " is " + fileSize
                + " bytes, the manifest recorded " + recorded);
        }
        winLen = 0;
        position = 0;
        floor = base;
        indexOffset = -1;
        if (start > base) {
            long[] entry = PartitionFolder.indexFloor(dir, base, start, fileSize);
            if (entry != null && entry[1] > 0) {
                position = entry[1];
                indexOffset = entry[0];
                floor = NO_FLOOR;
            }
        }
        return true;
    }

    private void closeSegment() throws IOException {
        if (ch != null) {
            ch.close();
            ch = null;
        }
    }

    /** The window holds file bytes [pos, pos + need) (need within the file). */
    private void ensure(long pos, int need) throws IOException {
        if (pos >= winPos && pos + need <= winPos + winLen) {
            return;
        }
        int want = (int) Math.min(Math.max(need, CHUNK), fileSize - pos);
        if (win.length < want) {
            win = new byte[Math.max(want, win.length * 2)];
        }
        ByteBuffer bb = ByteBuffer.wrap(win, 0, want);
        while (bb.hasRemaining()) {
            if (ch.read(bb, pos + bb.position()) < 0) {
                break;
            }
        }
        winPos = pos;
        winLen = bb.position();
        if (winLen < need) {
            throw corrupt("segment file shrank while being read");
        }
    }
}
