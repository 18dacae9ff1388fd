"""Every value the Arrow export gives equals the record API's (``Log.read`` and the consumer,
the model): keys and values (None vs b""), headers (None values, duplicates), timestamps of
both types, offsets with the gaps of transaction markers, over every codec, segment
boundaries, column subsets and both isolation levels, with the compiled core and without."""

from __future__ import annotations

import contextlib
import datetime as dt
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

import embedlog
from embedlog import TopicPartition, UsageError
from embedlog.segment import _native
from helpers import run_txn_ops, txn_ops

UTC = dt.timezone.utc
CODECS = [None, "none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(params=["compiled", "pure"])
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The Arrow columns built by the compiled core's sink, or by the reference path."""
    if request.param == "pure":
        monkeypatch.setattr(_native, "CORE", None)
    elif _native.CORE is None:
        pytest.skip("the compiled core is not built")
    return str(request.param)


@contextlib.contextmanager
def scratch_log() -> Iterator[embedlog.Log]:
    """A new log per hypothesis example (a function-scoped tmp_path is shared by them)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-arrow-"))
    try:
        with embedlog.open(path / "log") as log:
            yield log
    finally:
        shutil.rmtree(path)


def model_rows(log: embedlog.Log, start: int, end: int) -> list[dict[str, Any]]:
    return [{
        "key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition,
        "offset": r.offset, "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
        "timestampType": r.timestamp_type,
        "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
    } for r in log.read("t", 0, start, end_offset=end)]


_RECORD = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=10)),
    st.lists(st.tuples(st.sampled_from(["a", "b", "é"]),
                       st.one_of(st.none(), st.binary(max_size=5))), max_size=3),
    st.integers(0, 2**41),
)
_BATCHES = st.lists(st.tuples(st.lists(_RECORD, min_size=1, max_size=20),
                              st.sampled_from(CODECS), st.booleans(), st.booleans()),
                    max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=_BATCHES, log_append=st.booleans(), start=st.integers(0, 80),
       end=st.integers(0, 90), batch_rows=st.integers(1, 50))
def test_export_equals_the_record_api(core: str, batches: list[Any], log_append: bool, start: int,
                                      end: int, batch_rows: int) -> None:
    with scratch_log() as log:
        log.create_topic("t", config={
            "segment.bytes": 2000,
            "message.timestamp.type": "LogAppendTime" if log_append else "CreateTime"})
        for records, codec, with_headers, roll in batches:
            log.append_batch("t", [r[0] for r in records], keys=[r[1] for r in records],
                             headers=[r[2] for r in records] if with_headers else None,
                             timestamps=[r[3] for r in records], partition=0,
                             compression=codec)
            if roll:
                log.roll("t", 0)
        start = min(start, log.end_offset("t", 0))
        end = max(start, min(end, log.end_offset("t", 0)))
        want = model_rows(log, start, end)
        got = log.read_table("t", start_offset=start, end_offset=end, include_headers=True,
                             batch_rows=batch_rows)
        assert got.to_pylist() == want
        for columns in (["value"], ["offset", "timestamp"], ["headers", "key"],
                        ["timestampType", "partition", "topic"]):
            part = log.read_table("t", start_offset=start, end_offset=end, columns=columns,
                                  batch_rows=batch_rows)
            assert part.to_pylist() == [{c: row[c] for c in columns} for row in want]


_TXN_OPS = txn_ops(max_size=20)


def _consumed(log: embedlog.Log, isolation_level: str, start: int) -> list[tuple[Any, ...]]:
    tp = TopicPartition("t", 0)
    with log.consumer(isolation_level=isolation_level) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[tuple[Any, ...]] = []
        while got := consumer.poll(0, max_records=1000):
            out += [(r.offset, r.key, r.value) for r in got]
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_TXN_OPS, where=st.floats(0, 1))
def test_transactional_compacted_export_equals_the_consumer(
        core: str, ops: list[tuple[Any, ...]], where: float) -> None:
    """Aborted records hidden, open transactions withheld, markers never shown, compaction's
    gaps kept: the rows a consumer of the same isolation level polls."""
    with scratch_log() as log:
        log.create_topic("t", config={"segment.bytes": 1024, "cleanup.policy": "compact,delete"})
        producers = {n: log.producer(transactional_id=n, compression=c)
                     for n, c in (("a", "gzip"), ("b", None))}
        for p in producers.values():
            p.init_transactions()
        run_txn_ops(log, ops, producers)
        lo, hi = log.start_offset("t", 0), log.end_offset("t", 0)
        start = lo + int((hi - lo) * where)
        for level in ("read_committed", "read_uncommitted"):
            table = log.read_table("t", isolation_level=level, start_offset=start, batch_rows=7)
            got = list(zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")),
                           strict=True))
            assert got == _consumed(log, level, start), level
        for p in producers.values():
            p.close()


@pytest.mark.parametrize("codec", CODECS)
def test_timestamps_beyond_arrow_microseconds_raise_instead_of_wrapping(
        core: str, log: embedlog.Log, codec: str | None) -> None:
    """Epoch milliseconds up to 2**63 - 1 are stored; Arrow's timestamp[us] holds them only
    up to (2**63 - 1) // 1000. The last one that fits is exact; one past it is refused with
    the record named (Spark's Kafka source refuses it too), never wrapped around."""
    log.create_topic("t")
    fits = (2**63 - 1) // 1000
    log.append_batch("t", [b"a", b"b"], timestamps=[0, fits], compression=codec)
    table = log.read_table("t", columns=["offset", "timestamp"])
    assert table.column("timestamp").cast("int64").to_pylist() == [0, fits * 1000]
    log.append_batch("t", [b"c", b"d"], timestamps=[5, fits + 1], compression=codec)
    with pytest.raises(UsageError, match=f"offset 3 of t-0 has timestamp {fits + 1}"):
        log.read_table("t", columns=["timestamp"])
    with pytest.raises(UsageError, match="offset 3"):
        log.read_table("t", start_offset=1, include_headers=True)
    # Without the timestamp column every record exports.
    assert log.read_table("t", columns=["offset", "value"]).column("value").to_pylist() == [
        b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize("ms", [1_714_564_800_123, 2_184_617_572_437, 2**41 + 7])
def test_datetime_bounds_are_exact_milliseconds(log: embedlog.Log, ms: int) -> None:
    """A datetime bound selects by the exact time (no float rounding, which loses a
    millisecond after 2038); one between two milliseconds starts and ends at the next one:
    records ``[ms - 1, ms, ms + 1]``, ``start_time``/``end_time`` at ``ms`` and ``ms + 0.5``."""
    log.create_topic("t")
    log.append_batch("t", [b"before", b"at", b"after"], timestamps=[ms - 1, ms, ms + 1])
    at = dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)
    half = at + dt.timedelta(microseconds=500)

    def values(**bounds: Any) -> list[bytes]:
        return log.read_table("t", columns=["value"], **bounds).column("value").to_pylist()

    assert values(start_time=at) == values(start_time=ms) == [b"at", b"after"]
    assert values(end_time=at) == values(end_time=ms) == [b"before"]
    assert values(start_time=half) == [b"after"]
    assert values(end_time=half) == [b"before", b"at"]
