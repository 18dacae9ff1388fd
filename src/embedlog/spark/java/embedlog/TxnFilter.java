package embedlog;

import java.io.IOException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * {@code read_committed} for one range {@code [start, end)} of a partition: which transactional
 * batches in it belong to aborted transactions, decided by the markers as embedlog's Python
 * reader decides them ({@code transactions.CommittedFilter} without an index, through
 * {@code arrow.isolation.committed_batches}).
 *
 * <p>{@link #decide} walks the batch headers from {@code start} ({@link PartitionScan#readCommitted}
 * hands it a scan over the same listing and log start as the range's own scan) (each batch's CRC-32C checked,
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
    /** Producer id -> its aborted ranges, {@code [first, marker]} pairs in ascending order. */
    private final Map<Long, Ranges> aborted = new HashMap<>();

    private TxnFilter() {
    }

    /** The aborted transactions of {@code [start, end)}, read through {@code walk}: a scan of
     *  the partition from {@code start} to the end of the log (the caller closes it). */
    static TxnFilter decide(PartitionScan walk, long start, long end) throws IOException {
        TxnFilter f = new TxnFilter();
        if (start >= end) {
            return f;  // an empty range: nothing to decide
        }
        Map<Long, Long> open = new HashMap<>();
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
                    f.aborted.computeIfAbsent(h.producerId, k -> new Ranges())
                        .add(first, h.baseOffset);
                }
            } else if (h.baseOffset < end && h.isTransactional() && h.producerId >= 0) {
                open.putIfAbsent(h.producerId, h.baseOffset);
            }
        }
        if (!open.isEmpty()) {
            throw new FallbackException(walk.folder() + ": a transaction with records in ["
                + start + ", " + end + ") has no marker yet (the range reaches past the last "
                + "stable offset)");
        }
        return f;
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
        Ranges r = aborted.get(h.producerId);
        return r != null && r.covers(h.baseOffset);
    }

    /** One producer's aborted ranges: {@code [first, marker]} pairs, ascending, disjoint. */
    private static final class Ranges {
        private long[] pairs = new long[4];
        private int size;

        void add(long first, long marker) {
            if (size + 2 > pairs.length) {
                pairs = Arrays.copyOf(pairs, pairs.length * 2);
            }
            pairs[size++] = first;
            pairs[size++] = marker;
        }

        /** Whether an offset lies in one of the ranges: the last whose first is at or below it. */
        boolean covers(long at) {
            int lo = 0;
            int hi = size / 2 - 1;
            while (lo <= hi) {
                int mid = (lo + hi) >>> 1;
                if (pairs[2 * mid] <= at) {
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            return hi >= 0 && at <= pairs[2 * hi + 1];
        }
    }
}
