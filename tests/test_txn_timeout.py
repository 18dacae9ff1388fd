"""A timed-out transaction, as Kafka's coordinator aborts it: the producer's epoch bumped
first, the ABORT markers carrying the bumped epoch, so that every partition of the transaction
fences the old producer itself; the decision durable before the markers; epoch exhaustion."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import embedlog
from embedlog import txn_coordinator as coord
from embedlog.errors import CorruptCheckpointError, ProducerFencedError
from embedlog.segment import format as fmt
from embedlog.txn_state_log import TxnStateLog
from helpers import read_committed as _committed

PARTS = 3
TIMEOUT_MS = 1000


class _Crash(BaseException):
    """Stands for the process dying (not an EmbedlogError: nothing may catch it)."""


def _open(path: pathlib.Path, now: list[int]) -> embedlog.Log:
    return embedlog.Log(path, durability="fsync", clock=lambda: now[0])


def _markers(log: embedlog.Log, part: int) -> list[tuple[int, int, int]]:
    """(producer id, epoch, type) of each marker of out-``part``, from the batch headers."""
    return [(b.producer_id, b.producer_epoch, fmt.decode_control_record(b.keys()[0])[1])
            for b in log.read_batches("out", part, 0, control=True) if b.is_control]


def _open_transaction(lg: embedlog.Log, epoch: int | None = None) -> Any:
    """A producer of ``t`` (``epoch``: handed that epoch) whose open transaction wrote one
    record to each partition of ``out``."""
    if epoch is not None:
        first = lg.producer(transactional_id="t", transaction_timeout_ms=TIMEOUT_MS)
        first.init_transactions()
        lg._transactions().entries["t"].epoch = epoch - 1
    p = lg.producer(transactional_id="t", transaction_timeout_ms=TIMEOUT_MS)
    p.init_transactions()
    p.begin_transaction()
    for part in range(PARTS):
        p.send("out", b"slow%d" % part, partition=part)
    p.flush()
    return p


def _zombie_batch(pid: int, epoch: int, now: int) -> bytearray:
    """The timed-out producer's next batch (its first was sequence 0, one record)."""
    return bytearray(fmt.encode_batch([b"zombie"], timestamps=now, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=1,
                                      is_transactional=True))


@pytest.fixture
def log(tmp_path: pathlib.Path) -> Any:
    now = [1_000_000]
    lg = _open(tmp_path / "log", now)
    lg.create_topic("out", partitions=PARTS)
    yield lg, now
    lg.close()


def test_markers_carry_the_bumped_epoch(log: tuple[embedlog.Log, list[int]]) -> None:
    lg, now = log
    p = _open_transaction(lg)
    now[0] += TIMEOUT_MS + 1
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    for part in range(PARTS):
        assert _markers(lg, part) == [(p.producer_id, p.producer_epoch + 1, fmt.CONTROL_ABORT)]
        assert _committed(lg, part) == []  # read_committed still hides the aborted record
        assert lg.last_stable_offset("out", part) == lg.end_offset("out", part) == 2
        aborted = lg._partition_of("out", part).aborted_txns(0, 2)
        assert aborted is not None  # the .txnindex entry, keyed by the producer id
        data = next(b for b in lg.read_batches("out", part, 0) if not b.is_control)
        assert aborted.aborted_by(data) == 1
    assert lg.describe_producers("out", 0)[0].epoch == p.producer_epoch + 1


def test_kafka_python_reads_the_bumped_epoch(log: tuple[embedlog.Log, list[int]]) -> None:
    """kafka-python's own codec reads each partition's segment: the data batch of the old
    epoch, then a valid ABORT control batch of the bumped one."""
    memory_records = pytest.importorskip("kafka.record.memory_records")
    lg, now = log
    p = _open_transaction(lg)
    now[0] += TIMEOUT_MS + 1
    lg._transactions().expire()
    for part in range(PARTS):
        (seg,) = lg.segments("out", part)
        records = memory_records.MemoryRecords(pathlib.Path(seg.path).read_bytes())
        seen = []
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc() and batch.producer_id == p.producer_id
            seen.append((batch.producer_epoch, batch.is_control_batch,
                         [r.commit for r in batch] if batch.is_control_batch else None))
        assert seen == [(p.producer_epoch, False, None), (p.producer_epoch + 1, True, [False])]


