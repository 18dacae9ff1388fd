"""Logs as Arrow: ``Log.read_arrow`` / ``read_table`` against the record API, the Spark
schema, projections, offset and time ranges, isolation, bounded batches and Kafka folders."""

from __future__ import annotations

import datetime as dt
import pathlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

import pyarrow as pa

import embedlog
from embedlog import OffsetOutOfRangeError, UnknownTopicError, UsageError
from embedlog.arrow import DEFAULT_COLUMNS, columns, kafka_arrow_schema, read_arrow
from embedlog.arrow.schema import project
from embedlog.errors import InvalidArgumentError, InvalidConfigError
from embedlog.segment import _native
from embedlog.segment import format as fmt

UTC = dt.timezone.utc
T0 = 1_700_000_000_000


def fill(log: embedlog.Log, topic: str = "t", partitions: int = 3, n: int = 600,
         **config: Any) -> None:
    """``n`` records per partition: nulls, headers, a few batches each, ascending times."""
    log.create_topic(topic, partitions=partitions, config=config or None)
    for p in range(partitions):
        for lo in range(0, n, 200):
            idx = range(lo, min(lo + 200, n))
            log.append_batch(
                topic,
                [None if i % 7 == 3 else f"{p}:{i}".encode() * (i % 5) for i in idx],
                keys=[None if i % 4 == 1 else f"k{i}".encode() for i in idx],
                headers=[[("h", f"{i}".encode()), ("n", None)] if i % 6 == 0 else None
                         for i in idx],
                timestamps=[T0 + 10 * i for i in idx],
                partition=p,
                compression="lz4" if p == 1 else None,
            )


def expected_rows(log: embedlog.Log, topic: str, partitions: list[int], start: int = 0,
                  end: int | None = None) -> list[dict[str, Any]]:
    rows = []
    for p in partitions:
        for r in log.read(topic, p, max(start, log.start_offset(topic, p)), end_offset=end):
            rows.append({
                "key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition,
                "offset": r.offset,
                "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
                "timestampType": r.timestamp_type,
                "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
            })
    return rows


def test_table_matches_the_record_api(log: embedlog.Log) -> None:
    fill(log)
    table = log.read_table("t", include_headers=True)
    assert table.schema.equals(kafka_arrow_schema(include_headers=True))
    assert table.num_rows == 1800
    assert table.to_pylist() == expected_rows(log, "t", [0, 1, 2])
    plain = log.read_table("t")
    assert plain.column_names == list(DEFAULT_COLUMNS)
    assert plain.to_pylist() == [{k: v for k, v in row.items() if k != "headers"}
                                 for row in expected_rows(log, "t", [0, 1, 2])]


def test_schema_is_spark_kafka_sources() -> None:
    pytest.importorskip("pyspark")
    from embedlog.spark.schema import arrow_schema, kafka_schema

    for headers in (False, True):
        assert kafka_arrow_schema(headers).equals(arrow_schema(kafka_schema(headers)))


def test_projection_builds_only_what_is_asked(log: embedlog.Log) -> None:
    fill(log, partitions=1, n=50)
    table = log.read_table("t", columns=["offset", "headers", "partition"])
    assert table.column_names == ["offset", "headers", "partition"]
    assert table.column("offset").to_pylist() == list(range(50))
    assert table.column("headers").null_count == 50 - len(range(0, 50, 6))
    for bad in (["offset", "nope"], ["offset", "offset"], []):
        with pytest.raises(UsageError):
            log.read_arrow("t", columns=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, None.__class__, b"value", [["offset"]], ["offset", 5],
                                 [{"offset": 1}]], ids=repr)
def test_columns_of_another_type_are_an_argument_error(log: embedlog.Log, bad: Any) -> None:
    fill(log, partitions=1, n=5)
    with pytest.raises(InvalidArgumentError, match="columns"):
        log.read_table("t", columns=bad)
    assert log.read_table("t", columns="offset").column_names == ["offset"]


