"""embedlog.fetcher: fetch states, filling from partitions, handing out, waiting.

Most tests run the fetcher over an in-memory partition that offers only what
:class:`embedlog._client_api.ClientPartition` promises, so they also pin that the fetcher
needs nothing else of a partition.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest

import embedlog
from embedlog import TopicPartition
from embedlog.errors import OffsetOutOfRangeError
from embedlog.fetcher import (
    EMPTY,
    Columns,
    Fetch,
    Fetcher,
    Iteration,
    OffsetAndTimestamp,
    concat,
    offsets_for_times,
    wait_for_records,
)
from embedlog.segment import format as fmt

TP = TopicPartition("t", 0)


class MemoryPartition:
    """Encoded batches in a list; ``batches`` behaves as Partition.batches does."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []
        self.start_offset = 0
        self.appended = threading.Condition()
        self.segments: list[object] = [object()]
        self.refreshes = 0
        self.fail_after: int | None = None  # raise after yielding this many batches

    @property
    def end_offset(self) -> int:
        return fmt.parse_header(self.raw[-1]).next_offset if self.raw else self.start_offset

    def add(self, values: list[bytes], **kwargs: Any) -> None:
        base = self.end_offset
        self.raw.append(fmt.encode_batch(values, timestamps=0, base_offset=base, **kwargs))

    def gap(self, n: int) -> None:
        """A batch whose records were compacted away: offsets advance, nothing to read."""
        base = self.end_offset
        self.raw.append(fmt.encode_batch([], timestamps=0, base_offset=base,
                                         last_offset_delta=n - 1))

    def marker(self, pid: int, kind: int) -> None:
        key, value = fmt.control_record(kind)
        self.add([value], keys=[key], producer_id=pid, producer_epoch=0,
                 is_transactional=True, is_control=True)

    def refresh(self) -> None:
        self.refreshes += 1

    def aborted_txns(self, start: int, end: int) -> None:
        return None  # no .txnindex: the fetcher decides by the markers it reads

    def last_stable_offset(self) -> int:
        return 2**63 - 1  # holds nothing back: the markers the fetcher reads decide

    def batches(self, start: int, end: int | None = None, *, control: bool = False
                ) -> Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]]:
        if not self.start_offset <= start <= self.end_offset:
            raise OffsetOutOfRangeError(f"{start} outside [{self.start_offset}, "
                                        f"{self.end_offset})")
        stop = self.end_offset if end is None else end
        for n, raw in enumerate(self.raw):
            if self.fail_after is not None and n >= self.fail_after:
                raise OSError("disk went away")
            h = fmt.parse_header(raw)
            if (h.last_offset < start or h.base_offset >= stop or not h.records_count
                    or (h.is_control and not control)):
                continue
            records = fmt.decode_records(raw, 0, h)
            offsets = records.offsets.tolist()
            lo = sum(o < start for o in offsets)
            hi = sum(o < stop for o in offsets)
            if hi > lo:
                yield h, records.slice(lo, hi)


def fetcher(*, committed: Mapping[TopicPartition, int] | None = None, read_only: bool = False,
            **kwargs: Any) -> Fetcher:
    log = SimpleNamespace(read_only=read_only, path="/nonexistent/log")  # never armed here
    options: dict[str, Any] = {"isolation_level": "read_uncommitted",
                               "auto_offset_reset": "earliest"}
    options.update(kwargs)
    return Fetcher(log, committed=lambda: dict(committed or {}),  # type: ignore[arg-type]
                   **options)


def take(fr: Fetcher, f: Fetch, limit: int = 100) -> list[tuple[int, Any]]:
    out, err = fr.collect([f], limit, None)
    assert err is None
    return [(r.offset, r.value) for r in out]


