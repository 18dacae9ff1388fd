"""The driver side of a Spark write without a JVM: staged rows go through
:class:`EmbedlogWriter` as Spark would hand them over. A row the log would refuse fails the
commit before anything is appended, and each partition gets its rows in row order."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import embedlog
from embedlog.errors import InvalidConfigError
from embedlog.spark.options import parse_write_options
from embedlog.spark.schema import HEADERS_TYPE, arrow_schema
from embedlog.spark.writer import EmbedlogWriter

UTC = dt.timezone.utc
SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("partition", IntegerType()),
    StructField("timestamp", TimestampType()),
    StructField("headers", HEADERS_TYPE),
])


def write(path: str, rows: list[dict[str, Any]]) -> None:
    """Stage ``rows`` as one task and commit them, as Spark does."""
    writer = EmbedlogWriter(parse_write_options({"path": path}), SCHEMA, False)
    full = [{f.name: r.get(f.name) for f in SCHEMA.fields} for r in rows]
    batch = pa.RecordBatch.from_pylist(full, schema=arrow_schema(SCHEMA))
    writer.commit([writer.write(iter([batch]))])


def ends(path: str) -> dict[str, list[int]]:
    with embedlog.open(path, read_only=True) as log:
        return {t: [log.end_offset(t, p) for p in range(log.partition_count(t))]
                for t in log.topics()}


@pytest.fixture
def logdir(tmp_path: Any) -> str:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("a")
        log.create_topic("b", partitions=2)
    return path


GOOD = {"topic": "a", "value": b"fine", "timestamp": dt.datetime(2024, 1, 1, tzinfo=UTC)}


@pytest.mark.parametrize("bad", [
    {"timestamp": dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)},
    {"timestamp": dt.datetime(1970, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC)
     - dt.timedelta(seconds=1)},  # -1 ms after truncation to milliseconds
    {"headers": [{"key": None, "value": b"v"}]},
    {"headers": [{"key": "k", "value": b"v"}, None]},
])
def test_a_row_the_log_refuses_appends_nothing(logdir: str, bad: dict[str, Any]) -> None:
    # the bad row is in another topic than the good one: nothing of either is appended
    with pytest.raises(InvalidConfigError):
        write(logdir, [GOOD, {"topic": "b", "value": b"bad", "partition": 0, **bad}])
    assert ends(logdir) == {"a": [0], "b": [0, 0]}


def test_null_header_values_and_null_timestamps_are_written(logdir: str) -> None:
    write(logdir, [GOOD, {"topic": "b", "value": b"v", "partition": 1,
                          "headers": [{"key": "k", "value": None}]}])
    assert ends(logdir) == {"a": [1], "b": [0, 1]}
    with embedlog.open(logdir, read_only=True) as log:
        (rec,) = log.read("b", 1, 0)
        assert list(rec.headers) == [("k", None)] and rec.timestamp > 0


def test_rows_with_and_without_a_partition_keep_their_order(logdir: str) -> None:
    with embedlog.open(logdir) as log:  # where the key partitioner puts key k
        home = log.append("b", b"probe", key=b"k").partition
        log.delete_records("b", home, 1)
    rows = [{"topic": "b", "key": b"k", "value": str(i).encode(),
             "partition": home if i % 3 == 1 else None} for i in range(7)]
    write(logdir, rows)
    with embedlog.open(logdir, read_only=True) as log:
        got = [r.value for r in log.read("b", home, 1)]
    assert got == [str(i).encode() for i in range(7)]