def test_offset_ranges_per_partition_and_for_all(log: embedlog.Log) -> None:
    fill(log)
    one = log.read_table("t", partitions=[1], start_offset=100, end_offset=150)
    assert one.column("offset").to_pylist() == list(range(100, 150))
    assert set(one.column("partition").to_pylist()) == {1}
    table = log.read_table("t", start_offset={("t", 0): 590, ("t", 2): 0},
                           end_offset={("t", 2): 3}, columns=["partition", "offset"])
    assert table.to_pylist() == (
        [{"partition": 0, "offset": o} for o in range(590, 600)]
        + [{"partition": 1, "offset": o} for o in range(600)]
        + [{"partition": 2, "offset": o} for o in range(3)])
    assert log.read_table("t", end_offset=10**9, columns=["offset"]).num_rows == 1800
    assert log.read_table("t", start_offset=600).num_rows == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read_arrow("t", start_offset=601)
    log.delete_records("t", 0, before_offset=10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_arrow("t", partitions=0, start_offset=5)
    assert log.read_table("t", partitions=0).column("offset")[0].as_py() == 10


def test_time_ranges(log: embedlog.Log) -> None:
    fill(log, partitions=2)
    table = log.read_table("t", start_time=T0 + 1000, end_time=T0 + 2000, columns=["offset"])
    assert table.column("offset").to_pylist() == list(range(100, 200)) * 2
    aware = dt.datetime.fromtimestamp((T0 + 5990) / 1000, tz=UTC)
    assert log.read_table("t", start_time=aware, columns=["offset"]).num_rows == 2
    assert log.read_table("t", start_time=T0 + 10**9).num_rows == 0
    assert log.read_table("t", end_time=T0 + 10**9).num_rows == 1200
    with pytest.raises(UsageError):
        log.read_arrow("t", start_time=dt.datetime(2024, 1, 1))  # naive


def test_topics_selection_and_errors(log: embedlog.Log) -> None:
    fill(log, "a", partitions=1, n=5)
    fill(log, "b", partitions=2, n=5)
    assert log.read_table(columns=["topic"]).column("topic").to_pylist() == ["a"] * 5 + ["b"] * 10
    assert log.read_table(["b"], columns=["topic"]).num_rows == 10
    with pytest.raises(UnknownTopicError):
        log.read_arrow("nope")
    with pytest.raises(UsageError):
        log.read_arrow("b", partitions=[2])
    with pytest.raises(UsageError):
        log.read_arrow([])
    with pytest.raises(InvalidConfigError):
        log.read_arrow("a", isolation_level="serializable")
    with pytest.raises(InvalidConfigError):
        log.read_arrow("a", batch_rows=0)


def test_streams_bounded_batches_over_a_fixed_plan(log: embedlog.Log) -> None:
    fill(log, partitions=2, n=1000)
    reader = log.read_arrow("t", batch_rows=128, columns=["partition", "offset"])
    log.append("t", b"late", partition=0)  # after the plan: not read
    sizes, offsets = [], []
    for batch in reader:
        assert batch.num_rows <= 128 and len(set(batch.column(0).to_pylist())) == 1
        sizes.append(batch.num_rows)
        offsets += batch.column(1).to_pylist()
    assert sum(sizes) == 2000 and offsets == list(range(1000)) * 2


def txn_log(log: embedlog.Log) -> None:
    """Offsets: 0 plain, 1 A (pid 1), 2 B (pid 2), 3 A, 4 COMMIT 1, 5 ABORT 2, 6 C (pid 3,
    open), 7 plain."""
    log.create_topic("t")

    def batch(value: bytes, **kw: Any) -> None:
        log._append_encoded("t", 0, bytearray(fmt.encode_batch([value], timestamps=T0, **kw)))

    def marker(pid: int, kind: int) -> None:
        key, value = fmt.control_record(kind)
        log._append_encoded("t", 0, bytearray(fmt.encode_batch(
            [value], keys=[key], timestamps=T0, producer_id=pid, producer_epoch=0,
            is_transactional=True, is_control=True)))

    txn = {"producer_epoch": 0, "is_transactional": True}
    batch(b"plain-1")
    batch(b"A1", producer_id=1, base_sequence=0, **txn)
    batch(b"B1", producer_id=2, base_sequence=0, **txn)
    batch(b"A2", producer_id=1, base_sequence=1, **txn)
    marker(1, fmt.CONTROL_COMMIT)
    marker(2, fmt.CONTROL_ABORT)
    batch(b"C1", producer_id=3, base_sequence=0, **txn)
    batch(b"plain-2")


def values(table: Any) -> list[bytes]:
    return [v for v in table.column("value").to_pylist()]


def test_isolation_levels(log: embedlog.Log) -> None:
    txn_log(log)
    assert values(log.read_table("t")) == [b"plain-1", b"A1", b"B1", b"A2", b"C1", b"plain-2"]
    committed = log.read_table("t", isolation_level="read_committed")
    assert values(committed) == [b"plain-1", b"A1", b"A2"]
    # The end cuts records, but a marker after the end still decides a transaction.
    cut = log.read_table("t", isolation_level="read_committed", end_offset=2)
    assert values(cut) == [b"plain-1", b"A1"]
    assert values(log.read_table("t", isolation_level="read_committed", start_offset=3)) == [
        b"A2"]


def test_read_only_view_and_kafka_broker_folder(log_dir: pathlib.Path,
                                                kafka_fixtures: pathlib.Path) -> None:
    with embedlog.open(log_dir) as writer:
        fill(writer, partitions=1, n=20)
        with embedlog.open(log_dir, read_only=True) as reader:
            assert reader.read_table("t").num_rows == 20
    total = 0
    for name in ("kafka30-multipartition", "kafka27-compacted-multiseg", "cp512-connect-lz4"):
        with embedlog.open(kafka_fixtures / name, read_only=True) as kafka:
            for topic in kafka.topics():
                parts = list(range(kafka.partition_count(topic)))
                table = read_arrow(kafka, topic, include_headers=True).read_all()
                assert table.to_pylist() == expected_rows(kafka, topic, parts)
                total += table.num_rows
    assert total > 300


# -- embedlog consume --format csv|jsonl|parquet|arrow -------------------------------------------


def test_cli_exports(log_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import csv
    import io
    import json

    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from embedlog.cli import cli

    with embedlog.open(log_dir) as log:
        fill(log, partitions=2, n=40)
        log.append("t", b"\xff\x00", key=b"bin", partition=0)
        expected = log.read_table("t", include_headers=True)
    runner = CliRunner(env={"EMBEDLOG_DIR": str(log_dir)})

    def run(*args: str) -> Any:
        result = runner.invoke(cli, ["consume", "t", *args], prog_name="embedlog")
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    for kind, read in (("parquet", pq.read_table),
                       ("arrow", lambda p: pa.ipc.open_file(p).read_all())):
        out = tmp_path / f"t.{kind}"
        assert "Processed a total of 81 messages" in run("--format", kind, "-o", str(out)).stderr
        assert read(out).equals(expected)
    run("--format", "parquet", "-o", str(tmp_path / "p.parquet"), "--partition", "1",
        "--offset", "30", "--max-messages", "5")
    assert pq.read_table(tmp_path / "p.parquet").column("offset").to_pylist() == list(
        range(30, 35))
    rows = list(csv.DictReader(io.StringIO(run("--format", "csv").stdout)))
    assert len(rows) == 81
    binary = next(r for r in rows if r["key"] == "bin")
    assert json.loads(binary["value"]) == {"base64": "/wA="} and binary["headers"] == ""
    first = next(r for r in rows if r["partition"] == "0" and r["offset"] == "0")
    assert first["key"] == "k0" and first["value"] == "" and json.loads(first["headers"]) == [
        ["h", "0"], ["n", None]]
    jsonl = tmp_path / "t.jsonl"
    run("--format", "jsonl", "--output", str(jsonl))
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert len(lines) == 81 and lines[0]["topic"] == "t"
    for bad in (["--format", "parquet"], ["--format", "arrow", "-o", "x", "--follow"]):
        result = runner.invoke(cli, ["consume", "t", *bad])
        assert result.exit_code == 2 and "needs --output" in result.output


@pytest.mark.skipif(_native.CORE is None, reason="the compiled core is not built")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.binary(max_size=12)), max_size=30), min_size=1,
                max_size=6),
       st.integers(0, 3))
