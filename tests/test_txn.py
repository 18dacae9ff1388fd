"""The transactional producer and the coordinator: markers, fencing, timeouts, group offsets,
and crashes at every step of the two-phase commit (settled all-or-nothing on reopen)."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import pytest

import embedlog
from embedlog import TopicPartition
from embedlog import txn_coordinator as coord
from embedlog.errors import ProducerFencedError, UsageError
from embedlog.segment import format as fmt
from helpers import read_committed as _committed

PARTS = 3


class _Crash(BaseException):
    """Stands for the process dying (not an EmbedlogError: nothing may catch it)."""


def _open(path: pathlib.Path, now: list[int] | None = None) -> embedlog.Log:
    clock = (lambda: now[0]) if now is not None else None
    return embedlog.Log(path, durability="fsync", clock=clock)


def _markers(log: embedlog.Log, part: int) -> list[tuple[int, int, int]]:
    """(producer id, epoch, type) of each marker of out-``part``."""
    return [(b.producer_id, b.producer_epoch, fmt.decode_control_record(b.keys()[0])[1])
            for b in log.read_batches("out", part, 0, control=True) if b.is_control]


@pytest.fixture
def log(tmp_path: pathlib.Path) -> Any:
    lg = _open(tmp_path / "log")
    lg.create_topic("out", partitions=PARTS)
    yield lg
    lg.close()


def test_commit_writes_markers_everywhere_and_offsets(log: embedlog.Log) -> None:
    p = log.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    for part in range(PARTS):
        p.send("out", b"v%d" % part, partition=part)
    p.send_offsets_to_transaction({TopicPartition("in", 0): 7}, "g")
    p.commit_transaction()
    for part in range(PARTS):
        assert _committed(log, part) == [b"v%d" % part]
        assert _markers(log, part) == [(p.producer_id, 0, fmt.CONTROL_COMMIT)]
        assert log.last_stable_offset("out", part) == log.end_offset("out", part) == 2
    assert log.consumer(group="g").committed(TopicPartition("in", 0)) == 7


def test_abort_hides_records_and_keeps_offsets(log: embedlog.Log) -> None:
    p = log.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", partition=0)
    p.flush()
    assert log.last_stable_offset("out", 0) == 0  # open: readers stop before it
    p.send_offsets_to_transaction({TopicPartition("in", 0): 7}, "g")
    p.abort_transaction()
    assert _committed(log, 0) == []
    assert _markers(log, 0) == [(p.producer_id, 0, fmt.CONTROL_ABORT)]
    assert [r.value for r in log.read("out", 0, 0)] == [b"x"]  # read_uncommitted sees it
    assert log.consumer(group="g").committed(TopicPartition("in", 0)) is None


def test_init_fences_older_producer_and_aborts_its_transaction(log: embedlog.Log) -> None:
    old = log.producer(transactional_id="t")
    old.init_transactions()
    old.begin_transaction()
    old.send("out", b"old", partition=0)
    old.flush()
    new = log.producer(transactional_id="t")
    new.init_transactions()
    # as Kafka: the open transaction is fenced (its ABORT marker of epoch 1), then epoch 2
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, 2)
    assert _markers(log, 0) == [(old.producer_id, 1, fmt.CONTROL_ABORT)]
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    with pytest.raises(ProducerFencedError):
        old.begin_transaction()


def test_fencing_across_reopen(tmp_path: pathlib.Path) -> None:
    lg = _open(tmp_path / "log")
    lg.create_topic("out", partitions=1)
    p = lg.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"lost", partition=0)
    p.flush()
    lg.close()  # the process dies with its transaction open
    lg = _open(tmp_path / "log")
    assert _committed(lg, 0) == []
    assert lg.last_stable_offset("out", 0) == lg.end_offset("out", 0)
    q = lg.producer(transactional_id="t")
    q.init_transactions()
    assert (q.producer_id, q.producer_epoch) == (p.producer_id, 1)
    lg.close()


def _timing_out(path: pathlib.Path, now: list[int], value: bytes) -> tuple[embedlog.Log, Any]:
    """A log with topic ``out`` (one partition) and a producer of ``t`` (1 s timeout) whose
    open transaction wrote ``value`` to it."""
    lg = _open(path, now)
    lg.create_topic("out", partitions=1)
    p = lg.producer(transactional_id="t", transaction_timeout_ms=1000)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value, partition=0)
    p.flush()
    return lg, p


def test_timeout_aborts_and_fences(tmp_path: pathlib.Path) -> None:
    now = [1_000_000]
    lg, p = _timing_out(tmp_path / "log", now, b"slow")
    now[0] += 1001
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    # the marker carries the epoch the timeout bumped (tests/test_txn_timeout.py)
    assert _markers(lg, 0) == [(p.producer_id, 1, fmt.CONTROL_ABORT)]
    assert lg.last_stable_offset("out", 0) == lg.end_offset("out", 0)
    assert _committed(lg, 0) == []
    lg.close()


def test_usage_errors(log: embedlog.Log) -> None:
    p = log.producer(transactional_id="t")
    with pytest.raises(UsageError):
        p.begin_transaction()  # before init_transactions
    p.init_transactions()
    with pytest.raises(UsageError):
        p.send("out", b"x")  # outside a transaction
    p.begin_transaction()
    with pytest.raises(UsageError):
        p.begin_transaction()
    with pytest.raises(UsageError):
        p.send("out", b"x", partition=PARTS)
    with pytest.raises(UsageError):
        log.producer(transactional_id="")


def test_corrupt_state_file_is_refused(tmp_path: pathlib.Path) -> None:
    lg = _open(tmp_path / "log")
    lg.producer(transactional_id="t").init_transactions()
    lg.close()
    (tmp_path / "log" / "embedlog.transactions").write_text('{"version": 1, "transactions": 3}')
    with pytest.raises(embedlog.errors.CorruptCheckpointError):
        _open(tmp_path / "log")


# ---------------------------------------------------------------------- crash points


def _crash_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Die at the ``step``-th write of phase 1/2: state-file writes and markers counted
    together (the prepare record, each marker, the group offsets, the complete record)."""
    seen = [0]

    def tick() -> None:
        seen[0] += 1
        if seen[0] == step:
            raise _Crash

    real_persist, real_marker = coord.TxnCoordinator._persist, coord.write_marker

    def persist(self: coord.TxnCoordinator) -> None:
        tick()
        real_persist(self)

    def marker(*args: Any) -> None:
        tick()
        real_marker(*args)

    monkeypatch.setattr(coord.TxnCoordinator, "_persist", persist)
    monkeypatch.setattr(coord, "write_marker", marker)


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("step", range(1, PARTS + 4))
def test_crash_between_prepare_and_complete(tmp_path: pathlib.Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            step: int, commit: bool) -> None:
    lg = _open(tmp_path / "log")
    lg.create_topic("out", partitions=PARTS)
    p = lg.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    for part in range(PARTS):
        p.send("out", b"v%d" % part, partition=part)
    p.send_offsets_to_transaction({TopicPartition("in", 0): 9}, "g")
    p.flush()
    for part in range(PARTS):
        lg._partition_of("out", part).sync()
    with monkeypatch.context() as m:
        _crash_at(m, step)
        try:
            (p.commit_transaction if commit else p.abort_transaction)()
            crashed = False
        except _Crash:
            crashed = True
    lg.close()
    lg = _open(tmp_path / "log")
    views = [_committed(lg, part) for part in range(PARTS)]
    offset = lg.consumer(group="g").committed(TopicPartition("in", 0))
    if commit and (step > 1 or not crashed):  # the prepare record was written: committed
        assert views == [[b"v%d" % part] for part in range(PARTS)]
        assert offset == 9
    else:
        assert views == [[]] * PARTS
        assert offset is None
    for part in range(PARTS):
        assert len(_markers(lg, part)) == 1  # none missing, none written twice
        assert lg.last_stable_offset("out", part) == lg.end_offset("out", part)
    lg.close()


