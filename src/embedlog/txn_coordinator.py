"""The transaction coordinator: each transactional id's producer id, epoch and transaction.

Kafka keeps this in the ``__transaction_state`` topic; embedlog keeps it in the log folder's
state log ``embedlog.transactions`` (:mod:`embedlog.txn_state_log`: append-only, CRC-framed,
compacted), one record per state change of an id, the latest record of an id being its entry::

    {"producer_id": 7, "epoch": 3, "state": "Ongoing", "timeout_ms": 60000,
     "started_ms": 1700000000000, "last_ms": 1700000000000,
     "partitions": [["orders", 0], ...],
     "offsets": {"<group>": [["input", 0, 1042], ...]}}

The protocol is Kafka's two-phase commit:

1. ``Empty``/``Complete*`` -> ``Ongoing``: a partition is recorded, and the record fsynced,
   **before** the transaction's first batch reaches it; so the state log always names every
   partition that may hold the transaction's data. Group offsets are recorded without an
   fsync: only a commit decision, which carries them too, makes them count;
2. ``PrepareCommit``/``PrepareAbort``: written once every data batch is durable. This is the
   decision: from here on the transaction completes that way whatever happens. A commit
   decision is fsynced before any marker; a producer's abort decision is not (a crash before
   it is durable leaves ``Ongoing``, which recovery aborts: the same outcome), a timeout's is
   (it carries the bumped epoch of its markers: **Timeouts** below);
3. the markers (a COMMIT or ABORT control batch of the producer id and epoch) are appended to
   every recorded partition and fsynced; on commit the group offsets are merged into the
   groups' committed offsets;
4. ``CompleteCommit``/``CompleteAbort``, partitions and offsets emptied. This record rides on the
   state log's next fsync (every later fsynced record follows it in the file), except after
   group offsets were committed: then it is fsynced, since a replayed commit must never undo a
   newer offset a consumer committed since.

So a commit of a transaction over ``n`` partitions costs ``2n + 2`` fsyncs (partitions recorded,
data, decision, markers) and no file creation or rename; an abort ``n + 1`` plus, per
partition, its ``.txnindex`` entry (a timeout's abort one more: its decision).

A crash anywhere is settled when the log is next opened for writing (:meth:`recover`): a
``Prepare*`` state is carried forward (markers only where the producer's transaction is still
open, so none is written twice); an ``Ongoing`` one is aborted, since the writer lock proves its
producer dead. So a reader sees a transaction committed everywhere or aborted everywhere.

**Fencing**: :meth:`init_producer` bumps the epoch of the transactional id (a new producer id
once the epoch reaches :data:`_MAX_EPOCH`), after settling what the older producer left: a
transaction it left open is aborted as a timed-out one is (below), so the new producer gets the
epoch + 2 and the partitions refuse the old one. A producer whose epoch is no longer the id's
current one gets :class:`~embedlog.errors.ProducerFencedError` from every call.

**Timeouts** (Kafka's ``transaction.timeout.ms``): a transaction open longer than its
``timeout_ms`` is aborted the next time the coordinator is used, as Kafka's
``abortTimedOutTransactions`` does it (``prepareFenceProducerEpoch``, then the abort): the
epoch is bumped **first**, and ``PrepareAbort`` with the bumped epoch is fsynced before any
marker; the ABORT markers carry the bumped epoch. So each partition of the transaction learns
the new epoch from its marker and refuses a later batch of the old one (its producer state:
:class:`~embedlog.errors.ProducerFencedError`), not only the coordinator; and a crash between
the decision and the markers is recovered with the same markers. A new ``init_transactions``
of the id then gets the bumped epoch + 1 (two above the timed-out producer's), or a new
producer id if the bumped epoch reached :data:`_MAX_EPOCH`.

**Expiration** (Kafka's ``transactional.id.expiration.ms``, default 7 days): an id with no
transaction open and no activity (``last_ms``: its last init, record or end) for that long is
forgotten, the next time the coordinator is used; a producer of it is then fenced, and a new
``init_transactions`` of the id gets a new producer id.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from .errors import CorruptCheckpointError, ProducerFencedError, UnknownTopicError, UsageError
from .groups import OffsetStore, group_directory
from .naming import TXN_STATE_FILE
from .partition import Partition
from .producer_state import allocate_producer_id
from .records import TopicPartition
from .segment import format as fmt
from .transactions import aborted_ranges
from .txn_state_log import TxnStateLog

__all__ = ["TRANSACTIONAL_ID_EXPIRATION_MS", "TxnCoordinator", "TxnEntry", "write_marker"]

TRANSACTIONAL_ID_EXPIRATION_MS: Final = 7 * 24 * 3600 * 1000
"""Kafka's default ``transactional.id.expiration.ms`` (7 days)."""
_STATES: Final = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                            "CompleteCommit", "CompleteAbort"})
_IDLE: Final = frozenset({"Empty", "CompleteCommit", "CompleteAbort"})
_MAX_EPOCH: Final = 32766
"""The highest epoch handed to a producer; an id whose epoch reached it gets a new producer id
at its next :meth:`~TxnCoordinator.init_producer` (Kafka's ``isEpochExhausted``: ``>=
Short.MaxValue - 1``). The one epoch above it is kept for a timeout's fence, so that a producer
of any epoch handed out can always be fenced."""
_FENCE_EPOCH_MAX: Final = 32767
"""int16's maximum: the epoch a timeout's fence can reach; one there cannot be bumped."""


