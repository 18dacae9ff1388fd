"""The Spark half of ``embedlog demo``: a local session and the report's queries, all through
``spark.read.format("embedlog")``.

Session settings follow the project's Spark notes: workers run this interpreter
(``PYSPARK_PYTHON``), the driver binds to loopback, no UI or console progress, two shuffle
partitions, logs at ERROR.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["SparkReport", "local_session", "require_spark", "spark_report"]


def require_spark() -> None:
    """A clear :class:`~embedlog.errors.UsageError` when pyspark, pyarrow or Java is
    missing."""
    try:
        from embedlog.spark import java_available
    except ImportError as exc:
        raise UsageError(f"the demo reads the log back with Spark: pip install "
                         f"'embedlog[spark]' ({exc})") from None
    if not java_available():
        raise UsageError("the demo reads the log back with Spark, which needs Java 17 or 21 "
                         "(e.g. apt-get install openjdk-17-jre-headless)")


def local_session() -> tuple[Any, bool]:
    """``(session, created)``: a ``local[2]`` SparkSession (the active one if there is one,
    then ``created`` is false) with the ``embedlog`` source registered."""
    require_spark()
    from pyspark.sql import SparkSession

    import embedlog.spark as embedlog_spark

    created = SparkSession.getActiveSession() is None
    spark = embedlog_spark.local_session("embedlog-demo")
    embedlog_spark.register(spark)
    return spark, created


@dataclass
class SparkReport:
    startup_s: float
    scan_rows: int
    scan_bytes: int
    scan_s: float
    per_minute: list[tuple[str, int]]
    top_pages: list[tuple[str, int]]
    partitions: list[tuple[int, int, int, int]]
    """(partition, first offset, last offset, rows) as Spark saw them."""
    profiles_rows: int
    profiles_live: int


def spark_report(path: str, started: float) -> SparkReport:
    """Start Spark and run the report's queries over the log at ``path``."""
    spark, ours = local_session()
    startup = time.perf_counter() - started
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    try:
        clicks = spark.read.format("embedlog").option("subscribe", "clicks").load(path)
        schema = StructType([StructField("page", StringType()), StructField("action",
                                                                            StringType())])
        events = clicks.select(
            "partition", "offset", "timestamp",
            F.from_json(F.col("value").cast("string"), schema).alias("e"),
        ).select("partition", "offset", "timestamp", "e.page", "e.action").cache()
        per_minute = [
            (r["minute"].strftime("%H:%M"), r["count"])
            for r in events.groupBy(F.date_trunc("minute", "timestamp").alias("minute"))
            .count().orderBy("minute").collect()
        ]
        top = [(r["page"], r["count"]) for r in
               events.groupBy("page").count().orderBy(F.desc("count"), "page").limit(5).collect()]
        parts = [(r["partition"], r["lo"], r["hi"], r["n"]) for r in
                 events.groupBy("partition").agg(F.min("offset").alias("lo"),
                                                 F.max("offset").alias("hi"),
                                                 F.count(F.lit(1)).alias("n"))
                 .orderBy("partition").collect()]
        events.unpersist()
        # A full scan of every column (the source has no column pruning), once the Python
        # workers are warm: the read throughput.
        t0 = time.perf_counter()
        scan = clicks.agg(F.count(F.lit(1)).alias("n"),
                          F.sum(F.length("value")).alias("bytes")).first()
        scan_s = time.perf_counter() - t0

        profiles = spark.read.format("embedlog").option("subscribe", "profiles").load(path)
        latest = profiles.groupBy("key").agg(F.max_by("value", "offset").alias("value"),
                                             F.count(F.lit(1)).alias("n"))
        prof = latest.agg(F.sum("n").alias("rows"),
                          F.count(F.col("value")).alias("live")).first()
        return SparkReport(startup, int(scan["n"]), int(scan["bytes"] or 0), scan_s,
                           per_minute, top, parts, int(prof["rows"] or 0), int(prof["live"]))
    finally:
        if ours:  # a session the caller started is theirs to stop
            spark.stop()