def test_kafka_python_parses_markers(log: embedlog.Log) -> None:
    default_records = pytest.importorskip("kafka.record.default_records")
    p = log.producer(transactional_id="t")
    p.init_transactions()
    for commit in (True, False):
        p.begin_transaction()
        p.send("out", b"v", partition=0)
        p.flush()
        (p.commit_transaction if commit else p.abort_transaction)()
    seen = []
    for seg in log.segments("out", 0):
        data = pathlib.Path(seg.path).read_bytes()
        pos = 0
        while pos < len(data):
            size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
            batch = default_records.DefaultRecordBatch(data[pos:pos + size])
            assert batch.validate_crc()
            assert batch.is_transactional and batch.producer_id == p.producer_id
            if batch.is_control_batch:
                recs = list(batch)
                assert len(recs) == 1
                seen.append(recs[0].commit)
            pos += size
    assert seen == [True, False]


def test_cli_consume_read_committed(tmp_path: pathlib.Path) -> None:
    from click.testing import CliRunner

    from embedlog.cli import cli

    lg = _open(tmp_path / "log")
    lg.create_topic("out", partitions=1)
    lg.append("out", b"plain", partition=0)
    p = lg.producer(transactional_id="t")
    p.init_transactions()
    for value, commit in ((b"committed", True), (b"aborted", False), (b"open", None)):
        p.begin_transaction()
        p.send("out", value, partition=0)
        p.flush()
        if commit is not None:
            (p.commit_transaction if commit else p.abort_transaction)()
    lg.append("out", b"after", partition=0)
    runner = CliRunner(env={"EMBEDLOG_DIR": str(tmp_path / "log")})

    def consume(*extra: str) -> list[str]:
        result = runner.invoke(cli, ["consume", "out", "--from-beginning", *extra])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.stdout.splitlines()

    assert consume() == ["plain", "committed", "aborted", "open", "after"]
    assert consume("--isolation-level", "read_committed") == ["plain", "committed"]
    lg.close()


