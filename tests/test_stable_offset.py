"""The last stable offset kept incrementally (``Partition.stable``) always equals the one read
from every batch header, whatever happens to the partition between two calls; consumers under
``read_committed`` end there."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

from hypothesis import given, settings

import embedlog
from embedlog import TopicPartition
from embedlog.transactions import last_stable_offset
from helpers import open_transaction, run_txn_ops, txn_ops

_OPS = txn_ops(max_size=25)


def _full(log: embedlog.Log) -> int:
    """The last stable offset read afresh from every batch header (a transaction whose first
    batches were deleted is the producer state's: it holds the answer at the log start)."""
    p = log._partition_of("t", 0)
    with p.lock:
        full = max(p.start_offset, last_stable_offset(list(p.segments), p.end_offset))
        opened = p.producer_states().txns.open.values()
        return max(p.start_offset, min(full, *opened)) if opened else full


def _run(log: embedlog.Log, ops: list[tuple[Any, ...]]) -> None:
    producers = {n: log.producer(transactional_id=n) for n in "ab"}
    for p in producers.values():
        p.init_transactions()

    def check(op: tuple[Any, ...]) -> None:
        assert log.last_stable_offset("t", 0) == _full(log), op

    run_txn_ops(log, ops, producers, check)
    for p in producers.values():
        p.close()


@settings(max_examples=100, deadline=None)
@given(_OPS)
def test_incremental_last_stable_offset_equals_a_full_read(ops: list[tuple[Any, ...]]) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-lso-"))
    try:
        with embedlog.open(work / "log") as log:
            log.create_topic("t", config={"segment.bytes": 1024,
                                          "cleanup.policy": "compact,delete"})
            _run(log, ops)
    finally:
        shutil.rmtree(work)


def test_read_committed_consumers_end_at_the_last_stable_offset(tmp_path: pathlib.Path) -> None:
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        log.append_batch("t", [b"a", b"b"], partition=0)
        p = log.producer(transactional_id="x")
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"open", partition=0)
        p.flush()
        log.append_batch("t", [b"c"], partition=0)
        tp = TopicPartition("t", 0)
        committed = log.consumer(isolation_level="read_committed")
        uncommitted = log.consumer()
        for c in (committed, uncommitted):
            c.assign([tp])
        assert committed.end_offsets([tp]) == {tp: 2}
        assert uncommitted.end_offsets([tp]) == {tp: 4}
        assert committed.lag() == {tp: 2} and uncommitted.lag() == {tp: 4}
        committed.seek_to_end()
        assert committed.position(tp) == 2
        p.commit_transaction()
        assert committed.end_offsets([tp]) == {tp: 5}  # the marker took offset 4
        committed.seek_to_end()
        assert committed.position(tp) == 5 and committed.lag() == {tp: 0}
        for c in (committed, uncommitted):
            c.close()
        p.close()


def test_last_stable_offset_is_never_below_the_log_start(tmp_path: pathlib.Path) -> None:
    """Kafka bounds the first unstable offset by the log start: records deleted with
    ``delete_records`` while their transaction is open leave it at the new log start, not
    below it (so a ``read_committed`` reset to "latest" lands on a readable offset)."""
    with embedlog.open(tmp_path / "log", upkeep=False) as log:
        log.create_topic("t")
        log.append("t", b"p0", partition=0)
        p = open_transaction(log, "t", b"t1")
        log.append("t", b"p2", partition=0)
        assert log.last_stable_offset("t", 0) == 1
        assert log.delete_records("t", 0, 2) == 2
        assert log.last_stable_offset("t", 0) == 2
        c = log.consumer(isolation_level="read_committed", auto_offset_reset="latest")
        tp = TopicPartition("t", 0)
        c.assign([tp])
        assert c.end_offsets([tp]) == {tp: 2} and c.position(tp) == 2
        p.commit_transaction()
        assert log.last_stable_offset("t", 0) == log.end_offset("t", 0) == 4
        c.close()
        p.close()


