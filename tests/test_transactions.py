"""embedlog.transactions: open transactions, aborted ranges, the last stable offset.

The property tests write random runs of data, COMMIT and ABORT batches of a few producers and
compare what the storage-side rules (and a read_committed consumer) make of them with a
direct model: a transactional batch waits for its producer's next marker, which decides it;
a reader shows the decided batches that were committed (or never transactional) up to the
first undecided one.
"""

from __future__ import annotations

import pathlib
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition
from embedlog.segment import format as fmt
from embedlog.transactions import (
    AbortedRanges,
    AbortedTxn,
    TxnTracker,
    aborted_ranges,
    control_type,
    marker_type,
)
from helpers import small_segments

TP0 = TopicPartition("t", 0)
COMMIT, ABORT = fmt.CONTROL_COMMIT, fmt.CONTROL_ABORT


@dataclass(frozen=True)
class Op:
    """One batch: data of ``pid`` (``-1``: no producer id), or a marker of ``pid``."""

    pid: int
    txn: bool = False
    marker: int | None = None
    size: int = 1


def encode(op: Op, base: int) -> bytes:
    if op.marker is not None:
        key, value = fmt.control_record(op.marker)
        return fmt.encode_batch([value], keys=[key], timestamps=0, base_offset=base,
                                producer_id=op.pid, producer_epoch=0,
                                is_transactional=True, is_control=True)
    values = [b"%d" % (base + i) for i in range(op.size)]
    ids = {} if op.pid < 0 else {"producer_id": op.pid, "producer_epoch": 0}
    return fmt.encode_batch(values, timestamps=0, base_offset=base, is_transactional=op.txn,
                            **ids)  # type: ignore[arg-type]


def layout(ops: list[Op]) -> list[tuple[Op, fmt.BatchHeader]]:
    out, base = [], 0
    for op in ops:
        header = fmt.parse_header(encode(op, base))
        out.append((op, header))
        base = header.next_offset
    return out


def model(ops: list[Op]) -> tuple[list[int], int]:
    """Offsets a read_committed reader shows, and where it stops (LSO, else the end)."""
    decided: list[bool | None] = []  # per batch: shown, dropped, or still undecided
    firsts: list[int] = []
    waiting: dict[int, list[int]] = {}
    for op, header in layout(ops):
        if op.marker is not None:
            for i in waiting.pop(op.pid, []):
                decided[i] = op.marker == COMMIT
            continue
        firsts.append(header.base_offset)
        if op.txn and op.pid >= 0:
            waiting.setdefault(op.pid, []).append(len(decided))
            decided.append(None)
        else:
            decided.append(True)
    end = sum(op.size for op in ops)
    shown: list[int] = []
    for i, d in enumerate(decided):
        if d is None:
            return shown, firsts[i]
        if d:
            size = [op for op in ops if op.marker is None][i].size
            shown += range(firsts[i], firsts[i] + size)
    return shown, end


PIDS = st.integers(0, 2)
OPS = st.lists(
    st.one_of(
        st.builds(Op, pid=PIDS, txn=st.just(True), size=st.integers(1, 3)),
        st.builds(Op, pid=st.sampled_from([-1, 0, 1, 2]), txn=st.just(False),
                  size=st.integers(1, 3)),
        st.builds(Op, pid=PIDS, marker=st.sampled_from([COMMIT, ABORT])),
    ),
    max_size=25,
)


def storage_view(ops: list[Op]) -> tuple[list[int], int]:
    """The same through TxnTracker and AbortedRanges."""
    tracker = TxnTracker()
    batches = layout(ops)
    for op, header in batches:
        tracker.on_batch(header, op.marker)
    stable = tracker.last_stable_offset
    aborted = AbortedRanges(tracker.aborted)
    shown: list[int] = []
    for op, header in batches:
        if op.marker is not None or aborted.is_aborted(header):
            continue
        if stable is None or header.base_offset < stable:
            shown += range(header.base_offset, header.next_offset)
    end = batches[-1][1].next_offset if batches else 0
    return shown, end if stable is None else stable


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_tracker_and_aborted_ranges_agree_with_the_model(ops: list[Op]) -> None:
    assert storage_view(ops) == model(ops)


def drain(consumer: embedlog.Consumer, max_records: int) -> list[int]:
    got: list[int] = []
    while batch := consumer.poll(max_records=max_records):
        got += [r.offset for r in batch]
    return got


