package embedlog;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/** One row: the number of records a task reads ({@code count(*)} pushed down), counted when the
 *  reader is first advanced. */
final class CountReader implements PartitionReader<InternalRow> {
    /** How a task is counted. */
    interface Counter {
        long count() throws IOException;
    }

    private final Counter counter;
    private final AutoCloseable resource;
    private InternalRow row;
    private boolean done;

    CountReader(Counter counter, AutoCloseable resource) {
        this.counter = counter;
        this.resource = resource;
    }

    /** Counts the rows of a row reader (the Python reader's fallback). */
    static CountReader ofRows(PartitionReader<InternalRow> rows) {
        return new CountReader(() -> rows(rows), rows);
    }

    /** The number of rows {@code rows} gives (read to the end; closed). */
    static long rows(PartitionReader<InternalRow> rows) throws IOException {
        try (rows) {
            long n = 0;
            while (rows.next()) {
                rows.get();  // a reader advances in get(), not in next()
                n++;
            }
            return n;
        }
    }

    @Override
    public boolean next() throws IOException {
        if (done) {
            return false;
        }
        done = true;
        row = new GenericInternalRow(new Object[] {counter.count()});
        return true;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() throws IOException {
        if (resource != null) {
            try {
                resource.close();
            } catch (IOException | RuntimeException e) {
                throw e;
            } catch (Exception e) {
                throw new IOException(e);
            }
        }
    }
}
