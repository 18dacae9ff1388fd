"""The read cache of one tiered partition: published segments fetched from the remote,
opened as ordinary read-only :class:`~embedlog.segment.segment.Segment` objects.

Layout: ``<log's cache folder>/<topic>-<partition>/<20 digits>.log|.index|.timeindex|
.txnindex``, the remote's names. A segment's index files are fetched whole, each checked
against the size and CRC-32 the manifest gives. Its ``.log`` is made at its published size,
sparse, and filled from the back: a read from offset ``o`` fetches only the bytes from the
offset index's floor position of ``o`` to the end (one ranged read), since a scan only walks
forward from there; a later read from further back (or a timestamp lookup, an aborted
transactions lookup: ``offset=None``) fetches the missing part in front. Once the whole
``.log`` is there it is checked against its CRC-32 too; before, the batches a scan reads are
checked by their own CRCs, as every read is. Invariant: every byte of ``[filled, size)`` is the
remote's; nothing reads in front of ``filled``.

At most :data:`CACHED` segments are kept (least recently used out); an evicted one is retired
(a reader that captured it keeps its descriptors) and unlinked.
"""

from __future__ import annotations

import collections
import os
import zlib
from typing import Final

from .. import _io, _paths
from ..errors import CorruptionError
from ..segment.rules import Bounds
from ..segment.segment import Segment, SegmentSettings
from .remote_manifest import FILES, Published
from .store import CHUNK, RemoteStore

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
        self._cached: collections.OrderedDict[int, tuple[Segment, Published]] = (
            collections.OrderedDict())
        self._filled: dict[int, int] = {}
        """Per cached segment, from which byte its ``.log`` is there."""

    def open(self, entry: Published, settings: SegmentSettings, offset: int | None) -> Segment:
        """``entry``'s segment with its ``.log`` there from ``offset`` on (None: whole)."""
        cached = self._cached.get(entry.base)
        if cached is not None and cached[1] != entry:
            self.evict(entry.base)
            cached = None
        seg = self._fetch_indexes(entry, settings) if cached is None else cached[0]
        filled = self._filled[entry.base]
        wanted = 0 if offset is None else min(seg._indexed_position(offset), filled)
        if wanted < filled:
            self._fill(entry, seg, wanted, filled)
        self._cached.move_to_end(entry.base)
        while len(self._cached) > CACHED:
            self.evict(next(iter(self._cached)))
        return seg

    def _fetch_indexes(self, entry: Published, settings: SegmentSettings) -> Segment:
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
        fd = _io.open_file(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        try:
            _io.truncate(fd, entry.size)  # sparse: filled from the back as reads need it
        finally:
            _io.close(fd)
        seg = Segment(folder, entry.base, settings, writable=False)
        seg.bounds = Bounds(entry.next, False)
        self._cached[entry.base] = (seg, entry)
        self._filled[entry.base] = entry.size
        return seg

    def _local(self, folder: str, base: int, key: str) -> str:
        local = _paths.join(folder, f"{base:020d}{FILES[key]}")
        if os.path.lexists(local):
            _io.unlink(local)  # a leftover of a fetch that failed half way
        return local

    def _fill(self, entry: Published, seg: Segment, start: int, end: int) -> None:
        """Fetch ``[start, end)`` of the ``.log`` into its place (and check the whole file's
        CRC-32 once it is all there)."""
        names = (self.name, os.path.basename(seg.log_path))
        fd = _io.open_regular(seg.log_path, os.O_WRONLY)
        try:
            for position, chunk in self.store.get_range(names, entry.size, start, end):
                _io.pwrite(fd, chunk, position)
        finally:
            _io.close(fd)
        self._filled[entry.base] = start
        if start == 0:
            crc = 0
            rfd = _io.open_regular(seg.log_path)
            try:
                while chunk := os.read(rfd, CHUNK):
                    crc = zlib.crc32(chunk, crc)
            finally:
                os.close(rfd)
            try:
                _check(crc, entry.files["log"][1], seg.log_path, self.store.path(names))
            except CorruptionError:
                self.evict(entry.base)
                raise

    def evict(self, base: int) -> None:
        """Drop a fetched segment (readers holding it keep reading it)."""
        cached = self._cached.pop(base, None)
        self._filled.pop(base, None)
        if cached is not None:
            cached[0].delete()

    def close(self) -> None:
        for base in list(self._cached):
            self.evict(base)


def _check(got: int, crc: int, local: str, remote: str) -> None:
    if got != crc:
        _io.unlink(local)
        raise CorruptionError(f"remote file does not match the CRC-32 its manifest gives ({crc})",
                              path=remote)
