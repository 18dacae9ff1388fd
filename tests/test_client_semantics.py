"""Client semantics checked against Kafka's documented behaviour: timestamp lookups above a
moved log start and at the last stable offset; consumers whose position was deleted under a
read in progress."""

from __future__ import annotations

import pathlib
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import embedlog
from embedlog import TopicPartition
from embedlog.errors import OffsetOutOfRangeError
from embedlog.fetcher import OffsetAndTimestamp
from embedlog.segment import format as fmt
from helpers import open_transaction, small_segments

TP0 = TopicPartition("t", 0)


def _first_at_or_after(stamps: list[int], start: int, target: int) -> int | None:
    """The model: Kafka's ``findOffsetByTimestamp(target, startingOffset=log start)``."""
    return next((o for o in range(start, len(stamps)) if stamps[o] >= target), None)


def test_time_lookup_never_answers_a_record_stamped_before_the_target(
        log: embedlog.Log) -> None:
    """Out-of-order timestamps: the record found below the log start is gone, and the log
    start itself is stamped earlier than asked; the answer is the first later record that
    is stamped late enough (Kafka), not the log start."""
    log.create_topic("t", partitions=1)
    for i, ts in enumerate([100, 200, 50, 50, 300, 60]):
        log.append("t", b"%d" % i, timestamp=ts)
    assert log.offsets_for_times("t", 0, 150) == 1
    assert log.delete_records("t", 0, 2) == 2
    assert log.offsets_for_times("t", 0, 150) == 4
    assert log.offsets_for_times("t", 0, 301) is None
    with log.consumer() as consumer:
        consumer.assign([TP0])
        assert consumer.offsets_for_times({TP0: 150}) == {TP0: OffsetAndTimestamp(4, 300)}
        assert consumer.offsets_for_times({TP0: 100}) == {TP0: OffsetAndTimestamp(4, 300)}


