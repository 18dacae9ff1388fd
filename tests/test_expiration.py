"""Kafka's ``transactional.id.expiration.ms`` (an idle transactional id is forgotten) and
``producer.id.expiration.ms`` (an idle producer's sequence state is dropped), with an injected
clock."""

from __future__ import annotations

import pathlib

import pytest

import embedlog
from embedlog import txn_state_log as tsl
from embedlog.errors import InvalidConfigError, OutOfOrderSequenceError, ProducerFencedError
from embedlog.producer_state import EXPIRATION_CHECK_MS, PRODUCER_ID_EXPIRATION_MS
from embedlog.segment import format as fmt
from embedlog.txn_coordinator import TRANSACTIONAL_ID_EXPIRATION_MS
from embedlog.txn_producer import TransactionalProducer

DAY = 24 * 3600 * 1000
T0 = 1_700_000_000_000


def _open(path: pathlib.Path, now: list[int], **upkeep: int) -> embedlog.Log:
    settings = {k.replace("_", "."): v for k, v in upkeep.items()}
    return embedlog.Log(path, durability="fsync", clock=lambda: now[0],
                        upkeep=settings or False)


def _batch(pid: int, seq: int, n: int = 1, epoch: int = 0) -> bytearray:
    return bytearray(fmt.encode_batch([b"v"] * n, timestamps=T0, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=seq))


def _state_ids(path: pathlib.Path) -> set[str]:
    store = tsl.TxnStateLog(str(path / "embedlog.transactions"))
    try:
        return set(store.open(clean=False))
    finally:
        store.abandon()


def test_defaults_are_kafkas() -> None:
    assert TRANSACTIONAL_ID_EXPIRATION_MS == 7 * DAY
    assert PRODUCER_ID_EXPIRATION_MS == DAY
    cfg = embedlog.config.UpkeepConfig.from_kafka({})
    assert (cfg.transactional_id_expiration_ms, cfg.producer_id_expiration_ms) == (7 * DAY, DAY)
    with pytest.raises(InvalidConfigError):
        embedlog.config.UpkeepConfig.from_kafka({"producer.id.expiration.ms": 0})


# ---------------------------------------------------------------------- transactional ids


def _commit_one(log: embedlog.Log, tid: str, **kw: int) -> TransactionalProducer:
    p = log.producer(transactional_id=tid, **kw)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", tid.encode(), partition=0)
    p.commit_transaction()
    return p


def _left_open(log: embedlog.Log, tid: str, timeout_ms: int) -> TransactionalProducer:
    """A producer of ``tid`` whose transaction wrote ``b"v"`` to out-0 and stays open."""
    p = log.producer(transactional_id=tid, transaction_timeout_ms=timeout_ms)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"v", partition=0)
    p.flush()
    return p


def test_idle_transactional_id_is_forgotten(tmp_path: pathlib.Path) -> None:
    now = [T0]
    log = _open(tmp_path, now)
    log.create_topic("out", partitions=1)
    idle = _commit_one(log, "idle")
    busy = _commit_one(log, "busy")
    now[0] += 7 * DAY - 1
    busy.begin_transaction()
    busy.send("out", b"again", partition=0)
    busy.commit_transaction()  # activity keeps "busy"
    now[0] += 1  # "idle" has been idle exactly 7 days
    _commit_one(log, "other")  # any use of the coordinator expires
    assert _state_ids(tmp_path) == {"busy", "other"}  # the forgetting is recorded
    idle.begin_transaction()
    idle.send("out", b"zombie", partition=0)
    with pytest.raises(ProducerFencedError, match="expired"):
        idle.commit_transaction()
    again = log.producer(transactional_id="idle")
    again.init_transactions()
    assert (again.producer_id != idle.producer_id, again.producer_epoch) == (True, 0)
    log.close()
    log = _open(tmp_path, now)  # forgotten for good, and the rest kept
    b2 = log.producer(transactional_id="busy")
    b2.init_transactions()
    assert (b2.producer_id, b2.producer_epoch) == (busy.producer_id, 1)
    log.close()