def test_fill_skips_control_batches_and_gaps_and_moves_past_them() -> None:
    p = MemoryPartition()
    p.add([b"a", b"b"])  # 0, 1
    p.gap(3)  # 2..4
    p.marker(9, fmt.CONTROL_COMMIT)  # 5
    p.add([b"c"])  # 6
    p.marker(9, fmt.CONTROL_COMMIT)  # 7
    fr = fetcher()
    f = Fetch(TP, p)
    assert take(fr, f) == [(0, b"a"), (1, b"b"), (6, b"c")]
    assert f.position == f.fetched == f.stop == 8
    assert take(fr, f) == []
    p.add([b"d"])
    assert take(fr, f, limit=1) == [(8, b"d")] and f.position == 9


def test_first_position_is_the_committed_offset_else_the_reset_policy() -> None:
    p = MemoryPartition()
    p.add([b"a", b"b", b"c"])
    f = Fetch(TP, p)
    fetcher(committed={TP: 2}).init_positions([f])
    assert f.position == 2
    f = Fetch(TP, p)
    fetcher(auto_offset_reset="latest").init_positions([f])
    assert f.position == 3
    with pytest.raises(OffsetOutOfRangeError, match="no committed offset"):
        fetcher(auto_offset_reset="none").init_positions([Fetch(TP, p)])


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_positions_outside_the_log_are_reset(policy: str) -> None:
    p = MemoryPartition()
    p.add([b"a", b"b", b"c", b"d"])
    p.start_offset = 2  # retention deleted 0 and 1
    fr = fetcher(auto_offset_reset=policy, read_only=True)
    expected = [(2, b"c"), (3, b"d")] if policy == "earliest" else []
    for outside in (0, 10):  # below the log start, beyond the log end
        f = Fetch(TP, p)
        f.move_to(outside)
        assert take(fr, f) == expected
        assert f.position == 4
    assert p.refreshes > 0  # a read-only view re-reads the partition before trusting its end
    for outside, why in ((0, "below the log start"), (10, "beyond the log end 4")):
        g = Fetch(TP, p)
        g.move_to(outside)
        with pytest.raises(OffsetOutOfRangeError, match=why):
            fetcher(auto_offset_reset="none").fill(g)


def test_read_committed_fill_stops_at_the_last_stable_offset() -> None:
    p = MemoryPartition()
    txn = {"producer_epoch": 0, "is_transactional": True}
    p.add([b"plain"])  # 0
    p.add([b"a1", b"a2"], producer_id=1, **txn)  # 1, 2
    p.add([b"b1"], producer_id=2, **txn)  # 3
    p.marker(2, fmt.CONTROL_ABORT)  # 4
    p.add([b"c1"], producer_id=3, **txn)  # 5: open
    p.marker(1, fmt.CONTROL_COMMIT)  # 6
    p.add([b"after"])  # 7
    seen: list[bytes] = []

    def deserialize(v: bytes) -> bytes:
        seen.append(v)
        return v.upper()

    fr = fetcher(isolation_level="read_committed", value_deserializer=deserialize)
    f = Fetch(TP, p)
    assert take(fr, f) == [(0, b"PLAIN"), (1, b"A1"), (2, b"A2")]
    assert f.position == f.fetched == 5 and f.stop == 8
    assert b"b1" not in seen  # aborted records are never deserialized
    p.marker(3, fmt.CONTROL_COMMIT)  # 8
    assert take(fr, f) == [(5, b"C1"), (7, b"AFTER")]
    assert f.position == 9


def test_collect_rotates_the_first_partition_and_defers_late_errors() -> None:
    parts = [MemoryPartition() for _ in range(3)]
    for i, p in enumerate(parts):
        p.add([b"%d-0" % i, b"%d-1" % i])
    fr = fetcher()
    fetches = [Fetch(TopicPartition("t", i), p) for i, p in enumerate(parts)]
    firsts = [fr.collect(fetches, 1, None)[0][0].partition for _ in range(3)]
    assert firsts == [0, 1, 2]
    assert [f.position for f in fetches] == [1, 1, 1]
    parts[2].fail_after = 0
    fetches[2].move_to(1)
    out, err = fr.collect(fetches, 10, None)  # starts at partition 0 again
    assert [(r.partition, r.offset) for r in out] == [(0, 1), (1, 1)]
    assert isinstance(err, OSError)
    fetches[2].move_to(1)
    with pytest.raises(OSError):
        fr.collect([fetches[2]], 10, None)  # nothing taken: raised at once


