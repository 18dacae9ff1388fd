"""The transaction coordinator: each transactional id's producer id, epoch and transaction.

Kafka keeps this in the ``__transaction_state`` topic; embedlog keeps it in one file of the
log folder, ``embedlog.transactions`` (:data:`embedlog.naming.TXN_STATE_FILE`), replaced
atomically (:func:`embedlog._io.write_atomic`) at every state change. Layout (JSON)::

    {"version": 1, "transactions": {"<transactional id>": {
        "producer_id": 7, "epoch": 3, "state": "Ongoing", "timeout_ms": 60000,
        "started_ms": 1700000000000,
        "partitions": [["orders", 0], ...],
        "offsets": {"<group>": [["input", 0, 1042], ...]}}}}

The protocol is Kafka's two-phase commit:

1. ``Empty``/``Complete*`` -> ``Ongoing``: a partition is recorded (and the file made durable)
   **before** the transaction's first batch reaches it, and group offsets before they are
   accepted; so the file always names every partition that may hold the transaction's data;
2. ``PrepareCommit``/``PrepareAbort``: written once every data batch is durable. This is the
   decision: from here on the transaction completes that way whatever happens;
3. the markers (a COMMIT or ABORT control batch of the producer id and epoch) are appended to
   every recorded partition and fsynced; on commit the group offsets are merged into the
   groups' committed offsets;
4. ``CompleteCommit``/``CompleteAbort``, partitions and offsets emptied.

A crash anywhere is settled when the log is next opened for writing (:meth:`recover`): a
``Prepare*`` state is carried forward (markers only where the producer's transaction is still
open, so none is written twice); an ``Ongoing`` one is aborted, since the writer lock proves its
producer dead. So a reader sees a transaction committed everywhere or aborted everywhere.

**Fencing**: :meth:`init_producer` bumps the epoch of the transactional id (a new producer id
when the epoch would overflow), after settling what the older producer left. A producer whose
epoch is no longer the id's current one gets :class:`~embedlog.errors.ProducerFencedError` from
every call. A transaction open longer than its ``timeout_ms`` is aborted and its producer
fenced the next time the coordinator is used (Kafka's ``transaction.timeout.ms``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from . import _io
from .errors import CorruptCheckpointError, ProducerFencedError, UnknownTopicError, UsageError
from .groups import OffsetStore, group_directory
from .naming import TXN_STATE_FILE
from .partition import Partition
from .producer_state import allocate_producer_id
from .records import TopicPartition
from .segment import format as fmt
from .transactions import aborted_ranges

__all__ = ["TxnCoordinator", "TxnEntry", "write_marker"]

_VERSION: Final = 1
_MAX_STATE_BYTES: Final = 64 * 1024 * 1024
"""The most bytes of ``embedlog.transactions`` read (a regular file only, never followed)."""
_STATES: Final = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                            "CompleteCommit", "CompleteAbort"})
_MAX_EPOCH: Final = 32766


class _TxnLog(Protocol):
    path: str

    def clock(self) -> int: ...
    def _partition_of(self, topic: str, partition: int) -> Partition: ...


@dataclass(slots=True)
class TxnEntry:
    """One transactional id's row of the state file."""

    producer_id: int
    epoch: int
    state: str = "Empty"
    timeout_ms: int = 60000
    started_ms: int = -1
    partitions: list[tuple[str, int]] = field(default_factory=list)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "producer_id": self.producer_id, "epoch": self.epoch, "state": self.state,
            "timeout_ms": self.timeout_ms, "started_ms": self.started_ms,
            "partitions": [list(tp) for tp in self.partitions],
            "offsets": {g: [[t, p, o] for (t, p), o in offs.items()]
                        for g, offs in self.offsets.items()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, raw: Any) -> TxnEntry:
        """Parse one row; ValueError/TypeError/KeyError on anything malformed."""
        state = raw["state"]
        if state not in _STATES:
            raise ValueError(f"unknown state {state!r}")
        ints = [raw[k] for k in ("producer_id", "epoch", "timeout_ms", "started_ms")]
        if not all(type(v) is int for v in ints):
            raise TypeError("integer fields expected")
        parts = [(_str(t), _int(p)) for t, p in raw["partitions"]]
        offsets = {_str(g): {(_str(t), _int(p)): _int(o) for t, p, o in rows}
                   for g, rows in raw["offsets"].items()}
        return cls(ints[0], ints[1], state, ints[2], ints[3], parts, offsets)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("string expected")
    return v


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise TypeError("non-negative integer expected")
    return v


def write_marker(p: Partition, producer_id: int, epoch: int, commit: bool, now: int) -> None:
    """Append a COMMIT or ABORT marker of ``producer_id``/``epoch`` to ``p`` (not synced)."""
    key, value = fmt.control_record(fmt.CONTROL_COMMIT if commit else fmt.CONTROL_ABORT)
    batch = fmt.encode_batch([value], keys=[key], timestamps=now, producer_id=producer_id,
                             producer_epoch=epoch, is_transactional=True, is_control=True)
    p.append_encoded(bytearray(batch))


