package embedlog;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One planned task: the Python source's input partition (for the fallback reader) and, when the
 * JVM can read it, what it reads ({@code spec}, else {@code null}).
 */
record TaskPartition(InputPartition python, TaskSpec spec) implements InputPartition {
    @Override
    public String[] preferredLocations() {
        return python.preferredLocations();
    }
}