def _view_bounds(log: embedlog.Log) -> tuple[int, int, int, bool]:
    """A fresh read-only view's last stable offset (from the newest producer snapshot), the one
    it reads from every batch header instead, the writer's, and whether the first batches
    were deleted."""
    from embedlog.stable_offset import StableOffset

    writer = log.last_stable_offset("t", 0)
    with embedlog.open(log.path, read_only=True) as view:
        seeded = view.last_stable_offset("t", 0)
        p = view._partition_of("t", 0)
        with p.lock:
            full = StableOffset().get(list(p.segments), p.end_offset, p.start_offset)
            headless = bool(p.segments) and p.segments[0].base_offset > 0
    return seeded, full, writer, headless


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_a_view_starting_at_a_producer_snapshot_agrees(ops: list[tuple[Any, ...]]) -> None:
    """A view's last stable offset read from the newest producer snapshot on equals the one
    read from every batch header and the writer's; once the first batches were deleted, it is
    never past the writer's and never below both others (the snapshot may know where a
    transaction began that the batches left no longer show: the header walk then holds it at
    the log start, or does not see it at all)."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="embedlog-lso-view-"))
    try:
        with embedlog.open(work / "log") as log:
            log.create_topic("t", config={"segment.bytes": 1024,
                                          "cleanup.policy": "compact,delete"})
            producers = {n: log.producer(transactional_id=n) for n in "ab"}
            for p in producers.values():
                p.init_transactions()

            def check(op: tuple[Any, ...]) -> None:
                seeded, full, writer, headless = _view_bounds(log)
                if headless:
                    assert min(full, writer) <= seeded <= writer, (op, seeded, full, writer)
                else:
                    assert seeded == full == writer, (op, seeded, full, writer)

            run_txn_ops(log, ops, producers, check)
            for p in producers.values():
                p.close()
    finally:
        shutil.rmtree(work)


def test_a_view_knows_a_transaction_whose_batches_were_all_deleted(tmp_path: pathlib.Path
                                                                   ) -> None:
    """A transaction still open whose batches all went with deleted segments: the snapshot of
    the first segment left (below the log start) still has it, so the view holds the stable
    offset at the log start, as the writer does (the header walk alone would answer the end)."""
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t", config={"segment.bytes": 1024})
        p = open_transaction(log, "t", b"t" * 40)
        for i in range(58):
            log.append("t", b"plain-%02d" % i, partition=0)
        assert log.delete_records("t", 0, 55) == 55  # inside the last segment (base 52)
        seeded, full, writer, headless = _view_bounds(log)
        assert headless and full == log.end_offset("t", 0) == 59
        assert seeded == writer == 55
        p.abort_transaction()
        p.close()


def _topic_and_producer(log: embedlog.Log) -> Any:
    """Topic ``t`` (1 MiB segments) and a transactional producer with a transaction begun."""
    log.create_topic("t", config={"segment.bytes": 1 << 20})
    p = log.producer(transactional_id="a")
    p.init_transactions()
    p.begin_transaction()
    return p


def test_a_view_reads_the_headers_after_the_newest_snapshot_only(
        tmp_path: pathlib.Path, monkeypatch: Any) -> None:
    from embedlog import transactions

    with embedlog.open(tmp_path / "log") as log:
        p = _topic_and_producer(log)
        p.send("t", b"open", partition=0)
        p.flush()  # open across every roll below: the snapshots carry where it began
        for _ in range(5):
            log.append_batch("t", [b"x"] * 10, partition=0)
            log.roll("t", 0)
        log.append_batch("t", [b"y"], partition=0)
        read: list[int] = []
        real = transactions.iter_headers

        def counted(seg: Any, position: int = 0) -> Any:
            read.append(seg.base_offset)
            return real(seg, position)

        monkeypatch.setattr(transactions, "iter_headers", counted)
        with embedlog.open(tmp_path / "log", read_only=True) as view:
            assert view.last_stable_offset("t", 0) == 0  # the open transaction's first offset
            assert read == [view.end_offset("t", 0) - 1]  # the active segment only
        p.abort_transaction()
        p.close()


def test_a_view_knows_from_a_snapshot_where_a_transaction_began(tmp_path: pathlib.Path) -> None:
    """Once the first segments went, a producer whose earlier markers went with them opens a
    transaction: read from the batches left, it may have begun below them (the view stops at
    the log start); the snapshot after the deleted segments says it began where its first
    batch is, as the writer knows."""
    with embedlog.open(tmp_path / "log") as log:
        p = _topic_and_producer(log)
        p.send("t", b"committed", partition=0)
        p.commit_transaction()
        for _ in range(3):
            log.append_batch("t", [b"x"] * 10, partition=0)
            log.roll("t", 0)
        log.delete_records("t", 0, 25)  # the first segment, and the marker, are gone
        p.begin_transaction()
        p.send("t", b"open", partition=0)
        p.flush()
        began = log.end_offset("t", 0) - 1
        seeded, full, writer, headless = _view_bounds(log)
        assert headless and full == log.start_offset("t", 0) == 25
        assert seeded == writer == began
        p.abort_transaction()
        p.close()
