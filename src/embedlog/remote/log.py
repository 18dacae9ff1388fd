"""A read-only :class:`~embedlog.Log` over a remote log folder, opened on its local cache.

:class:`RemoteLog` is a :class:`~embedlog.Log` opened ``read_only=True`` (no upkeep) on the
folder :mod:`embedlog.remote.cache` fills from the remote: the root files at open, a
partition's index and manifest files on that partition's first use, with its ``.log`` files
made sparse (every partition access of a ``Log`` goes through ``_partition_of``; that step
runs under one lock, then the partition's read-only view picks the new segments up with
``refresh``, as it picks up a writer's), and each ``.log`` byte range when a read reaches it
(:class:`~embedlog.tiering.ranged_file.RangedFile`). Everything a read-only log offers works
on it (topics, reads by offset and time, consumers, ``read_arrow``). Writes raise
:class:`~embedlog.errors.ReadOnlyError`. It is a snapshot: records the remote gains after the
open are not seen (open it again). ``close()`` closes the log, then removes the cache; a log
never closed has its cache removed when it is garbage collected or at interpreter exit.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

from ..log import Log
from ..tiering.ranged_file import RangedFile
from ..tiering.store import RemoteStore
from . import cache

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from ..partition import Partition

__all__ = ["RemoteLog"]


class RemoteLog(Log):
    """A read-only log over ``root`` on ``fs`` (``uri`` names it in messages)."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str, *,
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.uri = uri
        self._store = RemoteStore(fs, root, uri)
        self._fetch_lock = threading.Lock()
        self._ranged: list[RangedFile] = []
        folder = cache.create(cache_dir)
        self._remove_cache = weakref.finalize(self, _discard, folder, os.getpid(), self._ranged)
        try:
            self._pending = cache.fill(self._store, folder).partitions
            super().__init__(folder, read_only=True, create=False, upkeep=False)
        except BaseException:
            self._remove_cache()
            raise

    @property
    def cache_path(self) -> str:
        """The local folder holding the fetched files (removed by :meth:`close`)."""
        return self.path

    def _partition_of(self, topic: str, partition: int) -> Partition:
        """The partition, its files fetched first if this is its first use. Every read of a
        partition (``Log`` reads, consumers, ``read_arrow``) reaches it through here."""
        p = super()._partition_of(topic, partition)
        name = os.path.basename(p.directory)
        if name in self._pending:
            with self._fetch_lock:
                files = self._pending.get(name)
                if files is not None:
                    tiered, ranged = cache.fetch_partition(self._store, self.path, files)
                    self._ranged.extend(ranged)
                    del self._pending[name]
                    p.refresh()
                    if tiered is not None and p.segments:  # a tiered log's log start
                        p.start_offset = min(max(p.start_offset, tiered.log_start),
                                             p.end_offset)
        return p

    def fetch_all(self) -> None:
        """Fetch every partition's files whole (``embedlog dump-log``, which reads the cache
        folder's files as a local folder's)."""
        for topic in self.topics():
            for partition in range(self.partition_count(topic)):
                self._partition_of(topic, partition)
        with self._fetch_lock:
            for ranged in self._ranged:
                ranged.fill(0, ranged.size)

    def close(self) -> None:
        """Close the log, then remove its cache (not in a ``fork()`` child)."""
        try:
            super().close()
        finally:
            if not self._inherited:
                self._remove_cache()

    def __repr__(self) -> str:
        return f"<embedlog.Log {self.uri!r} read-only{' closed' if self._closed else ''}>"


def _discard(folder: str, owner_pid: int, ranged: list[RangedFile]) -> None:
    """Stop the ranged files' fills, then remove the cache folder (only in ``owner_pid``)."""
    if os.getpid() == owner_pid:
        for r in ranged:
            r.close()
    cache.remove(folder, owner_pid)