def test_open_transaction_is_never_expired_by_idleness(tmp_path: pathlib.Path) -> None:
    now = [T0]
    log = _open(tmp_path, now, transactional_id_expiration_ms=1000)
    log.create_topic("out", partitions=1)
    p = _left_open(log, "t", 10_000)
    now[0] += 5000  # idle past the id expiration, inside the transaction timeout
    _commit_one(log, "u")
    p.commit_transaction()
    assert [r.value for r in log.read("out", 0, 0)][:1] == [b"v"]
    assert log.last_stable_offset("out", 0) == log.end_offset("out", 0)
    now[0] += 1000
    _commit_one(log, "w")
    assert _state_ids(tmp_path) == {"w"}  # configured 1 s: t and u are gone
    log.close()


# ---------------------------------------------------------------------- producer ids


def test_idle_producer_state_is_dropped(tmp_path: pathlib.Path) -> None:
    now = [T0]
    log = _open(tmp_path, now)
    log.create_topic("t", partitions=1)
    p = log._partition_of("t", 0)
    p.append_encoded(_batch(7, 0))
    p.append_encoded(_batch(7, 0))  # a duplicate: nothing written
    assert log.end_offset("t", 0) == 1
    with pytest.raises(OutOfOrderSequenceError):
        p.append_encoded(_batch(7, 5))
    now[0] += DAY - 1
    p.append_encoded(_batch(8, 0))
    with pytest.raises(OutOfOrderSequenceError):
        p.append_encoded(_batch(7, 5))  # not yet a day idle
    now[0] += EXPIRATION_CHECK_MS  # the next check: 7 idle for more than a day, 8 not
    p.append_encoded(_batch(7, 5))  # producer 7 expired: a new producer to the partition
    assert log.end_offset("t", 0) == 3
    assert set(p.producer_states().entries) == {7, 8}
    log.close()


def test_expiration_check_runs_at_most_every_interval(tmp_path: pathlib.Path) -> None:
    now = [T0]
    log = _open(tmp_path, now, producer_id_expiration_ms=2 * EXPIRATION_CHECK_MS)
    log.create_topic("t", partitions=1)
    p = log._partition_of("t", 0)
    p.append_encoded(_batch(1, 0))
    now[0] += EXPIRATION_CHECK_MS // 2
    p.append_encoded(_batch(2, 0))  # checked at T0 + interval/2: next check one interval on
    now[0] += 2 * EXPIRATION_CHECK_MS - EXPIRATION_CHECK_MS // 2  # 1 idle exactly the limit
    p.append_encoded(_batch(2, 1))  # a check is due: producer 1 goes, 2 stays
    assert set(p.producer_states().entries) == {2}
    assert p.producer_states().max_producer_id == 2
    log.close()


def test_producer_with_open_transaction_is_kept(tmp_path: pathlib.Path) -> None:
    now = [T0]
    log = _open(tmp_path, now, producer_id_expiration_ms=1000,
                transactional_id_expiration_ms=10 * DAY)
    log.create_topic("out", partitions=1)
    txn = _left_open(log, "t", DAY)
    p = log._partition_of("out", 0)
    p.append_encoded(_batch(99, 0))
    now[0] += 5000
    p.append_encoded(_batch(98, 0))
    assert txn.producer_id in p.producer_states().entries  # open transaction: kept
    assert 99 not in p.producer_states().entries
    txn.commit_transaction()
    assert log.last_stable_offset("out", 0) == log.end_offset("out", 0)
    log.close()


def test_rebuilt_state_expires_by_batch_timestamps(tmp_path: pathlib.Path) -> None:
    """After a reopen the state is rebuilt from the log: a producer's last write is its last
    batch's timestamp (as Kafka's producer snapshots keep it)."""
    now = [T0]
    log = _open(tmp_path, now)
    log.create_topic("t", partitions=1)
    log._partition_of("t", 0).append_encoded(_batch(5, 0))  # batch timestamp T0
    log.close()
    now[0] = T0 + DAY - 1
    log = _open(tmp_path, now)
    p = log._partition_of("t", 0)
    p.append_encoded(_batch(5, 0))  # still remembered: a duplicate
    assert log.end_offset("t", 0) == 1
    log.close()
    now[0] = T0 + DAY
    log = _open(tmp_path, now)
    p = log._partition_of("t", 0)
    p.append_encoded(_batch(5, 0))  # expired: written again
    assert log.end_offset("t", 0) == 2
    log.close()
