package embedlog;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The Python reader's rows (the full Kafka schema) as columnar batches of the columns a query
 * reads: the fallback for tasks the JVM does not read itself ({@link TaskReaders}), so that one
 * scan is columnar throughout, as Spark requires.
 */
final class RowsToColumns implements PartitionReader<ColumnarBatch> {
    private static final byte[] EMPTY = new byte[0];

    private final PartitionReader<InternalRow> rows;
    private final Columns columns;
    private final int[] at = new int[8];  // Kafka column -> position in the full schema
    private final TaskSpec.Range[] ranges;
    private int skipRange = -1;
    private long skipOffset = -1;
    private boolean done;

    /** {@code ranges}: the task's, to place the rows of {@link #skipThrough}. */
    RowsToColumns(PartitionReader<InternalRow> rows, ReadShape shape, TaskSpec.Range[] ranges) {
        this.rows = rows;
        this.columns = new Columns(shape.readSchema(), shape.batchRows());
        this.ranges = ranges;
        StructField[] full = shape.fullSchema().fields();
        for (int i = 0; i < full.length; i++) {
            at[Columns.index(full[i].name())] = i;
        }
    }

    /** Leave out the rows up to offset {@code offset} of range {@code range} (included): the
     *  JVM handed those on before it left the task to the Python reader, which reads the ranges
     *  in the same order, each in offset order. */
    RowsToColumns skipThrough(int range, long offset) {
        skipRange = range;
        skipOffset = offset;
        return this;
    }

    private boolean skipped(InternalRow row) {
        if (skipRange < 0) {
            return false;
        }
        String topic = row.getUTF8String(at[2]).toString();
        int partition = row.getInt(at[3]);
        int range = 0;
        while (range < ranges.length && !(ranges[range].topic().equals(topic)
                && ranges[range].partition() == partition)) {
            range++;
        }
        if (range < skipRange || (range == skipRange && row.getLong(at[4]) <= skipOffset)) {
            return true;
        }
        skipRange = -1;  // past it: the rest is read
        return false;
    }

    @Override
    public boolean next() throws IOException {
        if (done) {
            return false;
        }
        int added = 0;
        while (added == 0 || !columns.full()) {  // the first add starts a new batch
            if (!rows.next()) {
                done = true;
                break;
            }
            InternalRow row = rows.get();
            if (!skipped(row)) {
                add(row);
                added++;
            }
        }
        return added > 0;
    }

    private void add(InternalRow row) {
        byte[] key = row.isNullAt(at[0]) ? null : row.getBinary(at[0]);
        byte[] value = row.isNullAt(at[1]) ? null : row.getBinary(at[1]);
        byte[] both = concat(key, value);
        int keyLen = key == null ? -1 : key.length;
        int valueOff = key == null ? 0 : key.length;
        int valueLen = value == null ? -1 : value.length;
        columns.record(row.getUTF8String(at[2]).toString(), row.getInt(at[3]), row.getLong(at[4]),
                       row.getLong(at[5]), row.getInt(at[6]), both, 0, keyLen, valueOff,
                       valueLen);
        if (columns.wantsHeaders() && !row.isNullAt(at[7])) {
            ArrayData headers = row.getArray(at[7]);
            for (int i = 0; i < headers.numElements(); i++) {
                InternalRow h = headers.getStruct(i, 2);
                UTF8String k = h.getUTF8String(0);
                byte[] kb = k.getBytes();
                byte[] v = h.isNullAt(1) ? null : h.getBinary(1);
                columns.header(kb, 0, kb.length, v == null ? EMPTY : v, 0,
                               v == null ? -1 : v.length);
            }
        }
    }

    private static byte[] concat(byte[] a, byte[] b) {
        int la = a == null ? 0 : a.length;
        int lb = b == null ? 0 : b.length;
        byte[] out = new byte[la + lb];
        if (la > 0) {
            System.arraycopy(a, 0, out, 0, la);
        }
        if (lb > 0) {
            System.arraycopy(b, 0, out, la, lb);
        }
        return out;
    }

    @Override
    public ColumnarBatch get() {
        return columns.batch();
    }

    @Override
    public void close() throws IOException {
        try {
            rows.close();
        } finally {
            columns.close();
        }
    }
}
