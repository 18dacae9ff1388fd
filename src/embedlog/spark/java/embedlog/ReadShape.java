package embedlog;

import java.io.Serializable;

import org.apache.spark.sql.types.StructType;

/**
 * What a JVM scan hands Spark: rows of {@code fullSchema} (the table's: the Kafka schema, with
 * or without headers) pruned to {@code readSchema}, in column batches of {@code batchRows}
 * rows; or with {@code countStar} one row per task, its count ({@code readSchema} is then one
 * long column).
 */
record ReadShape(StructType fullSchema, StructType readSchema, boolean countStar, int batchRows)
        implements Serializable {}
