"""``kafka.isolation.level=read_committed`` planning: end offsets are last stable offsets.

A ``read_committed`` Kafka consumer's "latest" offset is the partition's last stable offset
(LSO): the first offset of its oldest transaction still without a marker, else the end offset.
Spark's Kafka source plans with those, so a batch query, or a stream trigger, reads only what is
already decided and a transaction open meanwhile waits for a later query or trigger.
:class:`StableView` gives any planning view (:class:`~embedlog.spark.catalog.FolderView`,
:class:`~embedlog.spark.remote_view.RemoteView`) that meaning of ``end_offset``: the LSO as it is
at the first call after a :meth:`~StableView.refresh`, never below the log start, never above the
view's own end offset. Everything else is the wrapped view's.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..partition import Partition, SegmentInfo
from ..producer_state_store import last_stable_offset
from .catalog import FolderView
from .planning import TopicPartition
from .remote_view import RemoteView, open_view

__all__ = ["StableView", "dense_topics", "planning_view"]


def planning_view(path: str, read_committed: bool) -> FolderView | RemoteView | StableView:
    """The view a query plans with: ``open_view(path)``, under ``read_committed`` with last
    stable offsets for end offsets."""
    view = open_view(path)
    return StableView(view) if read_committed else view


def dense_topics(view: FolderView | RemoteView | StableView) -> frozenset[str]:
    """What the JVM reader needs of ``embedlog.json`` (it reads local folders only): the topics
    embedlog created, as the planning ``view`` read them (:meth:`FolderView.dense_topics`);
    none for a remote view."""
    folder = view.view if isinstance(view, StableView) else view
    return folder.dense_topics() if isinstance(folder, FolderView) else frozenset()


class StableView:
    """A planning view whose end offsets are last stable offsets (see the module notes)."""

    def __init__(self, view: FolderView | RemoteView) -> None:
        self.view = view
        self.path = view.path
        self._ends: dict[TopicPartition, int] = {}

    def refresh(self) -> None:
        self._ends.clear()
        self.view.refresh()

    def close(self) -> None:
        self.view.close()

    def topics(self) -> list[str]:
        return self.view.topics()

    def partition_count(self, topic: str) -> int:
        return self.view.partition_count(topic)

    def start_offset(self, topic: str, partition: int) -> int:
        return self.view.start_offset(topic, partition)

    def end_offset(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        end = self._ends.get(key)
        if end is None:
            start = self.view.start_offset(topic, partition)
            end = self.view.end_offset(topic, partition)
            p = self.view.reader(topic, partition, end)
            with p.lock:
                stable = last_stable_offset(p)
            end = self._ends[key] = max(start, min(end, stable))
        return end

    def segments(self, topic: str, partition: int) -> Sequence[SegmentInfo]:
        return self.view.segments(topic, partition)

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self.view.offsets_for_times(topic, partition, timestamp_ms)

    def reader(self, topic: str, partition: int, end: int | None = None) -> Partition:
        return self.view.reader(topic, partition, end)
