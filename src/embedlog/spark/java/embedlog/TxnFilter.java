package embedlog;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * {@code read_committed} for one range {@code [start, end)} of a partition: which transactional
 * batches in it belong to aborted transactions, decided by the markers as embedlog's Python
 * reader decides them ({@code transactions.CommittedFilter} without an index, through
 * {@code arrow.isolation.committed_batches}).
 *
 * <p>{@link #decide} walks the batch headers from {@code start} (each batch's CRC-32C checked,
 * the order rules of {@link PartitionScan}) past {@code end} until every transaction with a
 * batch in the range has its marker: a transactional data batch of producer id {@code P >= 0}
 * opens {@code P}'s transaction at its base offset (if none is open), and {@code P}'s next
 * control batch ends it -- aborted when the marker's type is ABORT (0); any other type, and a
 * marker that compaction emptied, commit it. Batches from {@code end} on are read only for the
 * markers of transactions still open, and the walk stops as soon as none is. A transaction still
 * open when the log ends is {@link FallbackException}: the Python reader then says that the
 * range reaches past the last stable offset (or reads it, if a marker came meanwhile).
 *
 * <p>Invariant: {@link #aborted} answers for offsets in the range only; each producer's aborted
 * ranges are disjoint and in ascending order. Memory: two longs per aborted transaction met.
 * Compaction after the walk removes batches but never moves an offset, so the answers stay
 * right for the scan that follows. The data batches walked past {@code end} have their CRC
 * checked but their records are not decoded (the Python reader decodes them).
 */
final class TxnFilter {
    private static final int ABORT = 0;
    private final Map<Long, long[]> aborted = new HashMap<>();
    private final Map<Long, Integer> sizes = new HashMap<>();

    private TxnFilter() {
    }

    /** The aborted transactions of {@code [start, end)} of the partition folder {@code dir}
     *  ({@code dense}, {@code starts}: as {@link PartitionScan}'s). */
    static TxnFilter decide(Path dir, long start, long end, boolean dense,
                            Map<String, Long> starts) throws IOException {
        TxnFilter f = new TxnFilter();
        if (start >= end) {
            return f;  // an empty range: nothing to decide
        }
        Map<Long, Long> open = new HashMap<>();
        try (PartitionScan walk = new PartitionScan(dir, start, Long.MAX_VALUE, dense, starts,
                                                    true)) {
            BatchHeader h = walk.header();
            while (walk.nextChecked()) {
                if (h.lastOffset() < start) {
                    continue;
                }
                int type = h.isControl() ? walk.markerType() : -1;  // (checked as Python does)
                if (h.baseOffset >= end && open.isEmpty()) {
                    return f;
                }
                if (h.isControl()) {
                    Long first = h.producerId >= 0 ? open.remove(h.producerId) : null;
                    if (first != null && type == ABORT) {
                        f.add(h.producerId, first, h.baseOffset);
                    }
                } else if (h.baseOffset < end && h.isTransactional() && h.producerId >= 0) {
                    open.putIfAbsent(h.producerId, h.baseOffset);
                }
            }
        }
        if (!open.isEmpty()) {
            throw new FallbackException(dir + ": a transaction with records in [" + start + ", "
                + end + ") has no marker yet (the range reaches past the last stable offset)");
        }
        return f;
    }

    private void add(long pid, long first, long marker) {
        long[] r = aborted.getOrDefault(pid, new long[4]);
        int n = sizes.getOrDefault(pid, 0);
        if (n + 2 > r.length) {
            r = Arrays.copyOf(r, r.length * 2);
        }
        r[n] = first;
        r[n + 1] = marker;
        aborted.put(pid, r);
        sizes.put(pid, n + 2);
    }

    /** Whether no transaction of the range was aborted. */
    boolean none() {
        return aborted.isEmpty();
    }

    /** Whether the data batch in {@code h} belongs to an aborted transaction. */
    boolean aborted(BatchHeader h) {
        if (!h.isTransactional() || h.isControl() || h.producerId < 0) {
            return false;
        }
        long[] r = aborted.get(h.producerId);
        if (r == null) {
            return false;
        }
        int lo = 0;
        int hi = sizes.get(h.producerId) / 2 - 1;
        long at = h.baseOffset;
        while (lo <= hi) {  // the last range whose first offset is at or below the batch's
            int mid = (lo + hi) >>> 1;
            if (r[2 * mid] <= at) {
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        return hi >= 0 && at <= r[2 * hi + 1];
    }
}
