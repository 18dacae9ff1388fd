"""The row schema of Spark's Kafka source, and the exact Arrow schema Spark expects back.

Spark checks the first ``RecordBatch`` a reader yields against ``to_arrow_schema(schema,
timezone="UTC")`` with ``pa.Schema.equals``: ``binary`` (not ``large_binary``), ``int32`` for
``partition`` and ``timestampType``, ``timestamp[us, tz=UTC]``, every field nullable. We derive
the Arrow schema with pyspark's own converter so the two can never drift, and the Spark types
from the one column table, :data:`embedlog.arrow.schema.COLUMNS` (which
:func:`embedlog.arrow.read_arrow` uses too).

A user may pass a *subset* of these columns (``.schema("partition INT, offset BIGINT")``):
Python data sources get no column pruning, so this is how a query avoids decoding keys and
values it does not need.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, StructField, StructType

from ..arrow import schema as arrow_columns
from ..errors import InvalidConfigError

__all__ = [
    "COLUMNS",
    "HEADERS_TYPE",
    "arrow_schema",
    "kafka_schema",
    "resolve_columns",
]

COLUMNS: dict[str, DataType] = {
    name: from_arrow_type(arrow_type) for name, arrow_type in arrow_columns.COLUMNS.items()
}
"""Every column the reader can produce, in Kafka's order, with its Spark type."""

HEADERS_TYPE: DataType = COLUMNS["headers"]
"""``array<struct<key: string, value: binary>>``, as in Spark's Kafka source."""


def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema; ``headers`` is appended when ``include_headers``."""
    names = [n for n in COLUMNS if include_headers or n != "headers"]
    return StructType([StructField(n, COLUMNS[n], nullable=True) for n in names])


def resolve_columns(schema: StructType) -> tuple[str, ...]:
    """Check a (possibly user-given) schema and return its column names in order.

    Every field must be one of :data:`COLUMNS` with the same type (matched case-insensitively,
    as Spark resolves names); anything else raises :class:`InvalidConfigError`.
    """
    lowered = {n.lower(): n for n in COLUMNS}
    names: list[str] = []
    for field in schema.fields:
        canonical = lowered.get(field.name.lower())
        if canonical is None:
            raise InvalidConfigError(
                f"schema: unknown column {field.name!r}; the embedlog source provides "
                f"{', '.join(COLUMNS)}"
            )
        expected = COLUMNS[canonical]
        if _strip_nullability(field.dataType) != _strip_nullability(expected):
            raise InvalidConfigError(
                f"schema: column {field.name!r} must be {expected.simpleString()}, "
                f"not {field.dataType.simpleString()}"
            )
        if canonical in names:
            raise InvalidConfigError(f"schema: column {field.name!r} appears twice")
        names.append(canonical)
    if not names:
        raise InvalidConfigError("schema: at least one column is needed")
    return tuple(names)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark will demand for batches of ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def _strip_nullability(dtype: DataType) -> Any:
    """A comparable form of ``dtype`` that ignores nullability flags."""
    if isinstance(dtype, StructType):
        return ("struct", tuple((f.name.lower(), _strip_nullability(f.dataType)) for f in dtype))
    if isinstance(dtype, ArrayType):
        return ("array", _strip_nullability(dtype.elementType))
    return dtype.simpleString()
