package embedlog;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/**
 * A scan whose tasks the JVM reads: batch ({@link EmbedlogBatch}) and micro-batch
 * ({@link EmbedlogStream}); the source has no continuous mode.
 *
 * <p>{@code readSchema} is what the query needs: the pruned columns, or one {@code count(*)}
 * column when the count was pushed down.
 */
final class EmbedlogScan implements Scan {
    private final Scan python;
    private final ReadShape shape;

    EmbedlogScan(Scan python, ReadShape shape) {
        this.python = python;
        this.shape = shape;
    }

    @Override
    public StructType readSchema() {
        return shape.readSchema();
    }

    @Override
    public String description() {
        return "embedlog (JVM reader" + (shape.countStar() ? ", count(*) from batch headers)"
                                                           : ")");
    }

    @Override
    public Batch toBatch() {
        return new EmbedlogBatch(python.toBatch(), shape);
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return EmbedlogStream.of(python.toMicroBatchStream(checkpointLocation), shape);
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
        return python.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
        return python.reportDriverMetrics();
    }
}
