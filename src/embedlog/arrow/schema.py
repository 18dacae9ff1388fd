"""The row schema of Spark's Kafka source, as Arrow types: the one definition of it.

Column order and types follow Spark's ``KafkaRecordToRowConverter`` exactly as Spark hands
Arrow batches to Python (``to_arrow_schema`` with ``timezone="UTC"``): ``binary`` (not
``large_binary``), ``int32`` for ``partition`` and ``timestampType``, ``timestamp[us, tz=UTC]``,
every field nullable, and ``headers`` as ``list<element: struct<key: string, value: binary>>``.
:mod:`embedlog.spark.schema` derives its Spark types from this table, so the Spark reader and
:func:`embedlog.arrow.read_arrow` produce the same batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from .. import _validate
from ..errors import InvalidArgumentError, UsageError

__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "HEADERS_TYPE", "kafka_arrow_schema", "project"]

HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
"""``array<struct<key: string, value: binary>>``: null for a record without headers."""

COLUMNS: dict[str, pa.DataType] = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": HEADERS_TYPE,
}
"""Every column a reader can produce, in Kafka's order, with its Arrow type."""

DEFAULT_COLUMNS: tuple[str, ...] = tuple(n for n in COLUMNS if n != "headers")
"""The columns of Spark's Kafka source without ``includeHeaders``."""


def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """Spark's Kafka source schema in Arrow; ``headers`` is appended when ``include_headers``."""
    return project(None, include_headers)[1]


def project(columns: Sequence[str] | None, include_headers: bool = False
            ) -> tuple[tuple[str, ...], pa.Schema]:
    """The column names to build, in the order asked for, and their schema.

    ``columns=None`` means every column (``headers`` only with ``include_headers``); a name that
    is not a Kafka-source column, or one named twice, raises :class:`~embedlog.UsageError`;
    ``columns`` that are not a str or an iterable of them
    :class:`~embedlog.errors.InvalidArgumentError`.
    """
    if columns is None:
        names = (*DEFAULT_COLUMNS, "headers") if include_headers else DEFAULT_COLUMNS
    else:
        names = tuple([columns] if isinstance(columns, str)
                      else _validate.iterable(columns, "columns", "column names"))
        for name in names:
            if not isinstance(name, str):
                raise InvalidArgumentError(f"columns must name columns by str, not {name!r}")
            if name not in COLUMNS:
                raise UsageError(f"unknown column {name!r}; the columns are {', '.join(COLUMNS)}")
        if len(set(names)) != len(names):
            raise UsageError(f"a column is named twice in {list(names)}")
        if not names:
            raise UsageError("at least one column is needed")
    return names, pa.schema([pa.field(n, COLUMNS[n], nullable=True) for n in names])
