"""RecordBatch -> Arrow conversion, checked against the batch's own row accessors
(no Spark session needed)."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa

from embedlog._batch import record_batch
from embedlog.arrow.columns import ArrowBatcher
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression
from embedlog.spark.schema import arrow_schema, kafka_schema, resolve_columns


def _decoded(n: int, *, base: int = 0, compression: int = Compression.NONE,
             with_headers: bool = True, timestamp_type: int = 0):  # type: ignore[no-untyped-def]
    values = [None if i % 5 == 4 else bytes([i % 251]) * (i % 17) for i in range(n)]
    keys = [None if i % 3 == 0 else f"k{i}".encode() for i in range(n)]
    headers = [[("a", b"1"), ("b", None)] if with_headers and i % 4 == 0 else None
               for i in range(n)]
    stamps = [1_700_000_000_000 + 7 * i for i in range(n)]
    batch = fmt.encode_batch(values, keys=keys, headers=headers, timestamps=stamps,
                             base_offset=base, compression=compression,
                             timestamp_type=timestamp_type,
                             max_timestamp=stamps[-1] + 1 if timestamp_type else None)
    header = fmt.parse_header(batch, 0)
    return header, record_batch("t", 0, header, fmt.decode_records(batch, 0, header))


def _expected(header, records, topic: str, partition: int):  # type: ignore[no-untyped-def]
    return [
        {
            "key": records.key(i),
            "value": records.value(i),
            "topic": topic,
            "partition": partition,
            "offset": int(records.offsets[i]),
            "timestamp": dt.datetime.fromtimestamp(int(records.timestamps[i]) / 1000,
                                                   tz=dt.timezone.utc),
            "timestampType": header.timestamp_type,
            "headers": [{"key": k, "value": v} for k, v in records.header(i)] or None,
        }
        for i in range(len(records))
    ]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4])
def test_batches_match_row_accessors(compression: int) -> None:
    schema = kafka_schema(include_headers=True)
    target = arrow_schema(schema)
    chunks = [_decoded(700, base=0, compression=compression),
              _decoded(300, base=700, with_headers=False, timestamp_type=1),
              _decoded(1, base=1000)]
    batcher = ArrowBatcher("t", 3, resolve_columns(schema), target, batch_rows=256)
    out = [b for h, r in chunks for b in batcher.add(h.timestamp_type, r)]
    out += list(batcher.flush())
    assert all(b.schema.equals(target) for b in out)
    assert [b.num_rows for b in out] == [256, 256, 256, 233]  # batches span Kafka batches
    got = pa.Table.from_batches(out).to_pylist()
    expected = [row for h, r in chunks for row in _expected(h, r, "t", 3)]
    assert got == expected


def test_subset_schema_builds_only_requested_columns() -> None:
    full = kafka_schema()
    subset = type(full)([full["offset"], full["timestamp"], full["partition"]])
    header, records = _decoded(50)
    batcher = ArrowBatcher("t", 0, resolve_columns(subset), arrow_schema(subset), 1000)
    batches = list(batcher.add(header.timestamp_type, records)) + list(batcher.flush())
    assert len(batches) == 1
    assert batches[0].schema.names == ["offset", "timestamp", "partition"]
    assert batches[0].column(0).to_pylist() == list(range(50))


def test_slice_records_keeps_rows_aligned() -> None:
    _, records = _decoded(20)
    part = records.slice(5, 9)
    assert len(part) == 4
    assert [part.value(i) for i in range(4)] == [records.value(i) for i in range(5, 9)]
    assert [part.header(i) for i in range(4)] == [records.header(i) for i in range(5, 9)]


def test_batches_are_bounded_by_bytes_too() -> None:
    schema = kafka_schema()
    header, records = _decoded(400)  # values of 0..16 bytes, keys of 2..4 bytes
    batcher = ArrowBatcher("t", 0, resolve_columns(schema), arrow_schema(schema),
                           batch_rows=10_000, max_bytes=1000)
    out = list(batcher.add(header.timestamp_type, records)) + list(batcher.flush())
    sizes = [sum(len(v or b"") + len(k or b"") for k, v in zip(b.column(0).to_pylist(),
                                                               b.column(1).to_pylist(),
                                                               strict=True)) for b in out]
    assert len(out) > 3 and max(sizes) <= 1000
    assert sum(b.num_rows for b in out) == 400


def test_user_schema_checks() -> None:
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    from embedlog.errors import InvalidConfigError

    ok = StructType([StructField("Offset", kafka_schema()["offset"].dataType),
                     StructField("TOPIC", StringType())])
    assert resolve_columns(ok) == ("offset", "topic")
    assert arrow_schema(ok).names == ["Offset", "TOPIC"]  # Spark's names, our meaning
    for bad, message in [
        (StructType([StructField("nope", IntegerType())]), "unknown column 'nope'"),
        (StructType([StructField("offset", IntegerType())]), "must be bigint"),
        (StructType([StructField("topic", StringType()), StructField("Topic", StringType())]),
         "twice"),
    ]:
        with pytest.raises(InvalidConfigError, match=message):
            resolve_columns(bad)
