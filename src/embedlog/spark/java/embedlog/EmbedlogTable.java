package embedlog;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Python source's table with a JVM scan builder ({@link EmbedlogScanBuilder}); everything
 * else -- name, schema, capabilities, writes -- is the Python table's.
 */
final class EmbedlogTable implements SupportsRead, SupportsWrite {
    private final PythonTable python;

    EmbedlogTable(PythonTable python) {
        this.python = python;
    }

    @Override
    public String name() {
        return python.name();
    }

    @Override
    public StructType schema() {
        return python.schema();
    }

    @Override
    public Column[] columns() {
        return python.columns();
    }

    @Override
    public Transform[] partitioning() {
        return python.partitioning();
    }

    @Override
    public Map<String, String> properties() {
        return python.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return python.capabilities();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new EmbedlogScanBuilder(python.newScanBuilder(options), python.schema(), options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return python.newWriteBuilder(info);
    }
}
