"""Logs as Arrow tables (``pip install 'embedlog[arrow]'``, which adds pyarrow).

::

    reader = log.read_arrow("events", columns=["offset", "timestamp", "value"])
    for batch in reader:                 # pyarrow.RecordBatch, bounded memory
        ...
    table = log.read_table("events", start_time=datetime(2024, 5, 1, tzinfo=timezone.utc))
    table.to_pandas()                    # or polars.from_arrow(table), duckdb.sql(...)

The schema is Spark's Kafka source's (:mod:`embedlog.arrow.schema`); the batches are built
from the decoder's columns without a Python object per record (:mod:`embedlog.arrow.columns`);
:mod:`embedlog.arrow.reader` says what is read and how.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("embedlog.arrow needs pyarrow: pip install 'embedlog[arrow]'") from exc

from .reader import DEFAULT_BATCH_ROWS, read_arrow, read_table
from .schema import COLUMNS, DEFAULT_COLUMNS, kafka_arrow_schema

__all__ = ["COLUMNS", "DEFAULT_BATCH_ROWS", "DEFAULT_COLUMNS", "kafka_arrow_schema",
           "read_arrow", "read_table"]
