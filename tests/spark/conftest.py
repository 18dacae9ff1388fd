"""A session-scoped local SparkSession for the ``@pytest.mark.spark`` tests (settings from
shared/design/spark.md section 2). Tests that use it are skipped cleanly when pyspark, pyarrow or
Java is missing; the pure-Python tests in this folder need only pyspark and pyarrow importable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] session for the whole run. The source is *not* registered here: every
    query relies on Spark's discovery of the ``pyspark_embedlog`` module, as a user's would."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from embedlog.spark.session import java_available, local_session

    if not java_available():
        pytest.skip("Java is not installed (Spark needs Java 17 or 21)")
    # C1-only JIT and serial GC: faster start and small queries (tests only; halves big scans)
    session = local_session(
        "embedlog-tests",
        conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def classpath() -> str:
    """The JVM reader core's run classpath (tests of ``embedlog.Dump``); skips without javac,
    java or pyspark's jars."""
    from jvm_core_util import core_classpath

    cp = core_classpath()
    if cp is None:
        pytest.skip("javac, java or pyspark's jars are missing")
    return cp
