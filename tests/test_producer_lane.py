"""The producer's fast lane (embedlog.producer_lane): the compiled lane against the pure one,
and the producer's records and bytes with the lane, with the pure lane and without any."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import producer_lane
from embedlog.errors import InvalidArgumentError, RecordTooLargeError, UnknownTopicError, UsageError
from embedlog.records import RecordMetadata

COMPILED = producer_lane._COMPILED
needs_core = pytest.mark.skipif(COMPILED is None, reason="the compiled lane is not built")
INT64 = 1 << 63

# --------------------------------------------------------------------------- lane vs lane

values = st.one_of(st.binary(max_size=40), st.none(), st.just(bytearray(b"ba")),
                   st.text(max_size=3), st.integers(-2, 2))
ints = st.one_of(st.integers(-5, 300), st.sampled_from([-INT64 - 1, -INT64, INT64 - 1, INT64,
                                                        1 << 70]))
stamps = st.one_of(ints, st.none(), st.booleans(), st.just(1.5))
OPS = st.one_of(
    st.tuples(st.just("attach"), ints, ints),
    st.tuples(st.just("attach_tuple"), ints, ints),
    st.tuples(st.just("attach_ticket"), ints, ints),
    st.tuples(st.just("arm"), ints, ints, ints, st.booleans(), ints),
    st.tuples(st.just("disarm")),
    st.tuples(st.just("add"), st.sampled_from(["t", "u"]), values, values, stamps),
    st.tuples(st.just("add"), st.just("t"), st.binary(max_size=40), st.binary(max_size=20),
              st.integers(0, 10**13)),
    st.tuples(st.just("join"), st.sampled_from(["t", "u"]), values, values, stamps),
    st.tuples(st.just("join"), st.just("t"), st.binary(max_size=40), st.binary(max_size=20),
              st.integers(0, 10**13)),
    st.tuples(st.just("push"), values, values, stamps, ints),
    st.tuples(st.just("tamper")),
)


class Columns:
    """One lane with the column lists it is attached to (``attach_ticket``: and a new ticket,
    the same object for every lane given the same ops)."""

    tickets: list[object] = []

    def __init__(self, lane: Any) -> None:
        self.lane = lane
        self.cols: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        self.attached = 0

    def apply(self, op: tuple[Any, ...]) -> object:
        """The op's result, or the type of the exception it raised."""
        name, *args = op
        try:
            if name in ("attach", "attach_tuple", "attach_ticket"):
                self.cols = ([], [], [])
                cols: tuple[Any, ...] = self.cols
                if name == "attach_tuple":
                    cols = (tuple(self.cols[0]), *self.cols[1:])
                if name == "attach_ticket":
                    self.attached += 1
                    while len(self.tickets) < self.attached:
                        self.tickets.append(object())
                    args.append(self.tickets[self.attached - 1])
                return self.lane.attach(*cols, *args)
            if name == "tamper":  # columns of different lengths: every append refuses
                self.cols[0].append(b"extra")
                return None
            return getattr(self.lane, name)(*args)
        except Exception as exc:  # the type is what is compared
            return type(exc)

    def state(self) -> object:
        return self.cols, self.lane.size, self.lane.armed


@needs_core
@settings(max_examples=400, deadline=None)
@given(st.lists(OPS, max_size=40), st.integers(0, 3))
def test_compiled_lane_matches_the_pure_lane(ops: list[tuple[Any, ...]], index: int) -> None:
    c = Columns(COMPILED.Lane(RecordMetadata, index, 32))
    py = Columns(producer_lane.PyLane(RecordMetadata, index, 32))
    for op in ops:
        got, want = c.apply(op), py.apply(op)
        assert got == want, op
        assert type(got) is type(want)
        assert c.state() == py.state(), op


