"""An open log folder: the writer lock, recovery on open, close, forks, and finding topics.

:class:`LogFolder` is the part of :class:`~embedlog.Log` that owns the folder's lifecycle; the
public calls (topics, append, read, deletion, compaction, clients) are ``log.py``'s, on top.

* Opening as the writer takes the folder's ``flock`` (:class:`~embedlog._platform.WriterLock`)
  for the object's lifetime, takes the clean-shutdown marker, loads the topic table, recovers
  every partition (validating everything after the recovery point when the last close was not
  clean) and then the transaction coordinator. If any of that fails, what was opened is closed
  and the lock released before the open's own error propagates.
* Opened ``read_only=True`` it takes no lock and writes no byte; topics are listed again when
  a name is not known (the writer may have created it since).
* ``close()`` flushes the healthy partitions, writes the recovery points and (when no partition
  was quarantined and none was poisoned) the clean-shutdown marker, then releases the lock.
  Idempotent. In a ``fork()`` child it only drops the child's descriptor of the lock
  (:mod:`embedlog._fork`); every other call there raises.

Lock: ``_lock`` (re-entrant) serialises topic changes, the open state and lazily created
helpers; it is the first lock of the log's lock order (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from . import _fork, _validate, metadata
from ._client_api import Durability
from ._platform import WriterLock
from .errors import (
    CorruptionError,
    InvalidConfigError,
    LogClosedError,
    ReadOnlyError,
    UnknownTopicError,
)
from .folder_check import prepare_folder
from .naming import validate_topic
from .partition import Partition, now_ms
from .records import TopicPartition
from .tiering.manager import RemoteLogManager
from .topics import Topic, TopicTable
from .txn_coordinator import TRANSACTIONAL_ID_EXPIRATION_MS, TxnCoordinator

__all__ = ["LogFolder"]


class LogFolder(_fork.ForkGuard):
    """The folder of a :class:`~embedlog.Log`: its state until :meth:`_open` opens it."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool, durability: Durability,
                 create: bool, clock: Any, remote_uri: str | None = None) -> None:
        if durability not in ("none", "fsync"):
            raise InvalidConfigError(f"durability must be 'none' or 'fsync', not {durability!r}")
        self.path = os.path.abspath(_validate.local_path(path))
        self.read_only = read_only
        self.durability: Durability = durability
        self.clock = clock or now_ms
        self._lock = threading.RLock()
        self._topics = TopicTable(self.path, writable=not read_only,
                                  fsync=durability == "fsync", clock=self.clock)
        self._closed = False
        self._writer_lock: WriterLock | None = None
        self._create = create
        self._txn: TxnCoordinator | None = None
        self._clean_open = False
        self._txn_id_expiration_ms = TRANSACTIONAL_ID_EXPIRATION_MS
        self._remote_uri = remote_uri
        self._tiering: RemoteLogManager | None = None
        """Tiered storage (:mod:`embedlog.tiering`), when the folder has a remote."""

    def _expirations(self, transactional_id_ms: int, producer_id_ms: int) -> None:
        """Set ``transactional.id.expiration.ms`` and ``producer.id.expiration.ms`` (before
        the open)."""
        self._txn_id_expiration_ms = transactional_id_ms
        self._topics.producer_id_expiration_ms = producer_id_ms

    # ------------------------------------------------------------------ open / close

    def _open(self, adopt: bool) -> None:
        prepare_folder(self.path, writing=not self.read_only, create=self._create, adopt=adopt)
        if self.read_only:
            self._open_tiering()
            self._topics.load()
            return
        self._writer_lock = WriterLock(self.path)
        self._writer_lock.acquire()
        try:
            self._open_tiering()
            clean = self._clean_open = metadata.take_clean_marker(self.path)
            self._topics.load()
            self._topics.recover(clean)
            if TxnCoordinator.present(self.path):
                self._transactions().recover()
        except BaseException:
            # The open's own error is what the caller must see; releasing what it left half
            # open may fail too (e.g. a segment whose index could not be opened), but the
            # writer lock must be released whatever happens.
            try:
                with contextlib.suppress(Exception):
                    self._close_partitions()
            finally:
                self._writer_lock.release()
            raise

    def _open_tiering(self) -> None:
        self._tiering = RemoteLogManager.open(self.path, self._remote_uri,
                                              writable=not self.read_only)
        self._topics.tiering = self._tiering

    def close(self) -> None:
        """Flush, trim indexes, write the checkpoints and the clean-shutdown marker, release the
        lock. Idempotent. In a ``fork()`` child it only drops the child's descriptors."""
        if self._inherited:  # the child's copy of the lock's descriptor goes, nothing else
            self._closed = True
            if self._writer_lock is not None:
                self._writer_lock.release()  # unlocks only in the process that locked
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self.read_only and not self._poisoned():
                    for p in self._topics.healthy():
                        p.flush()
                    self._topics.checkpoint_recovery_points(final=True)
                    self._close_partitions()
                    if not self._topics.kept:  # damage is re-checked by the next open
                        metadata.write_clean_marker(self.path)
                else:
                    self._close_partitions()
            finally:
                if self._tiering is not None:
                    self._tiering.close(self._topics.partitions())
                if self._writer_lock is not None:
                    self._writer_lock.release()

    def _on_fork_child(self) -> None:
        super()._on_fork_child()
        for p in self._topics.partitions():  # a producer's open batches must not land either
            p.refusal = self._inherited_error

    def _poisoned(self) -> bool:
        return any(p.poisoned is not None for p in self._topics.partitions())

    def _close_partitions(self) -> None:
        """Close the transaction state log (synced) and every partition."""
        try:
            if self._txn is not None:
                self._txn.close()
        finally:
            for p in self._topics.partitions():
                p.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (raises in a ``fork()`` child, as every call)."""
        self._check_not_inherited()
        return self._closed

    def quarantined(self) -> dict[TopicPartition, CorruptionError]:
        """Partitions opened *quarantined* and the damage found (docs/guarantees.md): records
        before it are readable, appends raise :class:`~embedlog.PartitionQuarantinedError`."""
        self._check_open()
        return self._topics.quarantined()

    def _check_open(self) -> None:
        self._check_not_inherited()
        if self._closed:
            raise LogClosedError(f"the log at {self.path} is closed")

    def _check_writer(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError(f"the log at {self.path} was opened read-only")

    # ------------------------------------------------------------------ finding topics

    def _topic(self, name: str) -> Topic:
        if self._inherited or self._closed:  # _check_open, inlined: every call passes here
            self._check_open()
        if name.__class__ is not str:
            validate_topic(name)  # raises: not a str (perhaps not even hashable)
        topic = self._topics.by_name.get(name)
        if topic is None and self.read_only:
            validate_topic(name)
            with self._lock:
                self._topics.load()
            topic = self._topics.by_name.get(name)
        if topic is None:
            validate_topic(name)
            raise UnknownTopicError(f"unknown topic {name!r} in {self.path}")
        return topic

    def _refresh_topics(self) -> int:
        """A read-only view: follow the topics the writer created, deleted or created again
        since (one ``lstat`` of ``embedlog.json`` when nothing changed); the writer's own
        table is the truth. The topic table's change count (:attr:`TopicTable.changes`)."""
        if self.read_only:
            with self._lock:
                self._check_open()
                self._topics.refresh()
        return self._topics.changes

    def _partition_of(self, topic: str, partition: int) -> Partition:
        parts = self._topic(topic).partitions
        if partition.__class__ is int and 0 <= partition < len(parts):
            return parts[partition]  # what _validate.partition_of gives for it
        return parts[_validate.partition_of(partition, len(parts), topic)]

    # ------------------------------------------------------------------ transactions

    def _transactions(self) -> TxnCoordinator:
        """The transaction coordinator (created on first use; the writer's only)."""
        self._check_writer()
        with self._lock:
            if self._txn is None:
                self._txn = TxnCoordinator(self, lambda: max(
                    (p.max_producer_id() for t in self._topics.by_name.values()
                     for p in t.partitions), default=-1), clean=self._clean_open,
                    transactional_id_expiration_ms=self._txn_id_expiration_ms)
            return self._txn

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<embedlog.Log {self.path!r} {mode}{' closed' if self._closed else ''}>"
