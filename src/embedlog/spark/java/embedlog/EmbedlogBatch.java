package embedlog;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonStreamingInputPartition;

/**
 * The Python source plans (its {@code partitions()}, run in a Python worker on the driver); each
 * planned task is decoded here ({@link TaskSpec}) and read by the JVM. A task the JVM cannot
 * read -- a remote log, anything {@link TaskSpec} does not recognise -- keeps its Python task and
 * is read through the Python reader ({@link TaskReaders}).
 */
final class EmbedlogBatch implements Batch {
    private final Batch python;
    private final ReadShape shape;

    EmbedlogBatch(Batch python, ReadShape shape) {
        this.python = python;
        this.shape = shape;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        return decoded(python.planInputPartitions());
    }

    /** The Python source's planned tasks, each with what the JVM reads of it ({@link TaskSpec};
     *  {@code null}: the Python reader reads it). A streaming task whose rows pyspark fetched
     *  ahead into a block (a simple stream reader) stays the Python reader's. */
    static InputPartition[] decoded(InputPartition[] planned) {
        InputPartition[] tasks = new InputPartition[planned.length];
        for (int i = 0; i < planned.length; i++) {
            InputPartition p = planned[i];
            TaskSpec spec = null;
            if (p instanceof PythonInputPartition py) {
                spec = TaskSpec.decode(py.pickedPartition());
            } else if (p instanceof PythonStreamingInputPartition py && py.blockId().isEmpty()) {
                spec = TaskSpec.decode(py.pickedPartition());
            }
            tasks[i] = new TaskPartition(p, spec);
        }
        return tasks;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new TaskReaders(python.createReaderFactory(), shape);
    }
}
