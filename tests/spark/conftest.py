"""A session-scoped local SparkSession for the ``@pytest.mark.spark`` tests (settings from
shared/design/spark.md section 2). Tests that use it are skipped cleanly when pyspark, pyarrow or
Java is missing; the pure-Python tests in this folder need only pyspark and pyarrow importable.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session for the whole run. The source is *not* registered here: every
    query relies on Spark's discovery of the ``pyspark_embedlog`` module, as a user's would."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("Java is not installed (Spark needs Java 17 or 21)")
    # Workers must run this interpreter (it has embedlog and pyarrow), and bind to loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("embedlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # C1-only JIT and serial GC: faster start and small queries (tests only; halves big scans)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
