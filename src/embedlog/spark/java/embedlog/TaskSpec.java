package embedlog;

import java.io.Serializable;
import java.util.Map;
import java.util.regex.Pattern;

import net.razorvine.pickle.Unpickler;
import net.razorvine.pickle.objects.ClassDict;

/**
 * What one planned task reads, decoded from the Python planner's pickled
 * {@code embedlog.spark.scan.ReadTask} (a frozen dataclass: {@code path}, {@code ranges} of
 * {@code (topic, partition, start, end)}, {@code fail_on_data_loss}, {@code read_committed},
 * {@code dense}: the topics embedlog created, whose active segments have no offset gap).
 *
 * <p>{@link #decode} answers {@code null} for a task the JVM leaves to the Python reader: a log
 * given as a URI (the remote reader is Python's), or a pickle that is not exactly the shape
 * above. Spark's stand-in for an empty plan ({@code InputPartition(None)})
 * decodes to a task with no ranges. Every field is checked here; the topic names again where a
 * folder name is made of them ({@link PartitionScan#partitionDir}).
 */
record TaskSpec(String path, Range[] ranges, boolean failOnDataLoss, boolean readCommitted,
                String[] dense)
        implements Serializable {
    /** Offsets {@code [start, end)} of partition {@code partition} of {@code topic}. */
    record Range(String topic, int partition, long start, long end) implements Serializable {}

    private static final String READ_TASK = "embedlog.spark.scan.ReadTask";
    private static final String EMPTY_TASK = "pyspark.sql.datasource.InputPartition";
    private static final Pattern URI = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*://");

    static TaskSpec decode(byte[] pickled) {
        Object task;
        try {
            task = new Unpickler().loads(pickled);
        } catch (Exception | StackOverflowError e) {
            return null;
        }
        if (!(task instanceof ClassDict dict)) {
            return null;
        }
        if (EMPTY_TASK.equals(dict.getClassName()) && dict.get("value") == null) {
            return new TaskSpec("", new Range[0], true, false, new String[0]);
        }
        if (!READ_TASK.equals(dict.getClassName())) {
            return null;
        }
        return fromFields(dict);
    }

    private static TaskSpec fromFields(Map<String, Object> fields) {
        if (!(fields.get("path") instanceof String path) || path.isEmpty()
                || path.indexOf('\0') >= 0 || URI.matcher(path).find()
                || !(fields.get("fail_on_data_loss") instanceof Boolean failOnDataLoss)
                || !(fields.get("read_committed") instanceof Boolean readCommitted)
                || !(fields.get("ranges") instanceof Object[] raw)) {
            return null;
        }
        String[] dense = strings(fields.get("dense"));
        if (dense == null) {
            return null;
        }
        Range[] ranges = new Range[raw.length];
        for (int i = 0; i < raw.length; i++) {
            ranges[i] = range(raw[i]);
            if (ranges[i] == null) {
                return null;
            }
        }
        return new TaskSpec(path, ranges, failOnDataLoss, readCommitted, dense);
    }

    /** A tuple of strings ({@code null} when it is anything else). */
    private static String[] strings(Object value) {
        if (!(value instanceof Object[] items)) {
            return null;
        }
        String[] out = new String[items.length];
        for (int i = 0; i < items.length; i++) {
            if (!(items[i] instanceof String name)) {
                return null;
            }
            out[i] = name;
        }
        return out;
    }

    private static Range range(Object item) {
        if (!(item instanceof Object[] t) || t.length != 4 || !(t[0] instanceof String topic)
                || !(t[1] instanceof Integer partition) || !isLong(t[2]) || !isLong(t[3])) {
            return null;
        }
        long start = ((Number) t[2]).longValue();
        long end = ((Number) t[3]).longValue();
        if (partition < 0 || start < 0 || end < start) {
            return null;
        }
        return new Range(topic, partition, start, end);
    }

    private static boolean isLong(Object value) {
        return value instanceof Integer || value instanceof Long;
    }
}
