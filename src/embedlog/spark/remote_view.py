"""A log in object storage (``s3://...``, ``gs://...``, ``file://...``) as Spark's planning and
tasks see a log folder: the same calls as :class:`~embedlog.spark.catalog.FolderView`, answered
by a :class:`~embedlog.remote.log.RemoteLog`.

The driver lists the remote folder once per query (a stream: once per trigger, when
:meth:`RemoteView.refresh` is called) and fetches the small files and, on first use, each
selected partition's files into a private cache; every executor process does the same for the
partitions its tasks read, with ``spark.local.dir``'s first folder (or the system's temporary
folder) as its cache root. Nothing is written to the remote, and nothing assumes the driver's
disk. Of a partition, the index files are fetched whole and the segments by ranged reads of
the bytes a task reads (:mod:`embedlog.remote.cache`); planning touches only the partitions a
query selects.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

from .. import log as log_module
from ..log import Log
from ..naming import TIERING_FILE
from ..partition import Partition, SegmentInfo
from ..remote import is_uri, open_remote
from .catalog import FolderView

__all__ = ["RemoteView", "TieredView", "cache_root", "open_view"]


def open_view(path: str) -> FolderView | RemoteView:
    """The view planning and tasks read ``path`` through: a URI's :class:`RemoteView`, a
    tiered folder's :class:`TieredView`, else the local folder's
    :class:`~embedlog.spark.catalog.FolderView`."""
    if is_uri(path):
        return RemoteView(path)
    if os.path.lexists(os.path.join(path, TIERING_FILE)):
        return TieredView(path)
    return FolderView(path)


def cache_root() -> str | None:
    """The first folder of ``SPARK_LOCAL_DIRS`` / ``spark.local.dir`` when Spark set one for
    this process, else None (the system's temporary folder)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS") or os.environ.get("SPARK_LOCAL_DIR")
    if dirs:
        first = dirs.split(",")[0]
        if os.path.isdir(first):
            return first
    return None


class RemoteView:
    """:class:`~embedlog.spark.catalog.FolderView`'s calls over a remote log folder; pickled,
    it is only its URI (each process opens its own)."""

    def __init__(self, uri: str) -> None:
        self.path = uri
        self._log: Log | None = None
        self._closer: weakref.finalize[[], Log] | None = None

    def __getstate__(self) -> dict[str, str]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _opened(self) -> Log:
        if self._log is None or self._log.closed:
            self._log = open_remote(self.path, read_only=True, cache_dir=cache_root())
            # A worker process keeps its views until it exits: its cache goes then.
            self._closer = weakref.finalize(self._log, self._log.close)
        return self._log

    def refresh(self) -> None:
        """See the remote as it is now: the next call lists it again (a new cache)."""
        self.close()

    def close(self) -> None:
        """Close the remote log and remove its cache."""
        if self._closer is not None:
            self._closer()  # closes the log once, and forgets it
        self._log = self._closer = None

    def topics(self) -> list[str]:
        return self._opened().topics()

    def partition_count(self, topic: str) -> int:
        return self._opened().partition_count(topic)

    def start_offset(self, topic: str, partition: int) -> int:
        return self._opened().start_offset(topic, partition)

    def end_offset(self, topic: str, partition: int) -> int:
        return self._opened().end_offset(topic, partition)

    def segments(self, topic: str, partition: int) -> Sequence[SegmentInfo]:
        return self._opened().segments(topic, partition)

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self._opened().offsets_for_times(topic, partition, timestamp_ms)

    def reader(self, topic: str, partition: int, end: int | None = None) -> Partition:
        """The partition to read records from (its files fetched on first use); listed again
        when it ends before ``end`` (a range planned after this process listed the remote)."""
        p = self._opened()._partition_of(topic, partition)
        if end is not None and p.end_offset < end:
            self.refresh()
            p = self._opened()._partition_of(topic, partition)
        return p  # type: ignore[return-value]


class TieredView(RemoteView):
    """A tiered local folder (:mod:`embedlog.tiering`): the same calls answered by a
    read-only :class:`~embedlog.Log` of the folder, whose partitions read offsets below their
    first local segment from the remote (the folder view's planning knows only local
    segments). Pickled, it is only its path."""

    def _opened(self) -> Log:
        if self._log is None or self._log.closed:
            self._log = log_module.open(self.path, read_only=True)
            self._closer = weakref.finalize(self._log, self._log.close)
        return self._log

    def reader(self, topic: str, partition: int, end: int | None = None) -> Partition:
        """The partition to read records from (a read-only view follows the writer)."""
        p = self._opened()._partition_of(topic, partition)
        if end is not None and p.end_offset < end:
            p.refresh()
        return p  # type: ignore[return-value]