class TxnCoordinator:
    """The state file of one log, opened for writing; every method is serialised by ``lock``."""

    def __init__(self, log: _TxnLog, max_producer_id: Callable[[], int]) -> None:
        self.log = log
        self.path = os.path.join(log.path, TXN_STATE_FILE)
        self.lock = threading.RLock()
        self._max_producer_id = max_producer_id
        self.entries: dict[str, TxnEntry] = self._load()

    # ------------------------------------------------------------------ the file

    @staticmethod
    def present(directory: str) -> bool:
        """Whether the log in ``directory`` has a state file (a coordinator to recover)."""
        return os.path.lexists(os.path.join(directory, TXN_STATE_FILE))

    def _load(self) -> dict[str, TxnEntry]:
        data = _io.read_regular(self.path, _MAX_STATE_BYTES + 1, error=CorruptCheckpointError)
        if data is None:
            return {}
        if len(data) > _MAX_STATE_BYTES:
            raise CorruptCheckpointError(f"transaction state is larger than {_MAX_STATE_BYTES} "
                                         "bytes", path=self.path)
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise CorruptCheckpointError(f"unreadable transaction state: {exc}",
                                         path=self.path) from exc
        try:
            if raw["version"] != _VERSION:
                raise ValueError(f"version {raw['version']!r}")
            return {_str(tid): TxnEntry.from_json(e) for tid, e in raw["transactions"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptCheckpointError(f"malformed transaction state: {exc!r}",
                                         path=self.path) from exc

    def _persist(self) -> None:
        body = {"version": _VERSION,
                "transactions": {t: e.to_json() for t, e in sorted(self.entries.items())}}
        _io.write_atomic(self.path, json.dumps(body, sort_keys=True).encode())

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        """Settle what a crashed writer left: complete ``Prepare*``, abort ``Ongoing``."""
        with self.lock:
            for entry in self.entries.values():
                self._settle(entry, recovering=True)

    def _settle(self, entry: TxnEntry, *, recovering: bool) -> None:
        if entry.state == "Ongoing":
            entry.state = "PrepareAbort"
            self._persist()
        if entry.state in ("PrepareCommit", "PrepareAbort"):
            self._complete(entry, recovering=recovering)

    def _complete(self, entry: TxnEntry, *, recovering: bool) -> None:
        """Phase 2: markers everywhere (durable), group offsets on commit, then Complete."""
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
        if commit:
            for group, offsets in entry.offsets.items():
                gdir = group_directory(self.log.path, group)
                OffsetStore(gdir, f"{gdir}/lock").commit(
                    {TopicPartition(t, p): o for (t, p), o in offsets.items()})
        entry.state = "CompleteCommit" if commit else "CompleteAbort"
        entry.partitions, entry.offsets, entry.started_ms = [], {}, -1
        self._persist()

    # ------------------------------------------------------------------ producers

    def init_producer(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """Settle the id's previous transaction, bump its epoch (fencing any older producer)
        and return the new ``(producer id, epoch)``."""
        with self.lock:
            self._expire()
            entry = self.entries.get(transactional_id)
            if entry is not None:
                self._settle(entry, recovering=True)
            if entry is None or entry.epoch >= _MAX_EPOCH:
                pid = allocate_producer_id(self.log.path, self._max_producer_id)
                entry = TxnEntry(pid, 0)
            else:
                entry = TxnEntry(entry.producer_id, entry.epoch + 1)
            entry.timeout_ms = timeout_ms
            self.entries[transactional_id] = entry
            self._persist()
            return entry.producer_id, entry.epoch

    def _current(self, tid: str, pid: int, epoch: int) -> TxnEntry:
        """The id's entry, after expiring timed-out transactions; fenced if not ours."""
        self._expire()
        entry = self.entries.get(tid)
        if entry is None or entry.producer_id != pid or entry.epoch != epoch:
            raise ProducerFencedError(
                f"transactional id {tid!r}: producer {pid} epoch {epoch} was fenced by a newer "
                "producer (or its transaction timed out)"
            )
        return entry

    def _expire(self) -> None:
        now = self.log.clock()
        for entry in self.entries.values():
            if entry.state == "Ongoing" and now - entry.started_ms > entry.timeout_ms:
                self._settle(entry, recovering=False)
                entry.epoch += 1  # fence the producer that let it time out
                self._persist()

    def _ongoing(self, entry: TxnEntry) -> None:
        if entry.state != "Ongoing":
            entry.state, entry.started_ms = "Ongoing", self.log.clock()

    def add_partitions(self, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]) -> None:
        """Record partitions the transaction is about to write (durable on return)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            new = [tp for tp in tps if tp not in entry.partitions]
            if new or entry.state != "Ongoing":
                self._ongoing(entry)
                entry.partitions.extend(new)
                self._persist()

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str,
                    offsets: Mapping[tuple[str, int], int]) -> None:
        """Record group offsets to commit with the transaction (durable on return)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            group_directory(self.log.path, group)  # validates the name
            self._ongoing(entry)
            entry.offsets.setdefault(group, {}).update(offsets)
            self._persist()

    def end(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """Commit or abort the id's transaction (the caller made its data durable)."""
        with self.lock:
            entry = self._current(tid, pid, epoch)
            if entry.state != "Ongoing":
                return  # nothing was written or sent: an empty transaction
            entry.state = "PrepareCommit" if commit else "PrepareAbort"
            self._persist()
            self._complete(entry, recovering=False)