@pytest.mark.parametrize("fence", ["timeout", "init"])
def test_fenced_producer_writes_nothing_to_a_partition_it_had_added(
        tmp_path: pathlib.Path, fence: str) -> None:
    """A producer whose transaction was aborted by a timeout or a newer producer must not write
    to a partition it had already recorded: its data would follow the ABORT marker and stay
    open for good."""
    now = [1_000_000]
    lg, old = _timing_out(tmp_path / "log", now, b"first")
    if fence == "timeout":
        now[0] += 1001
        lg.producer(transactional_id="other").init_transactions()
    else:
        lg.producer(transactional_id="t").init_transactions()
    end = lg.end_offset("out", 0)
    old.send("out", b"zombie", partition=0)
    with pytest.raises(ProducerFencedError):
        old.flush()
    assert lg.end_offset("out", 0) == end
    assert lg.last_stable_offset("out", 0) == end
    assert _committed(lg, 0) == []
    lg.close()


@pytest.mark.parametrize("bad", [
    {"value": "text"}, {"value": b"v", "key": 5}, {"value": b"v", "timestamp": -3},
    {"value": b"v", "timestamp": 1.5}, {"value": b"v", "headers": [("k", "text")]},
    {"value": b"v", "headers": "k"},
])
def test_a_bad_record_is_refused_by_send_not_by_the_commit(log: embedlog.Log,
                                                           bad: dict[str, Any]) -> None:
    # As Producer.send: the record is checked when it is sent, with embedlog's errors; the
    # transaction goes on with the good records (nothing bad is ever stored).
    p = log.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"good", partition=1)
    with pytest.raises(UsageError):
        p.send("out", partition=0, **bad)
    p.commit_transaction()
    assert _committed(log, 1) == [b"good"] and _committed(log, 0) == []
    p.close()


