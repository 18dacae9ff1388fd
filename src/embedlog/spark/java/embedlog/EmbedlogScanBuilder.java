package embedlog;

import java.util.Locale;

import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Pushes filters to the Python source (which narrows the offset ranges it plans), and keeps for
 * the JVM reader the columns a query needs and a {@code count(*)} without grouping.
 *
 * <p>The JVM reader is used unless {@code .option("jvmReader", "false")}; then the scan is the
 * Python source's own, unchanged. ({@code kafka.isolation.level=read_committed} is read by the
 * JVM too: {@link TxnFilter}.)
 */
final class EmbedlogScanBuilder
        implements SupportsPushDownFilters, SupportsPushDownRequiredColumns,
                   SupportsPushDownAggregates {
    private final ScanBuilder python;
    private final StructType fullSchema;
    private final CaseInsensitiveStringMap options;
    private final boolean jvm;
    private StructType required;
    private boolean countStar;

    EmbedlogScanBuilder(ScanBuilder python, StructType fullSchema,
                        CaseInsensitiveStringMap options) {
        this.python = python;
        this.fullSchema = fullSchema;
        this.options = options;
        this.required = fullSchema;
        this.jvm = jvmReader(options);
    }

    /** Whether the options leave the reading to the JVM (see the class comment). An option
     *  value the Python source rejects fails the query there, at planning. */
    static boolean jvmReader(CaseInsensitiveStringMap options) {
        String flag = options.getOrDefault("jvmReader", "true").trim().toLowerCase(Locale.ROOT);
        return !flag.equals("false");
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        return python instanceof SupportsPushDownFilters push ? push.pushFilters(filters)
                                                              : filters;
    }

    @Override
    public Filter[] pushedFilters() {
        return python instanceof SupportsPushDownFilters push ? push.pushedFilters()
                                                              : new Filter[0];
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        if (jvm) {
            required = requiredSchema;
        }
    }

    /** {@code count(*)} with no grouping: each task answers its count from batch headers
     *  (Spark adds the tasks' counts up). Spark offers it only when every filter was pushed. */
    @Override
    public boolean pushAggregation(Aggregation aggregation) {
        if (!jvm || aggregation.groupByExpressions().length != 0) {
            return false;
        }
        AggregateFunc[] funcs = aggregation.aggregateExpressions();
        if (funcs.length != 1 || !(funcs[0] instanceof CountStar)) {
            return false;
        }
        countStar = true;
        return true;
    }

    @Override
    public Scan build() {
        Scan scan = python.build();
        if (!jvm) {
            return scan;
        }
        StructType schema = countStar
            ? new StructType().add("count(*)", DataTypes.LongType, false) : required;
        int batchRows = positive(options.getOrDefault("maxRecordsPerBatch", ""), 4096);
        return new EmbedlogScan(scan, new ReadShape(fullSchema, schema, countStar, batchRows));
    }

    private static int positive(String raw, int fallback) {
        try {
            int value = Integer.parseInt(raw.trim());
            return value > 0 ? Math.min(value, 65536) : fallback;
        } catch (NumberFormatException e) {
            return fallback;
        }
    }
}
