"""Spark integration: the ``embedlog`` data source (pyspark >= 4.2, pyarrow).

Read a log directory -- embedlog's or a Kafka broker's -- with the schema and options of
Spark's Kafka source, stream from it, or append to it::

    df = spark.read.format("embedlog").option("subscribe", "events").load("/data/log")
    q = (spark.readStream.format("embedlog").option("subscribePattern", "ev.*")
         .option("maxOffsetsPerTrigger", 100_000).load("/data/log")
         .writeStream.trigger(availableNow=True)...)
    df.write.format("embedlog").option("topic", "events").mode("append").save("/data/log")

Spark finds the source by itself once embedlog[spark] is installed (module
``pyspark_embedlog``); :func:`register` does it explicitly, e.g. for a session started before
the install. With :func:`jar_path`'s jar in ``spark.jars`` (:func:`local_session` adds it),
batch scans are read by the JVM reader (:mod:`embedlog.spark.jvm`). docs/spark.md describes
where the work happens (planning, tasks, the one writer)
and the differences from Spark's Kafka source.
"""

from __future__ import annotations

from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "embedlog.spark needs pyspark>=4.2 and pyarrow: pip install 'embedlog[spark]'"
    ) from exc

from .jvm import jar_path
from .session import java_available, local_session
from .source import EmbedlogDataSource
from .stream import source_metrics

__all__ = ["EmbedlogDataSource", "jar_path", "java_available", "local_session", "register",
           "source_metrics"]


def register(spark: Any) -> bool:
    """Register the ``embedlog`` format on a SparkSession (``spark.dataSource.register``)
    unless Spark already has it -- discovered from the installed package -- which would only
    make Spark warn that a statically registered source was replaced. Returns whether it
    registered."""
    if _known(spark, EmbedlogDataSource.name()):
        return False
    spark.dataSource.register(EmbedlogDataSource)
    return True


def _known(spark: Any, name: str) -> bool:
    """Whether the session's data source manager has ``name`` (classic Spark; a Spark Connect
    session has no JVM handle, and then the source is registered to be sure)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:  # no JVM session here: register
        return False
