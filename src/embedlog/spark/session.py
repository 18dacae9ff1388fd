"""A local SparkSession set up the way embedded use needs it (demo, tests, notebooks).

Workers must run this interpreter (it has embedlog and pyarrow) and bind to loopback; the UI,
console progress bars and most logging are off; timestamps are shown in UTC. Executor workers
are forked from :mod:`embedlog.spark.daemon`, which has the reader imported already. The JVM
reader's jar (:mod:`embedlog.spark.jvm`) is put on the classpath (``spark.jars``) when it can
be built, unless ``EMBEDLOG_SPARK_JVM=0``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from .jvm import jar_path, jvm_enabled

__all__ = ["DAEMON_MODULE", "java_available", "local_session"]

DAEMON_MODULE = "embedlog.spark.daemon"
"""``spark.python.daemon.module`` for executors that read embedlog: workers start with the
reader imported (:mod:`embedlog.spark.daemon`)."""


def java_available() -> bool:
    """Whether a Java runtime is there for Spark (``$JAVA_HOME/bin/java`` or ``java``)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


def local_session(
    app_name: str = "embedlog", *, cores: int = 2, conf: Mapping[str, str] | None = None
) -> Any:
    """``SparkSession.builder.master(f"local[{cores}]")...getOrCreate()`` with quiet, loopback,
    UTC settings and :data:`DAEMON_MODULE` as the executors' Python daemon (``conf`` overrides
    any of them; the active session is returned if there is one)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.daemon.module", DAEMON_MODULE)
    )
    jar = jar_path() if jvm_enabled() else None
    if jar is not None:
        builder = builder.config("spark.jars", jar)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
