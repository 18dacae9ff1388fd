"""The read cache of one tiered partition: published segments fetched from the remote,
opened as ordinary read-only :class:`~embedlog.segment.segment.Segment` objects.

Layout: ``<log's cache folder>/<topic>-<partition>/<20 digits>.log|.index|.timeindex|
.txnindex``, the remote's names. A segment's index files are fetched whole, each checked
against the size and CRC-32 the manifest gives. Its ``.log`` is a
:class:`~.ranged_file.RangedFile` at its published size: sparse, filled by ranged reads. A read
from offset ``o`` fetches at once the bytes from the offset index's floor position of ``o`` to
the end (one ranged read), since a scan only walks forward from there; a later read from
further back (or a timestamp lookup, an aborted transactions lookup: ``offset=None``) fetches
the missing part in front. Any other byte a reader reaches is fetched on demand
(:mod:`embedlog.segment.ondemand`), so nothing ever reads a hole. Once the whole ``.log`` is
there it is checked against its CRC-32 too; before, the batches a scan reads are checked by
their own CRCs, as every read is.

At most :data:`CACHED` segments are kept (least recently used out); an evicted one is retired
(a reader that captured it keeps its descriptors) and unlinked.
"""

from __future__ import annotations

import collections
import os
from typing import Final

from .. import _io, _paths
from ..errors import CorruptionError
from ..segment.rules import Bounds
from ..segment.segment import Segment, SegmentSettings
from .ranged_file import RangedFile
from .remote_manifest import FILES, Published
from .store import RemoteStore

__all__ = ["CACHED", "ReadCache"]

CACHED: Final = 8
"""Fetched segments kept per partition."""

_INDEXES: Final = ("txnindex", "index", "timeindex")


class ReadCache:
    """The fetched segments of the remote folder ``name`` (callers hold the tier's lock)."""

    def __init__(self, store: RemoteStore, name: str, folder: str) -> None:
        self.store = store
        self.name = name
        self.folder = folder
        self._cached: collections.OrderedDict[int, tuple[Segment, Published, RangedFile]] = (
            collections.OrderedDict())

    def open(self, entry: Published, settings: SegmentSettings, offset: int | None) -> Segment:
        """``entry``'s segment with its ``.log`` there from ``offset`` on (None: whole)."""
        cached = self._cached.get(entry.base)
        if cached is not None and cached[1] != entry:
            self.evict(entry.base)
            cached = None
        seg, log = self._fetch(entry, settings) if cached is None else (cached[0], cached[2])
        filled = log.front()
        wanted = 0 if offset is None else min(seg._indexed_position(offset), filled)
        if wanted < filled:
            try:
                self._fill(entry, seg, wanted, filled)
            except CorruptionError:
                self.evict(entry.base)
                raise
        self._cached.move_to_end(entry.base)
        while len(self._cached) > CACHED:
            self.evict(next(iter(self._cached)))
        return seg

    def _fetch(self, entry: Published, settings: SegmentSettings
               ) -> tuple[Segment, RangedFile]:
        folder = _paths.folder(self.folder, self.name)
        for key in _INDEXES:
            local = self._local(folder, entry.base, key)
            size, crc = entry.files[key]
            names = (self.name, os.path.basename(local))
            try:
                got = self.store.get_file(names, local, size)
            except BaseException:
                _io.unlink(local)
                raise
            _check(got, crc, local, self.store.path(names))
        log_path = self._local(folder, entry.base, "log")
        log = RangedFile(self.store, (self.name, os.path.basename(log_path)), log_path,
                         entry.size, entry.files["log"][1])
        try:
            seg = Segment(folder, entry.base, settings, writable=False)
        except BaseException:
            log.close()
            raise
        seg.bounds = Bounds(entry.next, False)
        self._cached[entry.base] = (seg, entry, log)
        return seg, log

    def _local(self, folder: str, base: int, key: str) -> str:
        local = _paths.join(folder, f"{base:020d}{FILES[key]}")
        if os.path.lexists(local):
            _io.unlink(local)  # a leftover of a fetch that failed half way
        return local

    def _fill(self, entry: Published, seg: Segment, start: int, end: int) -> None:
        """Fetch ``[start, end)`` of ``seg``'s ``.log`` (its CRC-32 checked once whole)."""
        self._cached[entry.base][2].fill(start, end)

    def evict(self, base: int) -> None:
        """Drop a fetched segment (readers holding it keep reading it)."""
        cached = self._cached.pop(base, None)
        if cached is not None:
            cached[2].close()
            cached[0].delete()

    def close(self) -> None:
        for base in list(self._cached):
            self.evict(base)


def _check(got: int, crc: int, local: str, remote: str) -> None:
    if got != crc:
        _io.unlink(local)
        raise CorruptionError(f"remote file does not match the CRC-32 its manifest gives ({crc})",
                              path=remote)
