package embedlog;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Readers of planned tasks ({@link TaskPartition}), on the executors: columnar batches of the
 * columns the query reads, or with {@code count(*)} pushed down one row with the task's count.
 * A task the JVM reads itself goes through {@link TaskScan}; any other -- and one whose folder
 * {@link TaskScan#open} declines -- through the Python source's reader ({@code python}).
 */
final class TaskReaders implements PartitionReaderFactory {
    private final PartitionReaderFactory python;
    private final ReadShape shape;

    TaskReaders(PartitionReaderFactory python, ReadShape shape) {
        this.python = python;
        this.shape = shape;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return !shape.countStar();
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        TaskPartition task = (TaskPartition) partition;
        return new ColumnarTaskReader(TaskScan.open(task.spec()),
                                      () -> python.createReader(task.python()), shape);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        TaskPartition task = (TaskPartition) partition;
        TaskScan scan = TaskScan.open(task.spec());
        if (scan == null) {
            return CountReader.ofRows(python.createReader(task.python()));
        }
        return new CountReader(() -> {
            try {
                return scan.count();
            } catch (FallbackException e) {
                return CountReader.rows(python.createReader(task.python()));
            }
        }, scan);
    }
}
