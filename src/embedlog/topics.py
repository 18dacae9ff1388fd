"""The topics of one log folder: their partitions, ``embedlog.json`` and the root checkpoints.

A :class:`TopicTable` creates the :class:`~embedlog.partition.Partition` objects (with the
callbacks that keep the checkpoints current), loads them on open, and creates, deletes and
alters topics on disk. The caller (:class:`embedlog.Log`) serialises those changes with its own
lock; checkpoint writes are serialised here, because partitions trigger them from any thread
(a roll writes the recovery points, retention the log start offsets).

On-disk order: a topic's folders exist (fsynced) before ``embedlog.json`` names it; it leaves
``embedlog.json`` before its files are deleted, and then the groups' committed offsets of it
(:func:`embedlog.groups.forget_topic`; again when the name is created, in case a crash or a
late commit left some): a topic created under a deleted one's name is a new topic. Creation
is all or nothing: a failed create removes the folders it made; a crash mid-create leaves
empty, unlisted folders that the next create of that name removes
(:meth:`TopicTable.create`). The log start offsets are written *before* the segments below
them are unlinked (see :mod:`embedlog.partition`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from . import _io, checkpoint, groups, loader, metadata
from .config import TopicConfig
from .errors import (
    CorruptCheckpointError,
    CorruptionError,
    InvalidConfigError,
    StorageError,
    TopicExistsError,
)
from .naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    parse_segment_file,
    partition_dir_name,
)
from .partition import Partition
from .producer_state import PRODUCER_ID_EXPIRATION_MS
from .records import TopicPartition
from .tiering.manager import RemoteLogManager

__all__ = ["Topic", "TopicTable"]


class Topic:
    """A topic: its name, config and partitions. ``dense``: embedlog created it, so its
    active segments have no offset gap (``"dense"`` in ``embedlog.json``; see
    :mod:`embedlog.segment.rules`); a topic found in a Kafka folder is not. ``id``: its topic
    id (``"id"`` in ``embedlog.json``), ``None`` for a topic created by an older embedlog or
    found in a Kafka folder."""

    __slots__ = ("config", "dense", "id", "name", "partitions")

    def __init__(self, name: str, config: TopicConfig, partitions: list[Partition],
                 dense: bool = False, topic_id: str | None = None):
        self.name = name
        self.config = config
        self.partitions = partitions
        self.dense = dense
        self.id = topic_id


class TopicTable:
    """``{name: Topic}`` of the log folder ``root``, as the writer or a read-only view."""

    def __init__(self, root: str, *, writable: bool, fsync: bool, clock: Callable[[], int]
                 ) -> None:
        self.root = root
        self.writable = writable
        self.fsync = fsync
        self.clock = clock
        self.producer_id_expiration_ms = PRODUCER_ID_EXPIRATION_MS
        """``producer.id.expiration.ms`` given to the partitions (set before any is made)."""
        self.by_name: dict[str, Topic] = {}
        self._checkpoint_lock = threading.Lock()  # one writer of the root checkpoint files
        self._start_watch = metadata.StartOffsetWatch(root)
        self.kept: dict[TopicPartition, tuple[int | None, int | None]] = {}
        self._loaded: tuple[int, ...] | None = None  # a read-only view's last load's stamp
        self.changes = 0
        """Counts the changes of :attr:`by_name` (creates, deletes, a read-only view's loads)."""
        self.tiering: RemoteLogManager | None = None
        """Tiered storage (set before the load): each partition gets its ``tier``."""
        """Quarantined partitions' checkpointed (recovery point, log start), written back
        unchanged: damage is left for ``embedlog recover`` to judge, never papered over."""

    def partitions(self) -> list[Partition]:
        """Every partition of every topic."""
        return [p for t in list(self.by_name.values()) for p in t.partitions]

    def healthy(self) -> list[Partition]:
        """Every partition not quarantined (:func:`embedlog.loader.quarantine`)."""
        return [p for p in self.partitions() if p.damage is None]

    def quarantined(self) -> dict[TopicPartition, CorruptionError]:
        """The quarantined partitions and the damage found when they were opened."""
        return {TopicPartition(p.topic, p.partition): p.damage
                for p in self.partitions() if p.damage is not None}

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        """Add the topics ``embedlog.json`` lists (or, in a Kafka folder, its partition folders
        show) that are not known yet; a read-only view also forgets those deleted or created
        again since (:meth:`_forget_changed`) and opens the new partitions at once."""
        dense: set[str] = set()
        ids: dict[str, str] = {}
        if not self.writable:
            self._loaded = self._stamp()
        self.changes += 1
        listed = metadata.read_topics(self.root, dense=dense, ids=ids)
        if not self.writable:
            self._forget_changed(listed, ids)
        for name, (count, config) in listed.items():
            known = self.by_name.get(name)
            if known is not None:  # a Kafka folder's topic gained partition folders
                known.partitions = known.partitions + [
                    self._partition(name, i, known.config, known.dense)
                    for i in range(len(known.partitions), count)]
                continue
            parts = [self._partition(name, i, config, name in dense) for i in range(count)]
            self.by_name[name] = Topic(name, config, parts, name in dense, ids.get(name))
        if not self.writable:
            starts = metadata.read_root_checkpoint(self.root, metadata.LOG_START,
                                                   metadata.partition_folder_count(self.root))
            for topic in self.by_name.values():
                for p in topic.partitions:
                    if not p.segments and os.path.isdir(p.directory):
                        tp = TopicPartition(topic.name, p.partition)
                        p.load(recovery_point=None, start_offset=starts.get(tp, (0, 0))[0],
                               clean=True)

    def refresh(self) -> None:
        """A read-only view: :meth:`load` again if ``embedlog.json`` (in a Kafka folder: the
        root folder) changed since the last load."""
        if self._stamp() != self._loaded:
            self.load()

    def _stamp(self) -> tuple[int, ...]:
        """What changes when the writer rewrites ``embedlog.json`` (replaced: a new inode), or
        when there is none, when a folder is added to or removed from the root."""
        try:
            st = os.lstat(os.path.join(self.root, metadata.METADATA))
        except FileNotFoundError:
            st = os.lstat(self.root)
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _forget_changed(self, listed: metadata.Topics, ids: Mapping[str, str]) -> None:
        """A read-only view: drop (and close) the topics that ``listed`` no longer names, or
        names with another id or fewer partitions -- deleted, perhaps created again, by the
        writer; :meth:`load` opens the listed ones anew."""
        for name, topic in list(self.by_name.items()):
            entry = listed.get(name)
            if entry is None or ids.get(name) != topic.id or entry[0] < len(topic.partitions):
                del self.by_name[name]
                for p in topic.partitions:
                    with contextlib.suppress(StorageError):
                        p.close()

    def recover(self, clean: bool) -> None:
        """The writer's open: load every partition from its checkpointed recovery point and log
        start offset (:mod:`embedlog.loader`). Checkpoints hold at most one entry per partition
        folder; a partition whose segments or checkpoints are damaged opens quarantined, its
        checkpoint entries kept as they are (:attr:`kept`)."""
        folders = metadata.partition_folder_count(self.root)
        points = metadata.read_root_checkpoint(self.root, metadata.RECOVERY_POINT, folders)
        starts = metadata.read_root_checkpoint(self.root, metadata.LOG_START, folders)
        start_path = os.path.join(self.root, metadata.LOG_START)
        for topic in self.by_name.values():
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                if not os.path.isdir(p.directory):
                    raise CorruptCheckpointError(
                        f"topic metadata lists {tp.topic}-{tp.partition}, whose folder is "
                        "missing", path=p.directory)
                point, start = points.get(tp), starts.get(tp)
                p.load(recovery_point=point[0] if point else None,
                       start_offset=start[0] if start else 0, clean=clean,
                       start_from=(start_path, start[1]) if start else None)
                if p.damage is not None:
                    self.kept[tp] = (point[0] if point else None, start[0] if start else None)

    def _partition(self, topic: str, index: int, config: TopicConfig, dense: bool
                   ) -> Partition:
        """A partition of ``topic``; ``dense``: the topic is embedlog's (:class:`Topic`)."""
        p = Partition(
            os.path.join(self.root, partition_dir_name(topic, index)),
            topic,
            index,
            config,
            writable=self.writable,
            fsync=self.fsync,
            clock=self.clock,
            on_start_offset=self.checkpoint_start_offsets,
            on_roll=self.checkpoint_recovery_points,
            start_offset_source=None if self.writable else self._persisted_start_offset,
        )
        p.settings = dataclasses.replace(p.settings, dense_tail=dense)
        p.producer_id_expiration_ms = self.producer_id_expiration_ms
        if self.tiering is not None:
            p.tier = self.tiering.tier_for(p)
        return p

    def _persisted_start_offset(self, p: Partition) -> int | None:
        """Read-only views: the writer's ``log-start-offset-checkpoint`` entry for ``p``."""
        return self._start_watch.get(TopicPartition(p.topic, p.partition))

    # ------------------------------------------------------------------ changes

    def create(self, name: str, count: int, config: TopicConfig) -> None:
        """Create the topic's folders and empty partitions, then list it in ``embedlog.json``.

        All or nothing: on any failure (``EMFILE``, ``ENOSPC``...) the folders this call made
        are removed again and the topic is not listed. A crash half way leaves empty folders
        that ``embedlog.json`` does not name; they hold no record, and creating the name again
        removes them first (:func:`_abandoned`). More than :data:`metadata.MAX_PARTITIONS`
        partitions (what ``embedlog.json`` is read with) is refused before anything is made."""
        if name in self.by_name:
            raise TopicExistsError(f"topic {name!r} already exists")
        config.check_change()
        if count > metadata.MAX_PARTITIONS:
            raise InvalidConfigError(f"partitions: {count} is more than the "
                                     f"{metadata.MAX_PARTITIONS} a topic can have")
        dirs = [os.path.join(self.root, partition_dir_name(name, i)) for i in range(count)]
        leftovers = [d for d in dirs if os.path.lexists(d)]
        for d in leftovers:
            if not _abandoned(d):
                raise TopicExistsError(f"{d} already exists")
        for d in leftovers:
            _remove_folder(d)
        groups.forget_topic(self.root, name)  # a deleted namesake's, if its deletion was cut
        created: list[str] = []
        parts: list[Partition] = []
        try:
            for i, d in enumerate(dirs):
                _io.mkdir(d)
                created.append(d)
                parts.append(self._partition(name, i, config, dense=True))
            _io.fsync_dir(self.root)
            for p in parts:
                p.load(recovery_point=None, start_offset=0, clean=True)
            self.by_name[name] = Topic(name, config, parts, True, uuid.uuid4().hex)
            self.changes += 1
            self.write_metadata()
        except BaseException:
            self._undo_create(name, parts, created)
            raise

    def _undo_create(self, name: str, parts: list[Partition], created: list[str]) -> None:
        """Remove exactly what a failed :meth:`create` made (best effort: the first error is
        the one reported)."""
        if self.by_name.pop(name, None) is not None:
            self.changes += 1
            with contextlib.suppress(StorageError):
                self.write_metadata()
        for p in parts:
            with contextlib.suppress(StorageError):
                p.close()
        for d in reversed(created):
            with contextlib.suppress(StorageError, OSError):
                _remove_folder(d)
        with contextlib.suppress(StorageError):
            _io.fsync_dir(self.root)

    def remove(self, name: str) -> Topic:
        """Drop the topic from ``embedlog.json`` (its files stay: :meth:`delete_files`)."""
        topic = self.by_name.pop(name)
        self.changes += 1
        self.write_metadata()
        return topic

    def delete_files(self, topic: Topic) -> None:
        """Close a removed topic's partitions, drop them from the root checkpoints, then delete
        their folders (a checkpoint never has more entries than there are folders)."""
        for p in topic.partitions:
            self.kept.pop(TopicPartition(p.topic, p.partition), None)
        self.checkpoint_start_offsets()
        self.checkpoint_recovery_points()
        for p in topic.partitions:
            p.close()
            _remove_folder(p.directory)
        _io.fsync_dir(self.root)
        groups.forget_topic(self.root, topic.name)

    def alter(self, topic: Topic, config: Mapping[str, Any]) -> TopicConfig:
        """Merge ``config`` (Kafka names) into the topic's settings and persist them."""
        merged = topic.config.merged(config)
        merged.check_change(topic.config)
        topic.config = merged
        for p in topic.partitions:
            with p.lock:  # an open batch is written under the settings it was opened with
                p.settle()
                p.config = merged
        self.write_metadata()
        return topic.config

    def write_metadata(self) -> None:
        topics = list(self.by_name.values())
        metadata.write_metadata(self.root, {t.name: (len(t.partitions), t.config) for t in topics},
                                dense={t.name for t in topics if t.dense},
                                ids={t.name: t.id for t in topics if t.id is not None})

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_start_offsets(self, _: Partition | None = None) -> None:
        """Write ``log-start-offset-checkpoint`` (partitions whose log start is above 0)."""
        with self._checkpoint_lock:
            offsets = {
                TopicPartition(p.topic, p.partition): p.start_offset
                for p in self.partitions()
                if p.start_offset > 0 and p.damage is None
            }
            offsets.update((tp, start) for tp, (_, start) in self.kept.items() if start)
            checkpoint.write_offsets(os.path.join(self.root, metadata.LOG_START), offsets)

    def checkpoint_recovery_points(self, _: Partition | None = None, *, final: bool = False
                                   ) -> None:
        """Write ``recovery-point-offset-checkpoint``: each active segment's base (everything
        below it was sealed, hence fsynced), or with ``final`` (a clean close) the end offset."""
        with self._checkpoint_lock:
            offsets = {
                TopicPartition(p.topic, p.partition): (
                    p.end_offset if final else p.active.base_offset
                )
                for p in self.partitions()
                if p.segments and p.damage is None
            }
            offsets.update((tp, point) for tp, (point, _) in self.kept.items()
                           if point is not None)
            checkpoint.write_offsets(os.path.join(self.root, metadata.RECOVERY_POINT), offsets)


def _remove_folder(directory: str) -> None:
    """Unlink a partition folder's files and the folder (the caller fsyncs the parent). A
    symbolic link in the folder's place (planted while the log was open) is refused before
    anything is listed or removed: its target is outside the log."""
    for entry in loader.check_folder(directory):
        _io.unlink(os.path.join(directory, entry))
    _io.rmdir(directory)


def _abandoned(directory: str) -> bool:
    """Whether ``directory`` is what an interrupted :meth:`TopicTable.create` leaves: a real
    folder holding nothing but segment files whose ``.log`` files are empty (no record)."""
    if os.path.islink(directory) or not os.path.isdir(directory):
        return False
    for entry in os.listdir(directory):
        parsed = parse_segment_file(entry)
        if parsed is None or parsed[2] or parsed[1] not in (LOG_SUFFIX, INDEX_SUFFIX,
                                                             TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            return False
        path = os.path.join(directory, entry)
        if os.path.islink(path) or (parsed[1] == LOG_SUFFIX and os.lstat(path).st_size):
            return False
    return True
