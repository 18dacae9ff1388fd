package embedlog;

import java.io.IOException;
import java.util.function.Supplier;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A task as columnar batches of up to {@code batchRows} rows (more when a record batch
 * straddles the bound), one range's rows never mixed with another's in a batch: read by the JVM
 * ({@link TaskScan}) until it meets something it leaves to the Python reader
 * ({@link FallbackException}); from there on the Python reader reads the task, less the rows the
 * JVM already handed on ({@link RowsToColumns#skipThrough}). A {@code null} scan: the Python
 * reader reads all of it.
 */
final class ColumnarTaskReader implements PartitionReader<ColumnarBatch> {
    private final TaskScan scan;
    private final Supplier<PartitionReader<InternalRow>> python;
    private final ReadShape shape;
    private final Columns columns;
    private RowsToColumns rows;

    ColumnarTaskReader(TaskScan scan, Supplier<PartitionReader<InternalRow>> python,
                       ReadShape shape) {
        this.scan = scan;
        this.python = python;
        this.shape = shape;
        this.columns = new Columns(shape.readSchema(), shape.batchRows());
        if (scan == null) {
            rows = new RowsToColumns(python.get(), shape, new TaskSpec.Range[0]);
        }
    }

    @Override
    public boolean next() throws IOException {
        if (rows == null) {
            try {
                return scan.fill(columns);
            } catch (FallbackException e) {
                rows = new RowsToColumns(python.get(), shape, scan.ranges())
                    .skipThrough(scan.emittedRange(), scan.emittedOffset());
                scan.close();
            }
        }
        return rows.next();
    }

    @Override
    public ColumnarBatch get() {
        return rows != null ? rows.get() : columns.batch();
    }

    @Override
    public void close() throws IOException {
        try (Columns c = columns; RowsToColumns r = rows) {
            if (scan != null) {
                scan.close();
            }
        }
    }
}
