"""What Spark's planner sees of a log folder: topics, and the bounds and segments of only the
partitions a query selects, each read once and then kept (a consistent snapshot).

Opening a read-only :class:`embedlog.Log` loads every partition of the folder and opens every
segment file; with 10,000 partitions that alone costs seconds, and a stream would pay it on every
trigger. :class:`FolderView` instead reads, lazily and per selected partition:

* the topic list and partition counts: :func:`embedlog.metadata.read_topics` (``embedlog.json``,
  a regular file of bounded size, or for a plain Kafka folder the ``<topic>-<partition>``
  folder names);
* the segments: one directory listing (base offsets from the names, sizes from ``stat``);
* the log start offset: the first segment's base, raised to the writer's
  ``log-start-offset-checkpoint`` entry (a ``delete_records`` inside a segment);
* the log end offset: the tail of the last segment only (one segment opened, then closed).

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
from collections.abc import Iterator
from dataclasses import dataclass

from .. import checkpoint, metadata
from ..config import TopicConfig
from ..errors import UnknownTopicError, UsageError
from ..naming import LOG_SUFFIX, SWAP_SUFFIX, parse_segment_file, partition_dir_name
from ..partition import Partition, SegmentInfo
from ..records import TopicPartition
from ..segment.segment import Segment, SegmentSettings

__all__ = ["OPEN_PARTITIONS", "FolderView", "PartitionBounds"]

OPEN_PARTITIONS = 64
"""Partitions an executor keeps open between tasks (each holds one descriptor per segment)."""


@dataclass(frozen=True)
class PartitionBounds:
    """One partition as planning sees it: ``[start, end)`` and its segments in offset order."""

    start: int
    end: int
    segments: tuple[SegmentInfo, ...]


class FolderView:
    """Read-only, lazy, cached view of a log folder for planning (see the module docstring).
    Implements :class:`embedlog.spark.planning.LogView`."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise UsageError(f"no log directory at {path}")
        self.path = os.path.abspath(path)
        self._topics: dict[str, tuple[int, TopicConfig]] | None = None
        self._starts: dict[TopicPartition, int] | None = None
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
        self._starts = None
        self._bounds.clear()
        self._settings.clear()

    # -- topics --------------------------------------------------------------------------------

    def _topic_table(self) -> dict[str, tuple[int, TopicConfig]]:
        if self._topics is None:
            self._topics = metadata.read_topics(self.path)
        return self._topics

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
        if self._starts is None:
            try:
                self._starts = checkpoint.read_offsets(
                    os.path.join(self.path, metadata.LOG_START))
            except UsageError:
                self._starts = {}  # being replaced by the writer right now: the bases decide
        return self._starts.get(TopicPartition(topic, partition), 0)

    def _read_bounds(self, topic: str, partition: int) -> PartitionBounds:
        directory = self._directory(topic, partition)
        segs: list[SegmentInfo] = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    parsed = parse_segment_file(entry.name)
                    if parsed is None or parsed[1] != LOG_SUFFIX:
                        continue
                    if parsed[2] == SWAP_SUFFIX:
                        return self._bounds_via_partition(topic, partition)
                    if not parsed[2]:
                        segs.append(SegmentInfo(parsed[0], entry.stat().st_size, entry.path))
        except FileNotFoundError:
            segs = []
        segs.sort(key=lambda s: s.base_offset)
        persisted = self._persisted_start(topic, partition)
        if not segs:
            return PartitionBounds(persisted, persisted, ())
        end = self._tail_end(topic, partition, segs[-1])
        start = min(max(persisted, segs[0].base_offset), end)
        return PartitionBounds(start, end, tuple(segs))

    def _tail_end(self, topic: str, partition: int, last: SegmentInfo) -> int:
        """The end offset of the last segment, re-read only when its base or size changed."""
        key = (topic, partition)
        known = self._tails.get(key)
        if known is not None and known[:2] == (last.base_offset, last.size):
            return known[2]
        settings = self._settings.get(topic)
        if settings is None:
            settings = self._settings[topic] = self._partition_object(topic, partition).settings
        seg = Segment(os.path.dirname(last.path), last.base_offset, settings, writable=False,
                      live=True)
        try:
            end, size = seg.next_offset, seg.size
        finally:
            seg.close()
        if size == last.size:  # else it grew since the listing: read it again next time
            self._tails[key] = (last.base_offset, size, end)
        return end

    def _bounds_via_partition(self, topic: str, partition: int) -> PartitionBounds:
        with self._open_partition(topic, partition) as p:
            infos = tuple(p.segment_infos())
            return PartitionBounds(p.start_offset, p.end_offset, infos)

    def _partition_object(self, topic: str, partition: int) -> Partition:
        return Partition(self._directory(topic, partition), topic, partition,
                         self._topic(topic)[1], writable=False,
                         start_offset_source=lambda p: self._persisted_start(p.topic, p.partition))

    def reader(self, topic: str, partition: int) -> Partition:
        """A loaded read-only :class:`Partition` to read records from, kept open for later tasks
        (at most :data:`OPEN_PARTITIONS`; the least recently used is closed) and refreshed on
        every call, so it sees what the writer appended since."""
        key = (topic, partition)
        p = self._open.pop(key, None)
        if p is None:
            p = self._partition_object(topic, partition)
            p.load(recovery_point=None, start_offset=self._persisted_start(topic, partition),
                   clean=True)
        self._open[key] = p  # most recently used last
        while len(self._open) > OPEN_PARTITIONS:
            self._open.pop(next(iter(self._open))).close()
        self._starts = None  # re-read the writer's log start offsets
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