def test_the_partitions_refuse_the_old_epoch(log: tuple[embedlog.Log, list[int]]) -> None:
    """The old producer is fenced by each partition, not only by the coordinator: its next
    batch (the sequence that follows its last) and a marker of its epoch are refused."""
    lg, now = log
    p = _open_transaction(lg)
    lg._transactions().expire()  # not yet timed out: nothing happens
    assert all(_markers(lg, part) == [] for part in range(PARTS))
    now[0] += TIMEOUT_MS + 1
    lg._transactions().expire()
    for part in range(PARTS):
        partition = lg._partition_of("out", part)
        end = lg.end_offset("out", part)
        with pytest.raises(ProducerFencedError):
            partition.append_encoded(_zombie_batch(p.producer_id, p.producer_epoch, now[0]))
        with pytest.raises(ProducerFencedError):
            coord.write_marker(partition, p.producer_id, p.producer_epoch, True, now[0])
        assert lg.end_offset("out", part) == end
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()  # and by the coordinator


def test_a_new_producer_fences_an_open_transaction_in_each_partition(
        log: tuple[embedlog.Log, list[int]]) -> None:
    """init_transactions over a transaction still open aborts it as a timeout does (Kafka's
    InitProducerId): ABORT markers of the epoch + 1, each partition then refusing the old
    epoch, and the new producer at the epoch + 2."""
    lg, now = log
    old = _open_transaction(lg)
    new = lg.producer(transactional_id="t", transaction_timeout_ms=TIMEOUT_MS)
    new.init_transactions()
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    for part in range(PARTS):
        assert _markers(lg, part) == [
            (old.producer_id, old.producer_epoch + 1, fmt.CONTROL_ABORT)]
        with pytest.raises(ProducerFencedError):
            lg._partition_of("out", part).append_encoded(
                _zombie_batch(old.producer_id, old.producer_epoch, now[0]))
    assert _committed(lg, 0) == []
    new.begin_transaction()
    new.send("out", b"new", partition=0)
    new.commit_transaction()
    assert _committed(lg, 0) == [b"new"]


@pytest.mark.parametrize("snapshots", [True, False])
def test_the_fence_survives_a_reopen(tmp_path: pathlib.Path, snapshots: bool) -> None:
    """The partitions still refuse the old epoch after a reopen: their producer state loaded
    from a producer snapshot, or (none left) rebuilt from the batch headers, markers included."""
    now = [1_000_000]
    lg = _open(tmp_path / "log", now)
    lg.create_topic("out", partitions=PARTS)
    p = _open_transaction(lg)
    now[0] += TIMEOUT_MS + 1
    lg._transactions().expire()
    lg.close()
    if not snapshots:
        for snap in (tmp_path / "log").glob("out-*/*.snapshot"):
            snap.unlink()
    lg = _open(tmp_path / "log", now)
    for part in range(PARTS):
        with pytest.raises(ProducerFencedError):
            lg._partition_of("out", part).append_encoded(
                _zombie_batch(p.producer_id, p.producer_epoch, now[0]))
        assert lg.describe_producers("out", part)[0].epoch == p.producer_epoch + 1
    lg.close()


def test_init_after_a_timeout_gets_two_epochs_more(log: tuple[embedlog.Log, list[int]]
                                                   ) -> None:
    """Kafka's InitProducerId after a timeout's fence bumps the fenced epoch again: the new
    producer's epoch is the timed-out one + 2; it starts again at sequence 0 everywhere."""
    lg, now = log
    p = _open_transaction(lg)
    now[0] += TIMEOUT_MS + 1
    q = lg.producer(transactional_id="t")
    q.init_transactions()
    assert (q.producer_id, q.producer_epoch) == (p.producer_id, p.producer_epoch + 2)
    q.begin_transaction()
    for part in range(PARTS):
        q.send("out", b"new%d" % part, partition=part)
    q.commit_transaction()
    for part in range(PARTS):
        assert _committed(lg, part) == [b"new%d" % part]
        assert [m[1] for m in _markers(lg, part)] == [p.producer_epoch + 1, q.producer_epoch]


