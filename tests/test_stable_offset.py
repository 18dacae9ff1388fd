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
