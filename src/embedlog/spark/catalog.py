"""What Spark's planner sees of a log folder: topics, and the bounds and segments of only the
partitions a query selects, each read once and then kept (a consistent snapshot).

Opening a read-only :class:`embedlog.Log` loads every partition of the folder and opens every
segment file; with 10,000 partitions that alone costs seconds, and a stream would pay it on every
trigger. :class:`FolderView` instead reads, lazily and per selected partition:

* the topic list and partition counts: :func:`embedlog.metadata.read_topics` (``embedlog.json``,
  a regular file of bounded size, or for a plain Kafka folder the ``<topic>-<partition>``
  folder names);
* the segments (:mod:`embedlog.spark.layout`): from the sealed-segment manifest alone when it
  vouches for them (no listing, no ``lstat`` per segment); else one directory listing, with the
  manifest's sizes when it names exactly the listed segments, else sizes from ``lstat`` (never
  through a link);
* the log start offset: the first segment's base, raised to the writer's
  ``log-start-offset-checkpoint`` entry (a ``delete_records`` inside a segment; the root
  checkpoint is read once per view, not per partition);
* the log end offset: the batch headers of the last segment only -- read whole with one
  ``pread`` when it is small (:data:`SMALL_TAIL_BYTES`), else from its last offset-index
  entry on -- and re-read only when that segment's size changed. The other segments are
  never opened (but for a few batch headers of the last sealed one, when the manifest is
  trusted to say where the active segment starts).

A partition whose folder shows a compaction swap in progress (``.swap`` files) is loaded through
a read-only ``Partition`` instead, which resolves the swap the way recovery would; timestamp
lookups use one too. Nothing is ever written: planning needs read access only.

The values of a partition are computed on first use and kept until :meth:`FolderView.refresh`
(which a stream calls once per trigger), so one query resolves ``earliest``/``latest`` once and
checks its offsets against the same bounds, however retention or writers move meanwhile. The last
segment's end offset is remembered by (base offset, size), so a refresh re-reads the tail only of
partitions that grew.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from .. import checkpoint, metadata
from ..config import TopicConfig
from ..errors import CorruptionError, UnknownTopicError, UsageError
from ..naming import partition_dir_name
from ..partition import Partition, SegmentInfo
from ..records import TopicPartition
from ..segment.segment import Segment, SegmentSettings
from . import layout
from .layout import SMALL_TAIL_BYTES

__all__ = ["OPEN_PARTITIONS", "SMALL_TAIL_BYTES", "FolderView", "PartitionBounds"]

OPEN_PARTITIONS = 64
"""Partitions an executor keeps open between tasks (each holds one descriptor per segment)."""


class PartitionBounds(NamedTuple):
    """One partition as planning sees it: ``[start, end)`` and its segments in offset order,
    kept as three columns (base offsets, sizes, paths): 10,000 partitions of 10 segments would
    otherwise be 100,000 objects kept for the query, which the cyclic garbage collector walks
    again and again while planning allocates."""

    start: int
    end: int
    bases: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    paths: tuple[str, ...] = ()

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        return tuple(map(SegmentInfo, self.bases, self.sizes, self.paths))

    @classmethod
    def of(cls, start: int, end: int, segments: Iterable[tuple[int, int, str]]
           ) -> PartitionBounds:
        """Bounds of ``segments``: ``(base offset, size, path)`` in offset order."""
        columns = tuple(zip(*segments, strict=True))
        return cls(start, end, *columns) if columns else cls(start, end)


class FolderView:
    """Read-only, lazy, cached view of a log folder for planning (see the module docstring).
    Implements :class:`embedlog.spark.planning.LogView`."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise UsageError(f"no log directory at {path}")
        self.path = os.path.abspath(path)
        self._topics: dict[str, tuple[int, TopicConfig]] | None = None
        self._dense: frozenset[str] = frozenset()
        self._starts: dict[TopicPartition, int] | None = None
        self._starts_seen: tuple[int, int, int, int] | None = None
        self._bounds: dict[tuple[str, int], PartitionBounds] = {}
        self._tails: dict[tuple[str, int], tuple[int, int, int]] = {}  # (base, size, end)
        self._settings: dict[str, SegmentSettings] = {}
        self._open: dict[tuple[str, int], Partition] = {}

    def __getstate__(self) -> dict[str, str]:
        return {"path": self.path}  # shipped to executors: they build their own caches

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def refresh(self) -> None:
        """Forget everything but the remembered segment tails: the next calls see the folder as
        it is now."""
        self._topics = None
        self._check_starts()
        self._bounds.clear()
        self._settings.clear()

    # -- topics --------------------------------------------------------------------------------

    def _topic_table(self) -> dict[str, tuple[int, TopicConfig]]:
        if self._topics is None:
            dense: set[str] = set()
            self._topics = metadata.read_topics(self.path, dense=dense)
            self._dense = frozenset(dense)
        return self._topics

    def dense_topics(self) -> frozenset[str]:
        """The topics embedlog created (``"dense"`` in ``embedlog.json``; none in a Kafka
        folder): their active segments have no offset gap."""
        self._topic_table()
        return self._dense

    def topics(self) -> list[str]:
        return sorted(self._topic_table())

    def partition_count(self, topic: str) -> int:
        return self._topic(topic)[0]

    def _topic(self, topic: str) -> tuple[int, TopicConfig]:
        entry = self._topic_table().get(topic)
        if entry is None:
            raise UnknownTopicError(f"unknown topic {topic!r} in {self.path}")
        return entry

    # -- partitions ----------------------------------------------------------------------------

    def start_offset(self, topic: str, partition: int) -> int:
        return self.bounds(topic, partition).start

    def end_offset(self, topic: str, partition: int) -> int:
        return self.bounds(topic, partition).end

    def segments(self, topic: str, partition: int) -> tuple[SegmentInfo, ...]:
        return self.bounds(topic, partition).segments

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        with self._open_partition(topic, partition) as p:
            found = p.offset_for_timestamp(timestamp_ms)
        if found is None:
            return None
        b = self.bounds(topic, partition)
        return min(max(found, b.start), b.end)

    def bounds(self, topic: str, partition: int) -> PartitionBounds:
        """The partition's bounds and segments, read on first use since the last refresh."""
        key = (topic, partition)
        b = self._bounds.get(key)
        if b is None:
            b = self._bounds[key] = self._read_bounds(topic, partition)
        return b

    def _directory(self, topic: str, partition: int) -> str:
        count, _ = self._topic(topic)
        if not isinstance(partition, int) or not 0 <= partition < count:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{count - 1}, not {partition!r}"
            )
        return os.path.join(self.path, partition_dir_name(topic, partition))

    def _persisted_start(self, topic: str, partition: int) -> int:
        """The writer's ``log-start-offset-checkpoint`` entry (0 if none): the root file is read
        once, and again only when :meth:`_check_starts` finds it replaced."""
        if self._starts is None:
            path = os.path.join(self.path, metadata.LOG_START)
            self._starts_seen = _stamp(path)  # before the read: a change meanwhile shows later
            try:
                self._starts = checkpoint.read_offsets(path)
            except UsageError:
                self._starts = {}  # being replaced by the writer right now: the bases decide
        return self._starts.get(TopicPartition(topic, partition), 0)

    def _check_starts(self) -> None:
        """Forget the log start offsets read if the writer replaced their file since (a 10,000
        partition checkpoint takes tens of milliseconds to parse: not once per range read)."""
        if self._starts is not None and _stamp(
                os.path.join(self.path, metadata.LOG_START)) != self._starts_seen:
            self._starts = None

    def _read_bounds(self, topic: str, partition: int) -> PartitionBounds:
        """The bounds from the segment files (:mod:`embedlog.spark.layout`): what an earlier
        query saw while the manifest has not changed, or the manifest alone when it vouches for
        the segments, else one listing."""
        directory = self._directory(topic, partition)
        persisted = self._persisted_start(topic, partition)
        seen = layout.stamp(directory)
        known = layout.remembered(directory, seen)
        if known is not None:
            self._tails.setdefault((topic, partition), known[1])
            b = self._vouched(topic, partition, directory, known[0], persisted)
            if b is not None:
                return b
        sealed = None if seen is None else layout.read_sealed(directory)  # None: no manifest
        max_batch = self._segment_settings(topic, partition).max_batch_bytes
        chain = None if not sealed else layout.manifest_chain(directory, sealed, max_batch)
        if chain is not None:
            b = self._vouched(topic, partition, directory, chain, persisted)
            if b is not None:
                layout.remember(directory, seen, chain, b.end)
                return b
        names = layout.log_names(directory)
        if names is None:  # a compaction swap in progress: resolve it as recovery would
            return self._bounds_via_partition(topic, partition)
        try:
            files = layout.from_manifest(directory, names, sealed)
            if files is None:
                return self._bounds_of(topic, partition, layout.from_listing(directory, names),
                                       persisted)
            b = self._bounds_of(topic, partition, files, persisted)
        except FileNotFoundError:  # retention or compaction removed a segment meanwhile
            return self._bounds_via_partition(topic, partition)
        layout.remember(directory, seen, files, b.end)
        return b

    def _vouched(self, topic: str, partition: int, directory: str, files: layout.Files,
                 persisted: int) -> PartitionBounds | None:
        """The bounds of ``files`` taken without a listing, or None if the folder does not bear
        them out: the last one gone or damaged (the listing may not even show it), or a segment
        starting where it ends (a roll since)."""
        with contextlib.suppress(FileNotFoundError, CorruptionError):
            b = self._bounds_of(topic, partition, files, persisted)
            if not layout.rolled_past(directory, b.end):
                return b
        return None

    def _bounds_of(self, topic: str, partition: int, files: layout.Files, persisted: int
                   ) -> PartitionBounds:
        """The bounds of the segments ``files`` once the last one's tail is read (the log start
        is the first base, raised to the writer's checkpoint ``persisted``)."""
        if not files:
            return PartitionBounds(persisted, persisted)
        base, _, path = files[-1]
        size, end = self._tail(topic, partition, path, base)
        files[-1] = (base, size, path)
        return PartitionBounds.of(min(max(persisted, files[0][0]), end), end, files)

    def _tail(self, topic: str, partition: int, path: str, base: int) -> tuple[int, int]:
        """``(size, end offset)`` of the last segment, re-read only when its base or size
        changed. A segment of at most :data:`SMALL_TAIL_BYTES` is read whole and its batch
        headers walked (no index, one read); a larger one, or one whose bytes are not a clean
        run of batches, is opened as a :class:`Segment` (its offset index says where the last
        batches start; damage raises as any read of it would)."""
        key = (topic, partition)
        settings = self._segment_settings(topic, partition)
        quick = layout.small_tail(path, base, settings.max_batch_bytes, self._tails.get(key))
        if quick is not None:
            size, end = quick
        else:
            seg = Segment(os.path.dirname(path), base, settings, writable=False, live=True)
            try:
                end, size = seg.next_offset, seg.size
            finally:
                seg.close()
        self._tails[key] = (base, size, end)
        return size, end

    def _segment_settings(self, topic: str, partition: int) -> SegmentSettings:
        settings = self._settings.get(topic)
        if settings is None:  # the partition's own (no reference back to this view: it is
            # garbage in a cycle of its own, which must not keep the view alive)
            settings = self._settings[topic] = Partition(
                self._directory(topic, partition), topic, partition, self._topic(topic)[1],
                writable=False).settings
        return settings

    def _bounds_via_partition(self, topic: str, partition: int) -> PartitionBounds:
        with self._open_partition(topic, partition) as p:
            return PartitionBounds.of(p.start_offset, p.end_offset,
                                      ((s.base_offset, s.size, s.path) for s in p.segment_infos()))

    def _partition_object(self, topic: str, partition: int) -> Partition:
        return Partition(self._directory(topic, partition), topic, partition,
                         self._topic(topic)[1], writable=False,
                         start_offset_source=lambda p: self._persisted_start(p.topic, p.partition))

    def reader(self, topic: str, partition: int, end: int | None = None) -> Partition:
        """A loaded read-only :class:`Partition` to read records from, kept open for later tasks
        (at most :data:`OPEN_PARTITIONS`; the least recently used is closed) and refreshed on
        every call, so it sees what the writer appended since (``end``, the end of the range
        the task reads, needs nothing more here)."""
        key = (topic, partition)
        p = self._open.pop(key, None)
        if p is None:
            p = self._partition_object(topic, partition)
            p.load(recovery_point=None, start_offset=self._persisted_start(topic, partition),
                   clean=True)
        self._open[key] = p  # most recently used last
        while len(self._open) > OPEN_PARTITIONS:
            self._open.pop(next(iter(self._open))).close()
        self._check_starts()  # the writer's log start offsets as they are now
        p.refresh()
        return p

    def close(self) -> None:
        """Close the partitions :meth:`reader` kept open."""
        while self._open:
            self._open.popitem()[1].close()

    @contextlib.contextmanager
    def _open_partition(self, topic: str, partition: int) -> Iterator[Partition]:
        """A loaded read-only :class:`Partition` for one lookup, closed on exit."""
        p = self._partition_object(topic, partition)
        try:
            p.load(recovery_point=None, start_offset=self._persisted_start(topic, partition),
                   clean=True)
            yield p
        finally:
            p.close()


def _stamp(path: str) -> tuple[int, int, int, int] | None:
    """Identity of the file at ``path`` (inode, size, mtime, ctime; None if there is none): the
    writer replaces its checkpoints whole, so a new version has another stamp."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
