package embedlog;

import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The column vectors of one {@link ColumnarBatch} of Spark's Kafka schema, pruned to the columns
 * a query reads (any subset, any order), filled one record at a time and reused batch after
 * batch: {@link #record} starts a row, {@link #header} adds to its headers, {@link #batch} hands
 * the rows filled so far to Spark, and the next {@link #record} starts a new batch.
 *
 * <p>Column names are Spark's Kafka source's: {@code key}, {@code value} (binary, null for a
 * null key or value), {@code topic} (string), {@code partition} (int), {@code offset} (long),
 * {@code timestamp} (timestamp: microseconds), {@code timestampType} (int: 0 create time,
 * 1 log append time), {@code headers} (array of struct {@code key} string, {@code value} binary;
 * null for a record without headers).
 * A topic's bytes are stored once per batch and shared by its rows.
 */
final class Columns implements AutoCloseable {
    private static final String[] NAMES = {
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"};
    private static final int KEY = 0;
    private static final int VALUE = 1;
    private static final int TOPIC = 2;
    private static final int PARTITION = 3;
    private static final int OFFSET = 4;
    private static final int TIMESTAMP = 5;
    private static final int TIMESTAMP_TYPE = 6;
    private static final int HEADERS = 7;

    private final int capacity;
    private final WritableColumnVector[] byName = new WritableColumnVector[NAMES.length];
    private final OnHeapColumnVector[] vectors;
    private final ColumnarBatch batch;
    private int rows;
    private int allocated;
    private boolean handedOut;
    private String topic;
    private byte[] topicBytes;
    private int topicOffset = -1;
    private int headersStart;

    Columns(StructType schema, int capacity) {
        this.capacity = capacity;
        this.allocated = capacity;
        StructField[] fields = schema.fields();
        vectors = new OnHeapColumnVector[fields.length];
        for (int i = 0; i < fields.length; i++) {
            vectors[i] = new OnHeapColumnVector(capacity, fields[i].dataType());
            byName[index(fields[i].name())] = vectors[i];
        }
        batch = new ColumnarBatch((ColumnVector[]) vectors, 0);
    }

    /** The position of {@code name} in the Kafka schema; an unknown column is a bug of the
     *  caller (Spark prunes only to columns of the schema the source gave it). */
    static int index(String name) {
        for (int i = 0; i < NAMES.length; i++) {
            if (NAMES[i].equals(name)) {
                return i;
            }
        }
        throw new IllegalArgumentException("embedlog: no column " + name + " in the schema");
    }

    /** Whether the batch holds {@code capacity} rows or more: time to hand it out. The vectors
     *  grow past it when a caller adds more (the rest of a record batch). */
    boolean full() {
        return rows >= capacity;
    }

    int rows() {
        return rows;
    }

    /** Whether the query reads the record headers at all (else {@link #header} is not needed). */
    boolean wantsHeaders() {
        return byName[HEADERS] != null;
    }

    /** Starts a row. {@code key}/{@code value} are {@code buf[off, off + len)}, null when the
     *  length is negative. */
    void record(String topicName, int partition, long offset, long timestampMicros,
                int timestampType, byte[] buf, int keyOff, int keyLen, int valueOff,
                int valueLen) {
        if (handedOut) {
            clear();
        }
        int row = rows++;
        if (row == allocated) {
            allocated *= 2;
            for (OnHeapColumnVector v : vectors) {
                v.reserve(allocated);
            }
        }
        binary(byName[KEY], row, buf, keyOff, keyLen);
        binary(byName[VALUE], row, buf, valueOff, valueLen);
        putTopic(row, topicName);
        putInt(byName[PARTITION], row, partition);
        putLong(byName[OFFSET], row, offset);
        putLong(byName[TIMESTAMP], row, timestampMicros);
        putInt(byName[TIMESTAMP_TYPE], row, timestampType);
        WritableColumnVector headers = byName[HEADERS];
        if (headers != null) {
            headersStart = headers.arrayData().getElementsAppended();
            headers.putNull(row);  // no headers is null, as in Spark's Kafka source
        }
    }

    /** Adds a header to the current row: {@code key} UTF-8, value {@code buf[off, off + len)}
     *  or null when {@code len} is negative. */
    void header(byte[] key, int keyOff, int keyLen, byte[] buf, int valueOff, int valueLen) {
        WritableColumnVector headers = byName[HEADERS];
        WritableColumnVector entries = headers.arrayData();
        entries.appendStruct(false);  // the children grow by their own appends, in step
        entries.getChild(0).appendByteArray(key, keyOff, keyLen);
        if (valueLen < 0) {
            entries.getChild(1).appendNull();
        } else {
            entries.getChild(1).appendByteArray(buf, valueOff, valueLen);
        }
        int count = entries.getElementsAppended() - headersStart;
        if (count == 1) {
            headers.putNotNull(rows - 1);
        }
        headers.putArray(rows - 1, headersStart, count);
    }

    /** The rows added since the last call, as a batch Spark may read until the next
     *  {@link #record}. */
    ColumnarBatch batch() {
        batch.setNumRows(rows);
        handedOut = true;
        return batch;
    }

    private void clear() {
        for (OnHeapColumnVector v : vectors) {
            v.reset();
        }
        rows = 0;
        handedOut = false;
        topicOffset = -1;
    }

    private void putTopic(int row, String name) {
        WritableColumnVector v = byName[TOPIC];
        if (v == null) {
            return;
        }
        if (!name.equals(topic)) {
            topic = name;
            topicBytes = name.getBytes(StandardCharsets.UTF_8);
            topicOffset = -1;
        }
        if (topicOffset < 0) {
            topicOffset = v.putByteArray(row, topicBytes, 0, topicBytes.length);
        } else {
            v.putArray(row, topicOffset, topicBytes.length);
        }
    }

    private static void binary(WritableColumnVector v, int row, byte[] buf, int off, int len) {
        if (v == null) {
            return;
        }
        if (len < 0) {
            v.putNull(row);
        } else {
            v.putByteArray(row, buf, off, len);
        }
    }

    private static void putInt(WritableColumnVector v, int row, int value) {
        if (v != null) {
            v.putInt(row, value);
        }
    }

    private static void putLong(WritableColumnVector v, int row, long value) {
        if (v != null) {
            v.putLong(row, value);
        }
    }

    @Override
    public void close() {
        batch.close();
    }
}
