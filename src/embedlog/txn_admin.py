"""Finding and aborting hanging transactions (Kafka's KIP-664: ``kafka-transactions.sh``
``describe-producers``, ``find-hanging``, ``abort``).

A transaction is *hanging* in a partition when the partition's producer state
(:class:`~embedlog.producer_state.ProducerStateTable`) still has it open -- data written, no
COMMIT/ABORT marker after it -- while nothing will ever write that marker: the transaction
coordinator (:mod:`embedlog.txn_coordinator`) has no ongoing transaction of that producer id and
epoch. It happens when damage makes recovery cut a marker off the active segment's tail: the
coordinator recorded the transaction complete, so it never writes the marker again, and the
partition's last stable offset stays below the transaction for good (``read_committed`` readers
never pass it), even after its transactional id is initialised again.

:class:`TransactionAdmin` (what :class:`~embedlog.Log` extends; the writer's calls only, since
the producer state is the writer's):

* :meth:`~TransactionAdmin.describe_producers`: a partition's producers as its state holds them
  (:class:`ProducerInfo`), with the first offset of each one's open transaction;
* :meth:`~TransactionAdmin.find_hanging_transactions`: the open transactions the coordinator
  has no ongoing transaction for, and those whose producer wrote nothing to the partition for
  longer than a maximum transaction timeout (Kafka measures a transaction's duration from its
  producer's last write too), by default Kafka's 15 minutes (``--max-transaction-timeout`` of
  ``kafka-transactions.sh find-hanging``, and its ``transaction.max.timeout.ms``) --
  :class:`HangingTransaction`. The coordinator and the partitions are the writer's, in this
  process, and the coordinator keeps a transaction ongoing until its last marker is written:
  one it has not ongoing is hanging at any age, the timeout only decides about those it has;
* :meth:`~TransactionAdmin.abort_transaction`: appends an ABORT marker of the producer id and
  epoch of the transaction open at a start offset, or of a producer id's open transaction
  (Kafka's older form: ``--producer-id``, ``--producer-epoch``, ``--coordinator-epoch``; the
  epoch must be the open transaction's, the coordinator epoch goes in the marker, a negative
  one as 0), with its ``.txnindex`` entry (:func:`~embedlog.txn_coordinator.write_marker`),
  and fsyncs it. Its records become aborted, the last stable offset moves past the marker.
  Refused (:class:`~embedlog.errors.TransactionStateError`) when no transaction is open at that
  offset or of that producer, when the producer's epoch differs, or when the coordinator still
  has that producer id and epoch's transaction ongoing (after aborting those past their
  timeout): its producer, or its ``transaction.timeout.ms``, ends it.

Locks: the coordinator's lock, then the partition's (the coordinator's own order: it writes
markers under its lock), so no producer of the id records or writes anything between the check
and the marker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from . import _validate
from .errors import ArgumentOutOfRangeError, TransactionStateError, UsageError
from .log_folder import LogFolder
from .partition import Partition
from .txn_coordinator import TxnCoordinator, write_marker

__all__ = ["DEFAULT_MAX_TRANSACTION_TIMEOUT_MS", "HangingTransaction", "ProducerInfo",
           "TransactionAdmin"]

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS: Final = 15 * 60_000
"""``find_hanging_transactions``' default: Kafka's ``find-hanging --max-transaction-timeout``
(15 minutes, its broker's ``transaction.max.timeout.ms``)."""


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One producer id of a partition as its producer state holds it (a row of Kafka's
    ``describe-producers``)."""

    producer_id: int
    epoch: int
    """The newest epoch the producer id wrote to the partition with."""
    last_sequence: int
    """Its last batch's last sequence number (-1: none, e.g. only markers)."""
    last_timestamp: int
    """Its last write to the partition, epoch milliseconds (the clock at the append, or the
    batch's max timestamp when the state was rebuilt from the log)."""
    coordinator_epoch: int
    """As a Kafka producer snapshot recorded it (-1: none)."""
    txn_start_offset: int | None
    """The first offset of its open transaction; ``None`` when none is open."""


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """A transaction open in a partition that nothing will end (a row of Kafka's
    ``find-hanging``). ``reason``: ``"no-ongoing-transaction"`` (the coordinator has no
    ongoing transaction of this producer id and epoch) or ``"timed-out"`` (it has one, but the
    producer wrote nothing here for longer than the maximum transaction timeout given)."""

    topic: str
    partition: int
    producer_id: int
    epoch: int
    start_offset: int
    last_timestamp: int
    duration_ms: int
    """Since the producer's last write to the partition (``now - last_timestamp``)."""
    reason: Literal["no-ongoing-transaction", "timed-out"]


class TransactionAdmin(LogFolder):
    """The hanging-transaction calls of a :class:`~embedlog.Log` (module notes)."""

    def describe_producers(self, topic: str, partition: int) -> list[ProducerInfo]:
        """The producers of a partition's producer state, by producer id: epoch, last
        sequence, last write and the first offset of the open transaction (writer only)."""
        self._check_writer()
        p = self._partition_of(topic, partition)
        with p.lock:
            return _producers(p)

    def find_hanging_transactions(
        self, topic: str | None = None, partitions: Sequence[int] | None = None, *,
        max_transaction_timeout_ms: int | None = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    ) -> list[HangingTransaction]:
        """The hanging transactions of ``topic``'s ``partitions`` (default: every partition;
        every topic when ``topic`` is ``None``, which takes no ``partitions``): open in the
        partition while the coordinator has no ongoing transaction of their producer id and
        epoch, or open with no write by their producer for longer than
        ``max_transaction_timeout_ms`` (default 15 minutes, Kafka's; ``None``: only the
        former). Changes nothing (writer only)."""
        self._check_writer()
        if max_transaction_timeout_ms is not None:
            _validate.count(max_transaction_timeout_ms, "max_transaction_timeout_ms", 0)
        chosen = None if partitions is None else _validate.listed(partitions, of="int")
        if chosen is not None and topic is None:
            raise UsageError("find_hanging_transactions: partitions need a topic")
        with self._lock:  # topic changes
            names = sorted(self._topics.by_name) if topic is None else [topic]
        coordinator, now = self._coordinator(), self.clock()
        found: list[HangingTransaction] = []
        for name in names:
            for index in range(len(self._topic(name).partitions)) if chosen is None else chosen:
                p = self._partition_of(name, index)
                found.extend(_hanging_in(p, coordinator, now, max_transaction_timeout_ms))
        return found

    def abort_transaction(
        self, topic: str, partition: int, start_offset: int | None = None, *,
        producer_id: int | None = None, producer_epoch: int | None = None,
        coordinator_epoch: int | None = None,
    ) -> ProducerInfo:
        """Abort a transaction open in the partition -- the one open at ``start_offset``, or
        the one of ``producer_id``, whose epoch must be ``producer_epoch`` -- : append an ABORT
        marker of its producer id and epoch (with its ``.txnindex`` entry and
        ``coordinator_epoch``, default 0, a negative one written as 0) and make it durable.
        Returns the producer as it was before. Raises :class:`~embedlog.errors.UsageError` for
        anything but ``start_offset`` alone or ``producer_id`` with ``producer_epoch`` (and
        optionally ``coordinator_epoch``), :class:`~embedlog.errors.TransactionStateError` when
        no transaction is open at that offset or of that producer, its epoch differs, or the
        coordinator still has that producer's transaction ongoing (module notes; writer
        only)."""
        self._check_writer()
        find, marker_epoch = _abort_target(start_offset, producer_id, producer_epoch,
                                           coordinator_epoch)
        p = self._partition_of(topic, partition)
        coordinator = self._coordinator()
        with contextlib.nullcontext() if coordinator is None else coordinator.lock:
            if coordinator is not None:
                coordinator.expire()  # what timed out is aborted first
            with p.lock:
                info = find(p)
                tid = None if coordinator is None else \
                    coordinator.ongoing(info.producer_id, info.epoch)
                if tid is not None:
                    raise TransactionStateError(
                        f"{topic}-{partition}: the transaction open at offset "
                        f"{info.txn_start_offset} (producer {info.producer_id} epoch "
                        f"{info.epoch}) is ongoing for transactional id {tid!r}: its producer, "
                        "or its timeout, ends it")
                write_marker(p, info.producer_id, info.epoch, False, self.clock(), marker_epoch)
            p.sync()
        return info

    def _coordinator(self) -> TxnCoordinator | None:
        """The coordinator, if the log has one (opened at the writer's open when its state
        file exists, or since by a transactional producer); none is created here."""
        with self._lock:
            return self._txn


def _hanging_in(p: Partition, coordinator: TxnCoordinator | None, now: int,
                max_ms: int | None) -> Iterator[HangingTransaction]:
    """The hanging transactions of ``p`` (:meth:`TransactionAdmin.find_hanging_transactions`)."""
    with p.lock:
        infos = _producers(p)
    for info in infos:
        if info.txn_start_offset is None:
            continue
        live = coordinator is not None and \
            coordinator.ongoing(info.producer_id, info.epoch) is not None
        duration = now - info.last_timestamp
        if live and (max_ms is None or duration <= max_ms):
            continue
        yield HangingTransaction(
            p.topic, p.partition, info.producer_id, info.epoch, info.txn_start_offset,
            info.last_timestamp, duration, "timed-out" if live else "no-ongoing-transaction")


def _producers(p: Partition) -> list[ProducerInfo]:
    """The producers of ``p``'s state, by producer id (caller holds ``p.lock``)."""
    state = p.producer_states()
    return [ProducerInfo(pid, e.epoch, e.last_sequence, e.last_ms, e.coordinator_epoch,
                         state.txns.open.get(pid))
            for pid, e in sorted(state.entries.items())]


_INT32: Final = 2**31


def _abort_target(start_offset: int | None, producer_id: int | None, producer_epoch: int | None,
                  coordinator_epoch: int | None
                  ) -> tuple[Callable[[Partition], ProducerInfo], int]:
    """Which open transaction :meth:`TransactionAdmin.abort_transaction` aborts, as a lookup
    in a partition (its caller holds ``p.lock``), and the coordinator epoch of its marker; the
    arguments are checked here, first."""
    if producer_id is None:
        if producer_epoch is not None or coordinator_epoch is not None:
            raise UsageError("abort_transaction: producer_epoch and coordinator_epoch go with "
                             "producer_id")
        if start_offset is None:
            raise UsageError("abort_transaction needs start_offset, or producer_id and "
                             "producer_epoch")
        offset = _validate.offset(start_offset, "start_offset")
        return (lambda p: _open_at(p, offset)), 0
    if start_offset is not None:
        raise UsageError("abort_transaction takes start_offset or producer_id, not both")
    if producer_epoch is None:
        raise UsageError("abort_transaction: producer_id needs producer_epoch")
    pid = _validate.count(producer_id, "producer_id", 0)
    epoch = _validate.count(producer_epoch, "producer_epoch", 0)
    coord = 0 if coordinator_epoch is None else \
        _validate.integer(coordinator_epoch, "coordinator_epoch")
    if not -_INT32 <= coord < _INT32:
        raise ArgumentOutOfRangeError(f"coordinator_epoch must be in [-2**31, 2**31), not {coord}")
    return (lambda p: _open_of(p, pid, epoch)), max(0, coord)  # Kafka's tool: negative -> 0


def _open_of(p: Partition, producer_id: int, epoch: int) -> ProducerInfo:
    """``producer_id``'s producer in ``p``, with an open transaction of ``epoch`` (caller
    holds ``p.lock``); :class:`TransactionStateError` if it has none, or one of another
    epoch."""
    for info in _producers(p):
        if info.producer_id == producer_id and info.txn_start_offset is not None:
            if info.epoch != epoch:
                raise TransactionStateError(
                    f"{p.topic}-{p.partition}: the open transaction of producer {producer_id} "
                    f"has epoch {info.epoch}, not {epoch}")
            return info
    raise TransactionStateError(
        f"{p.topic}-{p.partition}: producer {producer_id} has no open transaction "
        "(embedlog transactions describe-producers lists the open ones)")


def _open_at(p: Partition, start_offset: int) -> ProducerInfo:
    """The producer whose open transaction starts at ``start_offset`` (caller holds
    ``p.lock``); :class:`TransactionStateError` if none."""
    for info in _producers(p):
        if info.txn_start_offset == start_offset:
            return info
    raise TransactionStateError(
        f"{p.topic}-{p.partition}: no transaction is open at offset {start_offset} "
        "(embedlog transactions describe-producers lists the open ones)")