@settings(max_examples=25, deadline=None)
@given(OPS, st.integers(1, 7), st.booleans())
def test_read_committed_consumer_agrees_with_the_model(ops: list[Op], max_records: int,
                                                       as_written: bool) -> None:
    """Read once at the end, or after every batch (the reader then stops at each last stable
    offset and continues from there)."""
    shown, stop = model(ops)
    with tempfile.TemporaryDirectory() as tmp, embedlog.open(pathlib.Path(tmp) / "log") as log:
        log.create_topic("t", config=small_segments(**{"segment.bytes": 300}))
        consumer = log.consumer("t", isolation_level="read_committed")
        got: list[int] = []
        base = 0
        for op in ops:
            base = log._append_encoded("t", 0, bytearray(encode(op, base))).next_offset
            if as_written:
                got += drain(consumer, max_records)
        got += drain(consumer, max_records)
        assert got == shown
        assert consumer.position(TP0) == stop
        assert [r.value for r in log.read("t", 0) if r.offset in set(shown)] == [
            b"%d" % o for o in shown
        ]
        tracker = aborted_ranges(log._partition_of("t", 0).segments, log.end_offset("t", 0))
        expected = TxnTracker()
        for op, header in layout(ops):
            expected.on_batch(header, op.marker)
        assert tracker.aborted == expected.aborted
        assert tracker.last_stable_offset == expected.last_stable_offset
        consumer.close()


def header(base: int, *, pid: int = 7, txn: bool = True, control: bool = False,
           n: int = 1) -> fmt.BatchHeader:
    values = [b"x"] * n
    keys = None
    if control:
        key, value = fmt.control_record(ABORT)
        values, keys = [value], [key]
    return fmt.parse_header(fmt.encode_batch(
        values, keys=keys, timestamps=0, base_offset=base, producer_id=pid, producer_epoch=0,
        is_transactional=txn, is_control=control))


def test_aborted_ranges_hold_transactional_data_of_their_producer_only() -> None:
    ranges = AbortedRanges([AbortedTxn(7, 10, 20), AbortedTxn(7, 30, 31), AbortedTxn(8, 0, 5)])
    assert ranges
    assert ranges.is_aborted(header(10)) and ranges.is_aborted(header(18, n=2))
    assert not ranges.is_aborted(header(21)) and not ranges.is_aborted(header(9))
    assert ranges.is_aborted(header(30)) and not ranges.is_aborted(header(32))
    assert not ranges.is_aborted(header(12, txn=False))  # idempotent, not transactional
    assert not ranges.is_aborted(header(12, pid=9))
    assert not ranges.is_aborted(header(20, control=True))  # the marker itself
    assert not AbortedRanges([])


def test_tracker_opens_at_the_first_offset_a_reader_saw() -> None:
    tracker = TxnTracker()
    tracker.on_data(header(10, n=5), first_offset=12)
    tracker.on_data(header(15))
    assert tracker.last_stable_offset == 12
    assert tracker.on_marker(header(16, control=True), ABORT) == AbortedTxn(7, 12, 16)
    assert tracker.last_stable_offset is None
    assert tracker.on_marker(header(17, control=True), COMMIT) is None
    # a marker with nothing open is a range of its own offsets only
    assert tracker.on_marker(header(18, control=True), ABORT) == AbortedTxn(7, 18, 18)


@pytest.mark.parametrize("kind", [None, COMMIT])
def test_a_marker_of_any_type_ends_the_transaction(kind: int | None) -> None:
    tracker = TxnTracker()
    tracker.on_data(header(0))
    tracker.on_marker(header(1, control=True), kind)  # None: emptied by compaction
    assert tracker.open == {} and tracker.aborted == []


def test_kafka_rules_for_odd_batches() -> None:
    tracker = TxnTracker()
    tracker.on_data(header(0, pid=-1))  # no producer id: takes no part in transactions
    assert tracker.last_stable_offset is None
    tracker.on_data(header(1))
    assert tracker.on_marker(header(2, txn=False, control=True), ABORT) == AbortedTxn(7, 1, 2)
    assert tracker.on_marker(header(3, pid=-1, control=True), ABORT) is None


def test_marker_type_of_encoded_and_decoded_control_batches() -> None:
    key, value = fmt.control_record(COMMIT)
    raw = fmt.encode_batch([value], keys=[key], timestamps=0, producer_id=1, producer_epoch=0,
                           is_transactional=True, is_control=True)
    h = fmt.parse_header(raw)
    assert control_type(raw, h) == COMMIT
    assert marker_type(fmt.decode_records(raw, 0, h)) == COMMIT
    empty = fmt.encode_batch([], timestamps=0, last_offset_delta=0, producer_id=1,
                             producer_epoch=0, is_transactional=True, is_control=True)
    assert control_type(empty, fmt.parse_header(empty)) is None