class _TxnLog(Protocol):
    path: str

    def clock(self) -> int: ...
    def _partition_of(self, topic: str, partition: int) -> Partition: ...


@dataclass(slots=True)
class TxnEntry:
    """One transactional id's entry (the value of its records in the state log)."""

    producer_id: int
    epoch: int
    state: str = "Empty"
    timeout_ms: int = 60000
    started_ms: int = -1
    last_ms: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "producer_id": self.producer_id, "epoch": self.epoch, "state": self.state,
            "timeout_ms": self.timeout_ms, "started_ms": self.started_ms,
            "last_ms": self.last_ms,
            "partitions": [list(tp) for tp in self.partitions],
            "offsets": {g: [[t, p, o] for (t, p), o in offs.items()]
                        for g, offs in self.offsets.items()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, raw: Any) -> TxnEntry:
        """Parse one row; ValueError/TypeError/KeyError on anything malformed (``last_ms`` is
        -1 when absent: a legacy file's row)."""
        state = raw["state"]
        if state not in _STATES:
            raise ValueError(f"unknown state {state!r}")
        ints = [raw[k] for k in ("producer_id", "epoch", "timeout_ms", "started_ms")]
        ints.append(raw.get("last_ms", -1))
        if not all(type(v) is int for v in ints):
            raise TypeError("integer fields expected")
        if not (0 <= ints[0] < 2**63 and 0 <= ints[1] <= _FENCE_EPOCH_MAX):
            raise ValueError(f"producer id {ints[0]} or epoch {ints[1]} out of range")
        parts = [(_str(t), _int(p)) for t, p in raw["partitions"]]
        offsets = {_str(g): {(_str(t), _int(p)): _int(o) for t, p, o in rows}
                   for g, rows in raw["offsets"].items()}
        return cls(ints[0], ints[1], state, ints[2], ints[3], ints[4], parts, offsets)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("string expected")
    return v


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise TypeError("non-negative integer expected")
    return v


def write_marker(p: Partition, producer_id: int, epoch: int, commit: bool, now: int,
                 coordinator_epoch: int = 0) -> None:
    """Append a COMMIT or ABORT marker of ``producer_id``/``epoch`` to ``p`` (not synced);
    ``coordinator_epoch`` (int32, >= 0) goes in the marker's value."""
    key, value = fmt.control_record(fmt.CONTROL_COMMIT if commit else fmt.CONTROL_ABORT,
                                    coordinator_epoch)
    batch = fmt.encode_batch([value], keys=[key], timestamps=now, producer_id=producer_id,
                             producer_epoch=epoch, is_transactional=True, is_control=True)
    p.append_encoded(bytearray(batch))