@pytest.mark.parametrize("make", [producer_lane.PyLane] + ([COMPILED.Lane] if COMPILED else []))
def test_lane_add_takes_only_plain_records_that_fit(make: Callable[..., Any]) -> None:
    lane = make(RecordMetadata, 2, 32)
    cols: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
    assert lane.add("t", b"v", b"k", 5) is None  # not attached
    lane.attach(*cols, 100, 61)
    assert lane.add("t", b"v", b"k", 5) is None  # attached, not armed
    lane.arm(300, 3, 60, False, -1)
    meta = lane.add("t", b"vv", b"k", 5)
    assert type(meta) is RecordMetadata and meta == ("t", 2, 100, 5)
    assert lane.size == 61 + 35
    for value, key, ts in [(bytearray(b"v"), b"k", 5), (None, b"k", 5), (b"v", None, 5),
                           (b"v", "k", 5), (b"v", b"k", True), (b"v", b"k", -1),
                           (b"v", b"k", INT64), (b"v", b"k", None), (b"v", b"k" * 29, 5)]:
        assert lane.add("t", value, key, ts) is None  # the slow path checks (or writes) these
    assert cols == ([b"vv"], [b"k"], [5])
    assert lane.add("t", b"", b"", 6) == ("t", 2, 101, 6)
    assert lane.add("t", b"x" * 100, b"", 7) is None  # would reach 300 bytes: written first
    assert lane.push(b"x" * 100, None, 7, 132) == 2
    assert lane.add("t", b"", b"", 8) is None  # index 3 = last: the slow path writes it
    lane.disarm()
    assert lane.push(b"y", b"k", 9, 10) == 3 and lane.size == 61 + 35 + 32 + 132 + 10
    assert cols == ([b"vv", b"", b"x" * 100, b"y"], [b"k", b"", None, b"k"], [5, 6, 7, 9])
    lane.attach([], [], [], 0, 61)
    lane.arm(10**6, 100, 10**6, True, 777)
    assert lane.add("u", b"v", b"k", 5) == ("u", 2, 0, 777)  # LogAppendTime: the batch's stamp


@pytest.mark.parametrize("make", [producer_lane.PyLane] + ([COMPILED.Lane] if COMPILED else []))
def test_lane_join_gives_the_ticket_of_the_batch_the_record_joined(
        make: Callable[..., Any]) -> None:
    """``join`` is ``add`` with the ticket attached with the columns the record went into: a
    record of the next opening of the batch gets the next ticket; no ticket: None."""
    lane = make(RecordMetadata, 1, 32)
    first, second = object(), object()
    lane.attach([], [], [], 10, 61, first)
    assert lane.join("t", b"v", b"k", 5) is None  # not armed
    lane.arm(10**6, 100, 10**6, False, -1)
    assert lane.join("t", b"v", b"k", 5) == (("t", 1, 10, 5), first)
    assert lane.add("t", b"v", b"k", 6) == ("t", 1, 11, 6)
    joined = lane.join("t", b"w", b"k", 7)
    assert joined is not None and joined[1] is first and type(joined[0]) is RecordMetadata
    assert lane.join("t", b"w", None, 7) is None  # declined as add declines it
    lane.attach([], [], [], 13, 61, second)
    lane.arm(10**6, 100, 10**6, False, -1)
    assert lane.join("t", b"v", b"k", 8) == (("t", 1, 13, 8), second)
    lane.attach([], [], [], 14, 61)
    lane.arm(10**6, 100, 10**6, False, -1)
    assert lane.join("t", b"v", b"k", 9) == (("t", 1, 14, 9), None)
    with pytest.raises(TypeError):
        lane.attach([], [], [], 14, 61, None, None)


# --------------------------------------------------------------------------- the producer


@pytest.fixture(params=["compiled", "pure", "no-lane"])
def lane_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "compiled" and COMPILED is None:
        pytest.skip("the compiled lane is not built")
    if request.param == "pure":
        monkeypatch.setattr(producer_lane, "_COMPILED", None)
    yield request.param


def _producer(log: embedlog.Log, kind: str, **kw: Any) -> embedlog.Producer:
    producer = log.producer(linger_ms=60_000, **kw)
    if kind == "no-lane":
        producer._plain = False  # the serializer-aware path: no lane, every check in Python
        producer._set_trouble(False)
    return producer


def _workload(producer: embedlog.Producer) -> list[object]:
    """Sends that take every path: lane, slow path, headers mid-batch, errors, full batches."""
    out: list[object] = []
    for i in range(3000):
        kw: dict[str, Any] = {"timestamp": 1_000 + i, "partition": i % 2}
        if i % 97 == 5:
            kw["headers"] = [("h", b"%d" % i)]
        if i % 89 == 3:
            kw["partition"] = None
        value = None if i % 71 == 1 else b"value-%d" % i * (1 + i % 7)
        try:
            out.append(producer.send("t", value, key=b"k%d" % (i % 13), **kw))
        except (InvalidArgumentError, RecordTooLargeError, UnknownTopicError) as exc:
            out.append(type(exc))
        if i % 500 == 7:
            for bad in ({"value": "text"}, {"partition": 9}, {"value": b"x" * 3000},
                        {"timestamp": -5}, {"timestamp": True}):
                try:
                    producer.send("t", **{"value": b"v", "key": b"k", "partition": 0, **bad})
                    out.append("accepted")
                except UsageError as exc:
                    out.append((type(exc), str(exc)))
    return out


