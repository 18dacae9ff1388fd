"""The application of ``test_spark_standalone.py``: run as its own process (one JVM per
process), it connects to a standalone master, reads each log (a path or a URI) with
``format("embedlog")`` as a batch query and as an availableNow stream, and prints what it read
as one JSON line. The ``AWS_*`` variables of its environment go to the executors, and the JVM
reader's jar (when it can be built) to the executors by ``spark.jars``.

    python standalone_app.py <master URL> <scratch folder> <log> [<log> ...]
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


def _read(spark: Any, path: str, scratch: str) -> dict[str, Any]:
    df = (spark.read.format("embedlog").option("subscribePattern", ".*")
          .option("startingOffsets", "earliest").load(path))
    batch = _rows(df)
    jvm = "JVM reader" in str(df._jdf.queryExecution().executedPlan().toString())
    count = df.count()  # through the JVM reader: count(*) from batch headers
    # Executor processes of the workers: their process ids, seen from inside the tasks.
    pids = sorted(set(df.rdd.mapPartitions(lambda _: [os.getpid()]).collect()))
    out = os.path.join(scratch, "stream-out")
    query = (spark.readStream.format("embedlog").option("subscribePattern", ".*")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500")
             .load(path).writeStream.format("parquet")
             .option("checkpointLocation", os.path.join(scratch, "checkpoint"))
             .trigger(availableNow=True).start(out))
    query.awaitTermination(300)
    return {"batch": batch, "stream": _rows(spark.read.parquet(out)), "pids": pids, "jvm": jvm,
            "count": count}


def main(master: str, scratch: str, *paths: str) -> None:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("embedlog-standalone")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.executor.memory", "512m")
               .config("spark.executor.cores", "1")
               .config("spark.cores.max", "2")
               .config("spark.sql.shuffle.partitions", "2"))
    from embedlog.spark import jar_path

    jar = jar_path()  # the JVM reader, shipped to the executors by spark.jars
    if jar is not None:
        builder = builder.config("spark.jars", jar)
    for key, value in os.environ.items():
        if key.startswith("AWS_"):
            builder = builder.config(f"spark.executorEnv.{key}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        reads = {path: _read(spark, path, os.path.join(scratch, str(i)))
                 for i, path in enumerate(paths)}
        print(json.dumps({"reads": reads, "driver_pid": os.getpid()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