class TxnCoordinator:
    """The transaction state of one log, opened for writing; every method is serialised by
    ``lock``. ``clean``: the log was last closed cleanly (damage in the state log is then
    never a torn tail)."""

    def __init__(self, log: _TxnLog, max_producer_id: Callable[[], int], *,
                 clean: bool = False,
                 transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS) -> None:
        self.log = log
        self.path = os.path.join(log.path, TXN_STATE_FILE)
        self.lock = threading.RLock()
        self.id_expiration_ms = transactional_id_expiration_ms
        self._max_producer_id = max_producer_id
        self.store = TxnStateLog(self.path)
        self._changed: dict[str, bool] = {}
        """Ids whose entry changed since the last :meth:`_persist`, and whether the record
        must be durable before the caller goes on."""
        self.entries: dict[str, TxnEntry] = self._load(clean)

    # ------------------------------------------------------------------ the file

    @staticmethod
    def present(directory: str) -> bool:
        """Whether the log in ``directory`` has a state file (a coordinator to recover)."""
        return os.path.lexists(os.path.join(directory, TXN_STATE_FILE))

    def _load(self, clean: bool) -> dict[str, TxnEntry]:
        try:
            raw = self.store.open(clean=clean)
            try:
                entries = {tid: TxnEntry.from_json(e) for tid, e in raw.items()}
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise CorruptCheckpointError(f"malformed transaction state: {exc!r}",
                                             path=self.path) from exc
            now = self.log.clock()
            for entry in entries.values():
                if entry.last_ms < 0:  # a legacy file's entry: active as of now
                    entry.last_ms = now
            if self.store.legacy:
                self.store.rewrite({t: e.to_json() for t, e in entries.items()})
            return entries
        except BaseException:
            self.store.abandon()
            raise

    def _touch(self, tid: str, *, durable: bool = False) -> None:
        """Note that ``tid``'s entry changed (``durable``: its record must reach the disk
        before the caller goes on)."""
        self._changed[tid] = self._changed.get(tid, False) or durable

    def _persist(self) -> None:
        """Append one record per entry changed since the last call (a removed entry's record
        forgets the id); fsync when one of them must be durable (module notes)."""
        changed, self._changed = self._changed, {}
        for tid in changed:
            entry = self.entries.get(tid)
            self.store.append(tid, None if entry is None else entry.to_json(), sync=False)
        if any(changed.values()):
            self.store.sync()

    def close(self) -> None:
        """Make the state durable and close the file (the log's clean close)."""
        with self.lock:
            self.store.close()

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Settle what a crashed writer left: complete ``Prepare*``, abort ``Ongoing``."""
        with self.lock:
            for tid in list(self.entries):
                self._settle(tid, recovering=True)

    def _settle(self, tid: str, *, recovering: bool) -> None:
        entry = self.entries[tid]
        if entry.state == "Ongoing":
            entry.state = "PrepareAbort"  # no fsync: a lost abort decision is an abort again
            self._touch(tid)
            self._persist()
        if entry.state in ("PrepareCommit", "PrepareAbort"):
            self._complete(tid, recovering=recovering)

    def _complete(self, tid: str, *, recovering: bool) -> None:
        """Phase 2: markers everywhere (durable), group offsets on commit, then Complete."""
        entry = self.entries[tid]
        commit = entry.state == "PrepareCommit"
        now = self.log.clock()
        for topic, index in entry.partitions:
            try:
                p = self.log._partition_of(topic, index)
            except (UnknownTopicError, UsageError):
                continue  # the topic was deleted meanwhile: nothing left to mark
            if recovering and entry.producer_id not in aborted_ranges(
                    p.segments, p.end_offset).open:
                continue
            write_marker(p, entry.producer_id, entry.epoch, commit, now)
            p.sync()
        offsets = commit and bool(entry.offsets)
        if commit:
            for group, rows in entry.offsets.items():
                gdir = group_directory(self.log.path, group)
                OffsetStore(gdir, f"{gdir}/lock").commit(
                    {TopicPartition(t, p): o for (t, p), o in rows.items()})
        entry.state = "CompleteCommit" if commit else "CompleteAbort"
        entry.partitions, entry.offsets, entry.started_ms = [], {}, -1
        # Complete rides on the next fsync, unless group offsets were committed: a consumer
        # may commit newer ones at once, which a replayed commit must never undo.
        self._touch(tid, durable=offsets)
        self._persist()

    # ------------------------------------------------------------------ producers

    def init_producer(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """Settle the id's previous transaction, bump its epoch (fencing any older producer)
        and return the new ``(producer id, epoch)``. A transaction still open is aborted as a
        timed-out one is (:meth:`_fence`: ABORT markers of the epoch + 1, as Kafka's
        ``InitProducerId`` fences an ongoing transaction), so the new producer gets the epoch
        + 2; one decided and not completed is completed with its own epoch first."""
        with self.lock:
            self._expire()
            entry = self.entries.get(transactional_id)
            if entry is not None and entry.state == "Ongoing":
                self._fence(transactional_id)  # a live producer's open transaction
            elif entry is not None:
                self._settle(transactional_id, recovering=True)
            if entry is None or entry.epoch >= _MAX_EPOCH:
                pid = allocate_producer_id(self.log.path, self._max_producer_id)
                entry = TxnEntry(pid, 0)
            else:
                entry = TxnEntry(entry.producer_id, entry.epoch + 1)
            entry.timeout_ms, entry.last_ms = timeout_ms, self.log.clock()
            self.entries[transactional_id] = entry
            self._touch(transactional_id)  # durable with the first partition recorded
            self._persist()
            return entry.producer_id, entry.epoch

    def _current(self, tid: str, pid: int, epoch: int) -> TxnEntry:
        """The id's entry, after expiring timed-out transactions; fenced if not ours."""
        self._expire()
        entry = self.entries.get(tid)
        if entry is None or (entry.producer_id, entry.epoch) != (pid, epoch) \
                or epoch > _MAX_EPOCH:  # a fence's epoch: no producer was handed it
            raise ProducerFencedError(
                f"transactional id {tid!r}: producer {pid} epoch {epoch} was fenced by a newer "
                "producer (or its transaction timed out, or the id expired)"
            )
        entry.last_ms = self.log.clock()
        return entry

    def _expire(self) -> None:
        """Abort (and fence) transactions open past their timeout; forget ids idle past
        ``transactional.id.expiration.ms`` (their producers are fenced)."""
        now = self.log.clock()
        for tid, entry in list(self.entries.items()):
            if entry.state == "Ongoing" and now - entry.started_ms > entry.timeout_ms:
                self._fence(tid)
            elif entry.state in _IDLE and now - entry.last_ms >= self.id_expiration_ms:
                del self.entries[tid]
                self._touch(tid)
        if self._changed:
            self._persist()

    def _fence(self, tid: str) -> None:
        """Abort ``tid``'s open transaction (timed out, or superseded by a new producer of the id)
        and fence its producer, as Kafka does: the epoch bumped first, ``PrepareAbort`` with it
        fsynced, then the ABORT markers with it on every recorded partition (each partition then
        refuses the old epoch) and Complete.

        The decision is durable before any marker (unlike a producer's own abort): a crash after
        it recovers to the bumped-epoch markers; one before it to an abort with the old epoch,
        no marker of the bumped one being on disk yet (the writer lock proves the producer dead,
        so nothing is left to fence).

        Exhaustion: an epoch at :data:`_FENCE_EPOCH_MAX` (int16's maximum; no epoch handed out
        is above :data:`_MAX_EPOCH`, so only a state log written otherwise holds one) is not
        bumped, as Kafka's ``prepareFenceProducerEpoch`` keeps ``Short.MaxValue`` rather than
        overflow (its Java coordinator; the Scala one of 3.x threw ``IllegalStateException``
        there): the markers carry it unchanged, the coordinator still fences a producer of it
        (:meth:`_current` refuses every epoch above :data:`_MAX_EPOCH`), and the id's next
        :meth:`init_producer` gets a new producer id."""
        entry = self.entries[tid]
        if entry.epoch < _FENCE_EPOCH_MAX:
            entry.epoch += 1
        entry.state = "PrepareAbort"
        self._touch(tid, durable=True)  # the bumped epoch is durable before its markers
        self._persist()
        self._complete(tid, recovering=False)

    def expire(self) -> None:
        """Abort (and fence) the transactions open past their timeout, and forget the ids idle
        past ``transactional.id.expiration.ms``, now (any use of the coordinator does)."""
        with self.lock:
            self._expire()

    def ongoing(self, producer_id: int, epoch: int) -> str | None:
        """The transactional id whose transaction of ``producer_id``/``epoch`` is not complete
        (``Ongoing`` or ``Prepare*``), else ``None``."""
        with self.lock:
            for tid, entry in self.entries.items():
                if (entry.producer_id, entry.epoch) == (producer_id, epoch) \
                        and entry.state not in _IDLE:
                    return tid
            return None

    def _ongoing(self, tid: str, entry: TxnEntry) -> None:
        if entry.state != "Ongoing":
            entry.state, entry.started_ms = "Ongoing", self.log.clock()
        self._touch(tid)

    def add_partitions(self, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]) -> None:
        """Check that the transaction is still the id's current one and record the partitions
        of ``tps`` it is about to write that are new to it (durable on return)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            new = [tp for tp in tps if tp not in entry.partitions]
            if new or entry.state != "Ongoing":
                self._ongoing(tid, entry)
                entry.partitions.extend(new)
                self._touch(tid, durable=True)
                self._persist()

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str,
                    offsets: Mapping[tuple[str, int], int]) -> None:
        """Record group offsets to commit with the transaction (durable with the commit
        decision, which carries them too)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            group_directory(self.log.path, group)  # validates the name
            self._ongoing(tid, entry)
            entry.offsets.setdefault(group, {}).update(offsets)
            self._persist()

    def end(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """Commit or abort the id's transaction (the caller made its data durable)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            if entry.state != "Ongoing":
                self._touch(tid)
                self._persist()
                return  # nothing was written or sent: an empty transaction
            entry.state = "PrepareCommit" if commit else "PrepareAbort"
            self._touch(tid, durable=commit)  # the commit decision is durable before a marker
            self._persist()
            self._complete(tid, recovering=False)