def test_a_read_error_is_raised_again_and_skips_nothing() -> None:
    p = MemoryPartition()
    p.add([b"a"])
    p.add([b"b"])
    fr = fetcher()
    f = Fetch(TP, p)
    assert take(fr, f, limit=1) == [(0, b"a")]
    p.fail_after = 1  # the second batch cannot be read (a damaged or vanished file)
    for _ in range(2):
        with pytest.raises(OSError):
            fr.collect([f], 10, None)
        assert f.position == 1
    p.fail_after = None
    assert take(fr, f) == [(1, b"b")]


def test_runs_leave_positions_to_the_iteration_which_can_be_abandoned() -> None:
    p = MemoryPartition()
    p.add([b"a", b"b", b"c"])
    p.gap(2)
    fr = fetcher()
    f = Fetch(TP, p)
    f.move_to(0)
    runs: list[tuple[Fetch, list[embedlog.Record]]] = []
    fr.collect([f], 10, runs)
    assert f.position == 0 and [r.offset for r in runs[0][1]] == [0, 1, 2]
    it = Iteration()
    gen = it.hand_out(runs)
    assert next(gen).offset == 0 and next(gen).offset == 1
    it.settle({TP: f})
    assert f.position == 2
    it.abandon({TP: f})
    assert f.position == f.fetched == 2 and f.cols is EMPTY and runs[0][1] == []
    assert list(gen) == []  # the abandoned run is empty
    runs = []
    fr.collect([f], 10, runs)
    assert [r.offset for r in Iteration().hand_out(runs)] == [2]
    assert f.position == 5  # past the trailing gap once the run is through


def test_columns_slices_and_concat_fills_missing_headers() -> None:
    a = Columns([0, 1], [5, 6], [0, 0], [None, b"k"], [b"x", b"y"], None)
    b = Columns([2], [7], [1], [b"k2"], [b"z"], [(("h", b"v"),)])
    c = concat([a, b])
    assert c.n == 3 and c.headers == [(), (), (("h", b"v"),)]
    records = c.records(TP, 1, 10)
    assert [(r.offset, r.key, r.timestamp_type, r.headers) for r in records] == [
        (1, b"k", 0, ()), (2, b"k2", 1, (("h", b"v"),))]
    assert concat([a]) is a and EMPTY.records(TP, 0, 5) == []


def test_wait_returns_without_blocking_when_there_is_nothing_to_wait_for() -> None:
    p = MemoryPartition()
    f = Fetch(TP, p)
    stop = threading.Event()
    p.add([b"a"])
    wait_for_records([f], 60.0, stop, read_only=False)  # end 1 > f.stop 0
    f.stop = 1
    p.segments = []
    wait_for_records([f], 60.0, stop, read_only=False)  # closed partition
    p.segments = [object()]
    stop.set()
    wait_for_records([f], 60.0, stop, read_only=False)
    wait_for_records([f], 60.0, stop, read_only=True)


def test_wait_wakes_on_an_append_in_this_process() -> None:
    p = MemoryPartition()
    f = Fetch(TP, p)
    woke = threading.Event()

    def waiter() -> None:
        wait_for_records([f], 60.0, threading.Event(), read_only=False)
        woke.set()

    t = threading.Thread(target=waiter)
    with p.appended:
        t.start()
        p.appended.wait(0.2)  # let the waiter block (it needs the lock to start waiting)
        p.add([b"a"])
        p.appended.notify_all()
    t.join(60)
    assert woke.is_set()


def test_offsets_for_times(log: embedlog.Log) -> None:
    log.create_topic("t", partitions=2)
    for i in range(3):
        log.append("t", b"v", partition=0, timestamp=100 * i)
    assert offsets_for_times(log, {("t", 0): 500}) == {TP: None}  # type: ignore[dict-item]
    assert offsets_for_times(log, {TP: 150}) == {TP: OffsetAndTimestamp(2, 200)}
    assert offsets_for_times(log, {TopicPartition("t", 1): 0}) == {TopicPartition("t", 1): None}
