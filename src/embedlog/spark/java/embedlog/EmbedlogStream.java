package embedlog;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.AcceptsLatestSeenOffset;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * A micro-batch stream whose tasks the JVM reads: the Python source's stream keeps everything
 * else -- offsets, admission control ({@code maxOffsetsPerTrigger} and the other limits),
 * {@code availableNow}, the planning of each trigger, commits -- and each task it plans is
 * decoded and read as a batch task is ({@link EmbedlogBatch}, {@link TaskReaders}).
 *
 * <p>Spark asks a stream what it can do by its interfaces, and pyspark's stream is one of three
 * classes by what the Python reader has: {@link AcceptsLatestSeenOffset} only, or
 * {@link SupportsAdmissionControl}, or that and {@link SupportsTriggerAvailableNow}.
 * {@link #of} wraps each in the class of this file with the same interfaces, every method
 * answered by the wrapped stream, so Spark drives the stream exactly as it would drive the
 * Python source's own.
 */
class EmbedlogStream implements MicroBatchStream {
    final MicroBatchStream python;
    private final ReadShape shape;

    EmbedlogStream(MicroBatchStream python, ReadShape shape) {
        this.python = python;
        this.shape = shape;
    }

    /** {@code python} wrapped in the class with its interfaces (see the class comment). */
    static MicroBatchStream of(MicroBatchStream python, ReadShape shape) {
        if (python instanceof SupportsTriggerAvailableNow) {
            return new AvailableNow(python, shape);
        }
        if (python instanceof SupportsAdmissionControl) {
            return new Admission(python, shape);
        }
        if (python instanceof AcceptsLatestSeenOffset) {
            return new LatestSeen(python, shape);
        }
        return new EmbedlogStream(python, shape);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        return EmbedlogBatch.decoded(python.planInputPartitions(start, end));
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new TaskReaders(python.createReaderFactory(), shape);
    }

    @Override
    public Offset latestOffset() {
        return python.latestOffset();
    }

    @Override
    public Offset initialOffset() {
        return python.initialOffset();
    }

    @Override
    public Offset deserializeOffset(String json) {
        return python.deserializeOffset(json);
    }

    @Override
    public void commit(Offset end) {
        python.commit(end);
    }

    @Override
    public void stop() {
        python.stop();
    }

    /** What a query's progress shows as the source's description. */
    @Override
    public String toString() {
        return "embedlog (JVM reader) " + python;
    }

    /** A stream that accepts the latest offset seen before a restart. */
    static final class LatestSeen extends EmbedlogStream implements AcceptsLatestSeenOffset {
        LatestSeen(MicroBatchStream python, ReadShape shape) {
            super(python, shape);
        }

        @Override
        public void setLatestSeenOffset(Offset offset) {
            ((AcceptsLatestSeenOffset) python).setLatestSeenOffset(offset);
        }
    }

    /** A stream with read limits. */
    static class Admission extends EmbedlogStream implements SupportsAdmissionControl {
        Admission(MicroBatchStream python, ReadShape shape) {
            super(python, shape);
        }

        @Override
        public Offset latestOffset(Offset start, ReadLimit limit) {
            return ((SupportsAdmissionControl) python).latestOffset(start, limit);
        }

        @Override
        public ReadLimit getDefaultReadLimit() {
            return ((SupportsAdmissionControl) python).getDefaultReadLimit();
        }

        @Override
        public Offset reportLatestOffset() {
            return ((SupportsAdmissionControl) python).reportLatestOffset();
        }
    }

    /** A stream with read limits that runs {@code availableNow} itself. */
    static final class AvailableNow extends Admission implements SupportsTriggerAvailableNow {
        AvailableNow(MicroBatchStream python, ReadShape shape) {
            super(python, shape);
        }

        @Override
        public void prepareForTriggerAvailableNow() {
            ((SupportsTriggerAvailableNow) python).prepareForTriggerAvailableNow();
        }
    }
}
