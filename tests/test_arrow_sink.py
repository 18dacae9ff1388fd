"""The Arrow export through the compiled core's sink (``_ccodec.ArrowSink``: stored batches
appended to the Arrow buffers in one pass) against the pure-Python path (decoded columns,
``records_to_batch``): identical tables, batch by batch, and identical errors on damaged
batches. Logs hold nulls, headers, compacted batches (offset gaps), control batches, every
codec and LogAppendTime; reads start and end inside batches, with small ``batch_rows``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

import embedlog
from embedlog.arrow import columns as arrow_columns
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression
from helpers import both_cores, codec_core

try:
    from embedlog.segment import _ccodec
except ImportError:  # pragma: no cover - the pure-only install
    pytest.skip("the compiled codec core is not built", allow_module_level=True)

T0 = 1_700_000_000_000
payload = st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=60, max_size=200))


_core = codec_core


def both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """(compiled outcome, pure outcome): the value, or ("raised", type, message)."""
    return both_cores(_ccodec, fn)


@st.composite
def stored_batch(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 12))
    kw: dict[str, Any] = {
        "keys": draw(st.none() | st.lists(payload, min_size=n, max_size=n)),
        "timestamps": [T0 + i for i in draw(st.lists(st.integers(0, 10**6), min_size=n,
                                                     max_size=n))],
        "compression": draw(st.sampled_from(list(Compression))),
    }
    if draw(st.integers(0, 3)) == 0:
        kw["headers"] = draw(st.lists(st.none() | st.lists(st.tuples(
            st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2),
            min_size=n, max_size=n))
    if draw(st.booleans()):  # compacted: gaps between offsets
        gaps = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
        kw["offset_deltas"] = [sum(gaps[:i]) for i in range(n)]
        kw["last_offset_delta"] = sum(gaps[: n - 1]) + draw(st.integers(0, 3))
    if draw(st.integers(0, 4)) == 0:
        kw["timestamp_type"] = 1
        kw["max_timestamp"] = T0 + 7
    values = draw(st.lists(payload, min_size=n, max_size=n))
    return fmt.encode_batch(values, **kw)


def _marker() -> bytes:
    key, value = fmt.control_record(fmt.CONTROL_ABORT)
    return fmt.encode_batch([value], keys=[key], timestamps=T0, producer_id=9,
                            producer_epoch=0, is_transactional=True, is_control=True)


def _fill(path: str, batches: list[bytes | None]) -> None:
    """A one-partition topic of ``batches`` (None: a control batch)."""
    with embedlog.open(path) as log:
        log.create_topic("t")
        for b in batches:
            log._append_encoded("t", 0, bytearray(_marker() if b is None else b))


def _read(path: str, **options: Any) -> Any:
    with embedlog.open(path, read_only=True) as log:
        out = list(log.read_arrow("t", **options))
    return [b.num_rows for b in out], [b.to_pylist() for b in out], out


@given(st.lists(st.none() | stored_batch(), min_size=1, max_size=8), st.integers(1, 40),
       st.integers(0, 60), st.integers(0, 80), st.booleans(), st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_tables_equal_the_pure_path(tmp_path_factory: pytest.TempPathFactory,
                                    batches: list[bytes | None], batch_rows: int, start: int,
                                    end: int, headers: bool, subset: bool) -> None:
    path = str(tmp_path_factory.mktemp("sink") / "log")
    _fill(path, batches)
    with embedlog.open(path, read_only=True) as log:
        last = log.end_offset("t", 0)
    options: dict[str, Any] = {"batch_rows": batch_rows, "include_headers": headers,
                               "start_offset": min(start, last), "end_offset": end}
    if subset:
        options["columns"] = ["value", "offset", "timestampType"]
    c, py = both(lambda: _read(path, **options))
    assert c[:2] == py[:2]
    if c[0] != "raised":
        assert all(x.equals(y) for x, y in zip(c[2], py[2], strict=True))


@given(st.lists(stored_batch(), min_size=1, max_size=4), st.integers(0, 3),
       st.integers(0, 10**6), st.binary(min_size=1, max_size=3))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_damaged_batches_raise_the_same_error(tmp_path_factory: pytest.TempPathFactory,
                                              batches: list[bytes], which: int, at: int,
                                              flips: bytes) -> None:
    """A records section damaged under a valid CRC (the CRC is recomputed): the same
    ``CorruptBatchError`` (or, when the damage still decodes, the same table) either way."""
    path = str(tmp_path_factory.mktemp("sink") / "log")
    _fill(path, list(batches))
    seg = os.path.join(path, "t-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    pos = 0
    for _ in range(which % len(batches)):
        pos += fmt.parse_header(data, pos).size
    size = fmt.parse_header(data, pos).size
    for i, x in enumerate(flips):
        data[pos + fmt.HEADER_SIZE + (at + 5 * i) % (size - fmt.HEADER_SIZE)] ^= x or 1
    data[pos + 17 : pos + 21] = crc32c.crc32c(bytes(data[pos + 21 : pos + size])).to_bytes(
        4, "big")
    with open(seg, "wb") as f:
        f.write(data)
    c, py = both(lambda: _read(path, batch_rows=5)[:2])
    assert c == py
    event("raised" if c[0] == "raised" else "read")


@given(st.lists(st.lists(st.none() | st.integers(0, 300), min_size=1, max_size=12), min_size=1,
                max_size=6),
       st.integers(1, 20), st.integers(1, 1500), st.integers(0, 5), st.integers(0, 80))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_row_and_byte_limits_split_the_same_way(tmp_path_factory: pytest.TempPathFactory,
                                                sizes: list[list[int | None]], batch_rows: int,
                                                max_bytes: int, start: int, end: int) -> None:
    """Arrow batches cut by ``batch_rows`` and ``max_bytes`` (a stored batch that does not fit
    goes through the decoder and is split) hold the same rows with the sink as without it."""
    path = str(tmp_path_factory.mktemp("sink") / "log")
    with embedlog.open(path) as log:
        log.create_topic("t")
        for batch in sizes:
            log.append_batch("t", [None if n is None else b"v" * n for n in batch],
                             keys=[b"k%d" % (n or 0) for n in batch])
    names = ("offset", "key", "value", "timestampType")

    def run() -> list[Any]:
        with embedlog.open(path, read_only=True) as log:
            last = log.end_offset("t", 0)
            lo = min(start, last)
            batcher = arrow_columns.ArrowBatcher("t", 0, names, _schema(names), batch_rows,
                                                 max_bytes)
            out = [b for header, found in log.decoded_batches("t", 0, lo, max(lo, end),
                                                               batcher.decode)
                   for b in batcher.take(header, found)]
            return [b.to_pylist() for b in out + list(batcher.flush())]

    c, py = both(run)
    assert c == py and "raised" not in c


def test_the_sink_is_used_and_skips_unasked_columns(log: embedlog.Log) -> None:
    """With the compiled core a batcher builds into a sink, with key/value buffers only for the
    columns asked for; the pure path has none."""
    names = ("offset", "value")
    log.create_topic("t")
    log.append_batch("t", [b"a", None, b"ccc"], keys=[b"k", b"l", None])
    with _core(_ccodec):
        batcher = arrow_columns.ArrowBatcher("t", 0, names, _schema(names), 10)
        assert batcher._sink is not None
        found = list(log.decoded_batches("t", 0, 0, 3, batcher.decode))
    assert [f for _, f in found] == [arrow_columns.APPENDED]
    rows, _, _, key, value = batcher._sink.sink.finish()
    assert rows == 3 and key is None and bytes(value[1]) == b"accc" and value[3] == 1
    with _core(None):
        assert arrow_columns.ArrowBatcher("t", 0, names, _schema(names), 10)._sink is None


def _schema(names: tuple[str, ...]) -> Any:
    from embedlog.arrow.schema import project
    return project(list(names))[1]


def test_a_fresh_process_reads_arrow_and_spark_tasks_without_importing_pandas(
        tmp_path: Any) -> None:
    """``pa.array`` of a numpy array and ``pa.repeat`` import pandas on their first call (0.3 s
    in each fresh Spark worker, most of a ``limit(1)`` query): the Arrow columns are built from
    their buffers instead."""
    import subprocess
    import sys

    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        log.append_batch("t", [b"v%d" % i for i in range(50)], keys=[b"k"] * 50, partition=0)
    code = (
        "import sys, embedlog\n"
        "from embedlog.spark.source import EmbedlogDataSource\n"
        "from embedlog.spark.schema import kafka_schema\n"
        f"path = {str(tmp_path / 'log')!r}\n"
        "with embedlog.open(path, read_only=True) as log:\n"
        "    table = log.read_arrow('t').read_all()\n"
        "reader = EmbedlogDataSource({'path': path, 'subscribe': 't'}).reader(kafka_schema())\n"
        "rows = sum(b.num_rows for task in reader.partitions() for b in reader.read(task))\n"
        "print(table.num_rows, rows, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["50", "50", "False"], out.stderr[-2000:]