@settings(max_examples=40, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 40), min_size=1, max_size=120),
    cut=st.integers(0, 130),
    batch=st.integers(1, 9),
    targets=st.lists(st.integers(0, 42), min_size=1, max_size=8),
)
def test_time_lookup_matches_the_model_after_delete_records(
        stamps: list[int], cut: int, batch: int, targets: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp, \
            embedlog.open(pathlib.Path(tmp) / "log") as log:
        log.create_topic("t", partitions=1, config=small_segments())
        for i in range(0, len(stamps), batch):  # batches of out-of-order stamps
            chunk = stamps[i:i + batch]
            log.append_batch("t", [b"v" * 40] * len(chunk), timestamps=chunk, partition=0)
        start = log.delete_records("t", 0, min(cut, len(stamps)))
        for target in targets:
            want = _first_at_or_after(stamps, start, target)
            assert log.offsets_for_times("t", 0, target) == want, (start, target)


def _deleted_under_a_read(log_dir: pathlib.Path, policy: str, read_only: bool
                          ) -> tuple[list[int], int, embedlog.Consumer, list[embedlog.Log]]:
    """A consumer three records into a partition of many segments when ``delete_records``
    removes everything up to past its sixth segment's base: the offsets it got, the new log
    start, the consumer (and the logs to close)."""
    log = embedlog.open(log_dir)
    log.create_topic("t", config=small_segments())
    for i in range(300):
        log.append("t", b"%03d" % i + b"x" * 100, partition=0)
    reader = embedlog.open(log_dir, read_only=True) if read_only else log
    consumer = reader.consumer(auto_offset_reset=policy, max_poll_records=3)
    consumer.assign([TP0])
    consumer.seek(TP0, 0)
    got = [r.offset for r in consumer.poll()]
    assert got == [0, 1, 2]
    start = log.delete_records("t", 0, log.segments("t", 0)[5].base_offset + 1)
    return got, start, consumer, [reader, log] if read_only else [log]


def _drain(consumer: embedlog.Consumer) -> list[int]:
    return [r.offset for r in _drain_records(consumer)]


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
def test_records_deleted_under_a_read_are_never_skipped_in_silence(
        log_dir: pathlib.Path, read_only: bool) -> None:
    """Kafka: a fetch below the log start is out of range and auto_offset_reset decides. A
    read-only consumer used to jump to the new log start whatever the policy (its scan
    relisted the folder and resumed there); none of the deleted records after the position is
    handed out but those of a segment file the scan already had open."""
    got, start, strict, logs = _deleted_under_a_read(log_dir, "none", read_only)
    with pytest.raises(OffsetOutOfRangeError):
        got += _drain(strict)
    assert got == list(range(len(got))) and len(got) < start  # no jump, no gap
    strict.close()
    for opened in logs:
        opened.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_records_deleted_under_a_read_reset_by_the_policy(
        log_dir: pathlib.Path, read_only: bool, policy: str) -> None:
    got, start, consumer, logs = _deleted_under_a_read(log_dir, policy, read_only)
    got += _drain(consumer)
    end = 300
    below = [o for o in got if o < start]
    assert below == list(range(len(below)))  # the records before the reset: no gap
    after = got[len(below):]
    assert after == (list(range(start, end)) if policy == "earliest" else [])
    assert consumer.position(TP0) == end
    consumer.close()
    for opened in logs:
        opened.close()


def test_read_committed_time_lookup_stops_at_the_last_stable_offset(log: embedlog.Log) -> None:
    """Kafka's ListOffsets under READ_COMMITTED answers no offset at or above the last stable
    offset: a record of an open transaction is not found (None), until it commits."""
    log.create_topic("t")
    log._append_encoded("t", 0, bytearray(fmt.encode_batch([b"plain"], timestamps=100)))
    txn = {"producer_id": 1, "producer_epoch": 0, "is_transactional": True}
    log._append_encoded("t", 0, bytearray(fmt.encode_batch(
        [b"open"], timestamps=500, base_sequence=0, **txn)))
    committed = log.consumer(isolation_level="read_committed")
    uncommitted = log.consumer()
    committed.assign([TP0])
    uncommitted.assign([TP0])
    assert committed.end_offsets([TP0]) == {TP0: 1}
    assert committed.offsets_for_times({TP0: 400}) == {TP0: None}
    assert committed.offsets_for_times({TP0: 50}) == {TP0: OffsetAndTimestamp(0, 100)}
    assert uncommitted.offsets_for_times({TP0: 400}) == {TP0: OffsetAndTimestamp(1, 500)}
    key, value = fmt.control_record(fmt.CONTROL_COMMIT)
    log._append_encoded("t", 0, bytearray(fmt.encode_batch(
        [value], keys=[key], timestamps=600, is_control=True, **txn)))
    assert committed.offsets_for_times({TP0: 400}) == {TP0: OffsetAndTimestamp(1, 500)}
    committed.close()
    uncommitted.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
def test_read_committed_latest_reset_starts_at_the_last_stable_offset(
        log_dir: pathlib.Path, read_only: bool) -> None:
    """Kafka resets a read_committed consumer to the latest offset its isolation level sees,
    the last stable offset: a transaction open at the reset is read once it commits. The
    reset used to go to the log end and skip that transaction's committed records."""
    with embedlog.open(log_dir) as log:
        log.create_topic("t")
        log.append("t", b"before", partition=0)
        producer = open_transaction(log, "t", b"in-txn")
        reader = embedlog.open(log_dir, read_only=True) if read_only else log
        consumer = reader.consumer("t", isolation_level="read_committed",
                                   auto_offset_reset="latest")
        assert consumer.poll() == []
        assert consumer.position(TP0) == 1
        producer.commit_transaction()
        log.append("t", b"after", partition=0)
        assert [r.value for r in _drain_records(consumer)] == [b"in-txn", b"after"]
        consumer.close()
        if read_only:
            reader.close()


def _drain_records(consumer: embedlog.Consumer) -> list[embedlog.Record]:
    out: list[embedlog.Record] = []
    while batch := consumer.poll():
        out += batch
    return out