def test_the_records_a_transaction_buffers_are_copied_and_need_keys_when_compacted(
        log: embedlog.Log) -> None:
    log.create_topic("c", config={"cleanup.policy": "compact"})
    p = log.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(UsageError, match="compacted"):
        p.send("c", b"keyless", partition=0)
    buffer = bytearray(b"first")
    p.send("out", buffer, partition=0)
    buffer[:] = b"later"  # reused by the caller before the commit
    p.commit_transaction()
    assert _committed(log, 0) == [b"first"]
    p.close()


@pytest.mark.parametrize("offsets, group", [
    ({("in", "0"): 5}, "g"), ({("in", 0, 1): 5}, "g"), ({"in": 5}, "g"),
    ([(TopicPartition("in", 0), 5)], "g"), ({TopicPartition("in", 0): -1}, "g"),
    ({TopicPartition("in", 0): True}, "g"), ({TopicPartition("in", 0): 5}, "../g"),
    ({TopicPartition("in", 0): 5}, 7),
])
def test_malformed_transaction_offsets_are_refused_before_they_are_recorded(
        tmp_path: pathlib.Path, offsets: Any, group: Any) -> None:
    # A partition given as "0" used to be recorded in the coordinator's state log: the commit
    # then failed after its decision and the log never opened again.
    with _open(tmp_path / "log") as log:
        log.create_topic("out")
        p = log.producer(transactional_id="t")
        p.init_transactions()
        p.begin_transaction()
        p.send("out", b"v", partition=0)
        with pytest.raises(UsageError):
            p.send_offsets_to_transaction(offsets, group)
        p.send_offsets_to_transaction({TopicPartition("in", 0): _Offset(4)}, "g")
        p.commit_transaction()
        p.close()
    with _open(tmp_path / "log") as log:
        assert _committed(log, 0) == [b"v"]
        with log.consumer(group="g") as c:
            assert c.committed(TopicPartition("in", 0)) == 4


class _Offset:
    """kafka-python's OffsetAndMetadata, as far as a commit reads it."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def test_a_record_too_large_is_refused_by_send(log: embedlog.Log) -> None:
    p = log.producer(transactional_id="t")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"good", partition=0)
    with pytest.raises(embedlog.RecordTooLargeError, match=r"max\.message\.bytes"):
        p.send("out", b"x" * 2_000_000, partition=1)
    p.commit_transaction()
    assert _committed(log, 0) == [b"good"] and _committed(log, 1) == []
    p.close()


def test_after_a_failed_write_the_transaction_can_only_be_aborted(log: embedlog.Log) -> None:
    # Kafka's abortable error: a commit after part of the transaction failed to be written
    # would commit the rest alone. An incompressible record that passed send's size check
    # grows past max.message.bytes when its batch is compressed.
    log.create_topic("small", config={"max.message.bytes": 10_000})
    p = log.producer(transactional_id="t", compression="gzip")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"good", partition=0)
    p.send("small", random.Random(7).randbytes(10_000 - 61 - 32), partition=0)
    with pytest.raises(embedlog.RecordTooLargeError):
        p.commit_transaction()
    for call in (p.commit_transaction, p.flush, lambda: p.send("out", b"more", partition=2),
                 lambda: p.send_offsets_to_transaction({TopicPartition("in", 0): 1}, "g")):
        with pytest.raises(embedlog.TransactionStateError, match="abort"):
            call()
    p.abort_transaction()
    assert _committed(log, 0) == [] and _committed(log, 1) == []
    p.begin_transaction()  # the next transaction goes on normally
    p.send("out", b"next", partition=0)
    p.commit_transaction()
    assert _committed(log, 0) == [b"next"]
    p.close()