def _segment_bytes(log: embedlog.Log) -> list[bytes]:
    return [pathlib.Path(s.path).read_bytes() for p in (0, 1) for s in log.segments("t", p)]


def test_the_lane_changes_no_result_and_no_byte(tmp_path: pathlib.Path) -> None:
    """Compiled lane, pure lane and no lane give the same metadata, errors and files."""
    runs = []
    kinds = ["pure", "no-lane"] + (["compiled"] if COMPILED is not None else [])
    for kind in kinds:
        with pytest.MonkeyPatch.context() as mp:
            if kind == "pure":
                mp.setattr(producer_lane, "_COMPILED", None)
            with embedlog.open(tmp_path / kind) as log:
                log.create_topic("t", partitions=2, config={"max.message.bytes": 2048})
                with _producer(log, kind, batch_size=9_000, max_batch_records=150) as producer:
                    results = _workload(producer)
                runs.append((results, _segment_bytes(log)))
    assert all(run == runs[0] for run in runs[1:])
    results, files = runs[0]
    assert sum(type(r) is RecordMetadata for r in results) > 2900
    assert any(type(r) is tuple and r[0] is InvalidArgumentError for r in results)
    assert sum(len(f) for f in files) > 100_000


def test_lane_records_read_back_with_their_metadata(log: embedlog.Log, lane_kind: str) -> None:
    log.create_topic("t", partitions=2, config={"max.message.bytes": 2048})
    with _producer(log, lane_kind, batch_size=9_000, max_batch_records=150) as producer:
        results = _workload(producer)
    metas = [r for r in results if type(r) is RecordMetadata]
    got = {(r.partition, r.offset): r for p in (0, 1) for r in log.read("t", p)}
    assert len(got) == len(metas)
    for m in metas:
        assert got[(m.partition, m.offset)].timestamp == m.timestamp
    assert any(r.headers for r in got.values())


def test_threads_sharing_a_lane_get_distinct_offsets(log: embedlog.Log, lane_kind: str) -> None:
    log.create_topic("t")
    out: list[list[RecordMetadata]] = [[] for _ in range(4)]
    with log.producer(batch_size=4096, max_batch_records=50) as producer:
        if lane_kind == "no-lane":
            producer._lane = False

        def run(t: int) -> None:
            for i in range(3000):
                headers = [("t", b"%d" % t)] if i % 400 == 0 else None
                out[t].append(producer.send("t", b"%d-%d" % (t, i), key=b"k", partition=0,
                                            headers=headers))

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    stored = {r.offset: r.value for r in log.read("t", 0)}
    assert sorted(stored) == list(range(12000))
    for t, metas in enumerate(out):
        assert [stored[m.offset] for m in metas] == [b"%d-%d" % (t, i) for i in range(3000)]


def test_default_timestamps_read_the_clock_once_per_record(log_dir: pathlib.Path) -> None:
    ticks = iter(range(10**6, 10**7))
    calls: list[int] = []

    def clock() -> int:
        calls.append(next(ticks))
        return calls[-1]

    with embedlog.Log(log_dir, clock=clock) as log:
        log.create_topic("t")
        with log.producer() as producer:
            producer.send("t", b"first", key=b"k", partition=0, timestamp=1)
            before = len(calls)
            metas = [producer.send("t", b"v", key=b"k", partition=0) for _ in range(100)]
            assert len(calls) - before == 100  # the lane's reading serves the slow path too
            assert [m.timestamp for m in metas] == calls[before:]
        stamps = [r.timestamp for r in log.read("t", 0)][1:]
    assert stamps == [m.timestamp for m in metas]


def test_plain_sends_take_the_lane(log: embedlog.Log, lane_kind: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first record of each batch (and the one that fills it) goes the slow way."""
    log.create_topic("t")
    with _producer(log, lane_kind, max_batch_records=100) as producer:
        slow: list[int] = []
        send = producer._send

        def counting(*args: Any) -> RecordMetadata:
            slow.append(1)
            return send(*args)

        monkeypatch.setattr(producer, "_send", counting)
        metas = [producer.send("t", b"v", key=b"k", partition=0, timestamp=i)
                 for i in range(1000)]
    assert [m.offset for m in metas] == list(range(1000))
    assert len(slow) == (1000 if lane_kind == "no-lane" else 20)
    assert [r.timestamp for r in log.read("t", 0)] == list(range(1000))
