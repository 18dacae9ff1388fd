package embedlog;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;

/**
 * {@code format("embedlog")} when this jar is on Spark's classpath: Spark resolves a format name
 * {@code X} to a JVM class {@code X.DefaultSource} before it looks for a Python data source named
 * {@code X}, so this class answers for {@code embedlog} and wraps the Python source of the same
 * name (Spark sets that name through {@link #setShortName}).
 *
 * <p>The Python source keeps everything but the reading of planned batch tasks: the schema, the
 * options and their checks, planning (offset ranges, packing, pushed-down filters), streams and
 * writes. {@link EmbedlogTable} hands Spark a scan that reads the tasks Python planned in the
 * executor JVM, as columnar batches, with column pruning and {@code count(*)} from batch headers.
 */
public class DefaultSource extends PythonDataSourceV2 {
    /** The format name; also the name of the wrapped Python data source. */
    public static final String NAME = "embedlog";

    public DefaultSource() {
        super();
        super.setShortName(NAME);
    }

    /** The name is {@link #NAME}, set once by the constructor, whatever the format was spelled
     *  as (e.g. {@code format("embedlog.DefaultSource")}): Spark's own call is ignored. */
    @Override
    public void setShortName(String name) {
        // the wrapped Python source is always the one named NAME
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
        Table table = super.getTable(schema, partitioning, props);
        return table instanceof PythonTable python ? new EmbedlogTable(python) : table;
    }
}