def test_a_crash_between_decision_and_markers_recovers_them(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process dies at the first marker of the timeout's abort: the decision (with the
    bumped epoch) was durable, so recovery writes the same bumped-epoch markers."""
    now = [1_000_000]
    lg = _open(tmp_path / "log", now)
    lg.create_topic("out", partitions=PARTS)
    p = _open_transaction(lg)
    now[0] += TIMEOUT_MS + 1

    def crash(*args: Any) -> None:
        raise _Crash

    with monkeypatch.context() as m:
        m.setattr(coord, "write_marker", crash)
        with pytest.raises(_Crash):
            lg._transactions().expire()
    state = TxnStateLog(str(tmp_path / "log" / "embedlog.transactions"))
    assert state.open(clean=False)["t"]["epoch"] == p.producer_epoch + 1  # durable already
    state.abandon()
    lg.close()
    lg = _open(tmp_path / "log", now)
    for part in range(PARTS):
        assert _markers(lg, part) == [(p.producer_id, p.producer_epoch + 1, fmt.CONTROL_ABORT)]
        assert _committed(lg, part) == []
    q = lg.producer(transactional_id="t")
    q.init_transactions()
    assert q.producer_epoch == p.producer_epoch + 2
    lg.close()


def test_an_exhausted_epoch_is_bumped_to_the_fence_epoch_then_rotated(
        log: tuple[embedlog.Log, list[int]]) -> None:
    """A producer at the highest epoch handed out (32766) times out: its markers carry 32767,
    which no producer is ever handed; the id's next init gets a new producer id, epoch 0."""
    lg, now = log
    p = _open_transaction(lg, epoch=coord._MAX_EPOCH)
    assert p.producer_epoch == coord._MAX_EPOCH
    now[0] += TIMEOUT_MS + 1
    q = lg.producer(transactional_id="t")
    q.init_transactions()
    for part in range(PARTS):
        assert _markers(lg, part) == [(p.producer_id, coord._MAX_EPOCH + 1, fmt.CONTROL_ABORT)]
    assert q.producer_id != p.producer_id and q.producer_epoch == 0


def test_an_epoch_at_int16_max_is_kept_and_still_fenced(
        log: tuple[embedlog.Log, list[int]]) -> None:
    """An entry already at 32767 (never handed out: only a state log written otherwise) cannot
    be bumped: as Kafka's coordinator, the markers keep it; a producer of it is still fenced."""
    lg, now = log
    p = _open_transaction(lg)
    txn = lg._transactions()
    txn.entries["t"].epoch = coord._FENCE_EPOCH_MAX
    now[0] += TIMEOUT_MS + 1
    txn.expire()
    for part in range(PARTS):
        assert _markers(lg, part) == [(p.producer_id, coord._FENCE_EPOCH_MAX, fmt.CONTROL_ABORT)]
    assert txn.entries["t"].state == "CompleteAbort"
    with pytest.raises(ProducerFencedError):
        txn.add_partitions("t", p.producer_id, coord._FENCE_EPOCH_MAX, [("out", 0)])
    q = lg.producer(transactional_id="t")
    q.init_transactions()
    assert q.producer_id != p.producer_id and q.producer_epoch == 0


@pytest.mark.parametrize("field,value", [("epoch", 32768), ("epoch", -1),
                                         ("producer_id", 2**63), ("producer_id", -2)])
def test_a_state_entry_out_of_range_is_refused(tmp_path: pathlib.Path, field: str,
                                               value: int) -> None:
    now = [1_000_000]
    lg = _open(tmp_path / "log", now)
    lg.producer(transactional_id="t").init_transactions()
    lg.close()
    state = TxnStateLog(str(tmp_path / "log" / "embedlog.transactions"))
    entry = state.open(clean=True)["t"]
    state.append("t", {**entry, field: value}, sync=True)
    state.close()
    with pytest.raises(CorruptCheckpointError):
        _open(tmp_path / "log", now).producer(transactional_id="t").init_transactions()