def test_compiled_gather_equals_the_reference_binary_column(
        chunks: list[list[bytes | None]], gap: int) -> None:
    """Key/value columns built by the compiled core's gather are the arrays the pure path
    builds: same items, same nulls, over several chunks with gaps between items."""
    batches = []
    for items in chunks:
        data, pos, lens = b"", [], []
        for item in items:
            data += b"\xee" * gap
            pos.append(len(data))
            lens.append(-1 if item is None else len(item))
            data += item or b""
        col = (np.array(pos, dtype=np.int64), np.array(lens, dtype=np.int32))
        batches.append((0, SimpleNamespace(buffer=data, key_positions=col[0], key_lengths=col[1],
                                           value_positions=col[0], value_lengths=col[1])))
    compiled = columns._binary_column(batches, "value", columns._Joined(batches))
    saved, _native.CORE = _native.CORE, None
    try:
        reference = columns._binary_column(batches, "value", columns._Joined(batches))
    finally:
        _native.CORE = saved
    assert compiled.equals(reference)
    assert compiled.to_pylist() == [item for items in chunks for item in items]


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.lists(st.one_of(st.none(), st.integers(0, 300)), min_size=1,
                               max_size=12), min_size=1, max_size=8),
       batch_rows=st.integers(1, 20), max_bytes=st.integers(1, 1500))
def test_arrow_batches_respect_rows_and_bytes(tmp_path_factory: pytest.TempPathFactory,
                                              sizes: list[list[int | None]], batch_rows: int,
                                              max_bytes: int) -> None:
    """Every Arrow batch holds at most ``batch_rows`` rows and ``max_bytes`` of keys and values
    (unless one record alone is larger), is full when another follows, and all rows come out in
    order."""
    path = tmp_path_factory.mktemp("batcher") / "log"
    with embedlog.open(path) as log:
        log.create_topic("t")
        for batch in sizes:
            log.append_batch("t", [None if n is None else b"v" * n for n in batch])
        kafka = list(log.read_batches("t", 0))
        names, schema = project(["offset", "value"])
        batcher = columns.ArrowBatcher("t", 0, names, schema, batch_rows, max_bytes)
        out = [b for r in kafka for b in batcher.add(r.timestamp_type, r)]
        out += list(batcher.flush())
    rows = [row for b in out for row in b.to_pylist()]
    flat = [n for batch in sizes for n in batch]
    assert [r["offset"] for r in rows] == list(range(len(flat)))
    assert [None if r["value"] is None else len(r["value"]) for r in rows] == flat
    for i, b in enumerate(out):
        item_bytes = sum(len(v or b"") for v in b.column("value").to_pylist())
        assert 0 < b.num_rows <= batch_rows
        assert item_bytes <= max_bytes or b.num_rows == 1
        if i + 1 < len(out):  # full: the rows, or the bytes with the next record
            nxt = out[i + 1].column("value")[0].as_py() or b""
            assert b.num_rows == batch_rows or item_bytes + len(nxt) > max_bytes \
                or item_bytes >= max_bytes
