"""The application of ``test_spark_standalone.py``: run as its own process (one JVM per
process), it connects to a standalone master, reads a log with ``format("embedlog")`` as a batch
query and as an availableNow stream, and prints what it read as one JSON line.

    python standalone_app.py <master URL> <log path> <scratch folder>
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _rows(df: Any) -> list[list[Any]]:
    return sorted([r["topic"], r["partition"], r["offset"], r["key"].hex() if r["key"] else None,
                   r["value"].hex()] for r in df.select(
                       "topic", "partition", "offset", "key", "value").toArrow().to_pylist())


def main(master: str, path: str, scratch: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("embedlog-standalone")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1")
             .config("spark.cores.max", "2")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = (spark.read.format("embedlog").option("subscribePattern", ".*")
              .option("startingOffsets", "earliest").load(path))
        batch = _rows(df)
        # Executor processes of the workers: their process ids, seen from inside the tasks.
        pids = sorted(set(df.rdd.mapPartitions(lambda _: [os.getpid()]).collect()))
        out = os.path.join(scratch, "stream-out")
        query = (spark.readStream.format("embedlog").option("subscribePattern", ".*")
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500")
                 .load(path).writeStream.format("parquet")
                 .option("checkpointLocation", os.path.join(scratch, "checkpoint"))
                 .trigger(availableNow=True).start(out))
        query.awaitTermination(300)
        stream = _rows(spark.read.parquet(out))
        print(json.dumps({"batch": batch, "stream": stream, "pids": pids,
                          "driver_pid": os.getpid()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
