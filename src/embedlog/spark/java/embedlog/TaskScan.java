package embedlog;

import java.io.Closeable;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Map;

/**
 * The JVM's read of one planned task ({@link TaskSpec}): its ranges in order, each through a
 * {@link PartitionScan}, into {@link Columns} -- a batch never holds rows of two ranges.
 *
 * <p>The planned ranges are checked against the log as {@code embedlog.spark.scan._check} checks
 * them: a range starting below the log start offset, or reaching past the partition's end
 * (retention, {@code delete_records} or a truncation after planning) is an
 * {@link OffsetOutOfRangeException} naming {@code failOnDataLoss}; with
 * {@code failOnDataLoss=false} what is left of it is read. A {@code read_committed} task's ranges
 * leave out the aborted transactions ({@link TxnFilter}, decided before each range's scan).
 *
 * <p>{@link #open} declines (answers {@code null}) a task the Python reader must read: a folder
 * that is not a plain directory or that is tiered ({@code embedlog.tiering}: old segments may be
 * remote). A {@link FallbackException} met while reading says the same about the rest of the
 * task; {@link #position} tells the caller where the JVM stopped.
 */
final class TaskScan implements Closeable {
    /** The tiered log's root file (naming.TIERING_FILE): its older segments may be remote. */
    static final String TIERING_FILE = "embedlog.tiering";
    /** A partition with no batch left at all: its folder went with its topic (spark/scan.py
     *  says the same, _GONE, when the topic is unknown), or it was emptied. */
    static final String GONE = "the partition holds no batch any more (its topic was deleted "
        + "after planning?)";

    private final TaskSpec spec;
    private final Path logDir;
    private int next;
    private TaskSpec.Range range;
    private PartitionScan scan;
    private Map<String, Long> starts;
    private int emittedRange = -1;
    private long emittedOffset = -1;

    private TaskScan(TaskSpec spec, Path logDir) {
        this.spec = spec;
        this.logDir = logDir;
    }

    static TaskScan open(TaskSpec spec) {
        if (spec == null) {
            return null;
        }
        if (spec.ranges().length == 0) {
            return new TaskScan(spec, null);
        }
        Path dir = Paths.get(spec.path());  // the caller's path: a link to a folder is fine
        if (!Files.isDirectory(dir)
                || Files.exists(dir.resolve(TIERING_FILE), LinkOption.NOFOLLOW_LINKS)) {
            return null;
        }
        return new TaskScan(spec, dir);
    }

    /** The index of the range and the offset of the last row handed to {@link Columns} (-1, -1
     *  before the first). */
    int emittedRange() {
        return emittedRange;
    }

    long emittedOffset() {
        return emittedOffset;
    }

    /** The task's ranges, in order. */
    TaskSpec.Range[] ranges() {
        return spec.ranges();
    }

    /** Fills {@code columns} with the next rows (at most its capacity, one range's); false
     *  when the task is done. */
    boolean fill(Columns columns) throws IOException {
        Sink sink = new Sink(columns);
        while (true) {
            if (scan == null && !nextRange()) {
                return false;
            }
            sink.range = range;
            while (!columns.full() || sink.rows == 0) {
                if (!scan.nextBatch(sink)) {
                    finishRange();
                    break;
                }
                if (sink.rows > 0 && columns.full()) {
                    break;
                }
            }
            if (sink.rows > 0) {
                emittedRange = next - 1;
                emittedOffset = sink.lastOffset;
                return true;
            }
        }
    }

    /** The number of records of the task (batch headers; see {@link PartitionScan}). */
    long count() throws IOException {
        long n = 0;
        while (scan != null || nextRange()) {
            n += scan.countRecords();
            finishRange();
        }
        return n;
    }

    /** The scan of the next non-empty range, its start checked against the log start. */
    private boolean nextRange() throws IOException {
        while (next < spec.ranges().length) {
            range = spec.ranges()[next++];
            if (range.start() >= range.end()) {
                continue;
            }
            if (starts == null) {  // the log dir's checkpoint, read once for every range
                starts = PartitionFolder.persistedStarts(logDir);
            }
            Path dir = PartitionScan.partitionDir(logDir, range.topic(), range.partition());
            boolean dense = Arrays.asList(spec.dense()).contains(range.topic());
            scan = new PartitionScan(dir, range.start(), range.end(), dense, starts, true);
            if (scan.logStartOffset() > range.start()) {  // (the scan starts there)
                lost(scan.logStartOffset(), Long.MAX_VALUE);  // the reader's close closes it
            }
            if (spec.readCommitted()) {
                scan.readCommitted();
            }
            return true;
        }
        return false;
    }

    /** The range's scan is done: its partition must reach the planned end. */
    private void finishRange() throws IOException {
        long reached = scan.reachedOffset();
        scan.close();
        scan = null;
        if (reached < range.end()) {
            lost(Long.MIN_VALUE, reached);
        }
    }

    /** A planned range no longer all in the log (now from {@code logStart}, or up to
     *  {@code logEnd}): an error, unless failOnDataLoss=false (what is left is read). */
    private void lost(long logStart, long logEnd) throws OffsetOutOfRangeException {
        if (spec.failOnDataLoss()) {
            String now = logStart != Long.MIN_VALUE
                ? "are no longer all in the log, which now starts at " + logStart
                : logEnd >= 0 ? "are no longer all in the log, which now ends at " + logEnd
                : "are no longer in the log: " + GONE;
            throw new OffsetOutOfRangeException(range.topic() + "-" + range.partition()
                + ": offsets [" + range.start() + ", " + range.end() + ") planned for this task "
                + now + " (retention, truncation or a deletion ran after planning). Set "
                + "failOnDataLoss=false to read what is left instead");
        }
    }

    @Override
    public void close() throws IOException {
        if (scan != null) {
            scan.close();
            scan = null;
        }
    }

    /** Records of one range into the columns (timestamps to microseconds, headers if read). */
    private static final class Sink implements RecordSink, HeaderVisitor {
        private final Columns columns;
        TaskSpec.Range range;
        int rows;
        long lastOffset;

        Sink(Columns columns) {
            this.columns = columns;
        }

        @Override
        public void record(long offset, long timestampMs, boolean logAppendTime, byte[] buf,
                           int keyOff, int keyLen, int valueOff, int valueLen, int headerCount,
                           int headersOff) {
            columns.record(range.topic(), range.partition(), offset,
                           Math.multiplyExact(timestampMs, 1000L), logAppendTime ? 1 : 0, buf,
                           keyOff, keyLen, valueOff, valueLen);
            if (headerCount > 0 && columns.wantsHeaders()) {
                RecordColumns.headers(buf, headersOff, headerCount, this);
            }
            rows++;
            lastOffset = offset;
        }

        @Override
        public void header(byte[] buf, int keyOff, int keyLen, int valueOff, int valueLen) {
            columns.header(buf, keyOff, keyLen, buf, valueOff, valueLen);
        }
    }
}
