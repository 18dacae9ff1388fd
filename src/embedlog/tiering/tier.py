"""One partition's tiered state: what is published on the remote, and reading it back.

A :class:`Tier` belongs to a :class:`~embedlog.partition.Partition` (``p.tier``). It holds
the partition's :class:`~.remote_manifest.Manifest` -- read at open from the local copy
``<topic>-<partition>/embedlog.remote-manifest`` (no network), replaced by the remote's own
on the writer's first tiering run (the remote is the truth) -- and a private read cache of
fetched segments.

Reads: :meth:`Tier.floor` is the lowest offset the remote holds *contiguously* below the
first local segment (published segments chain by ``next``; the first local base must be the
``next`` of one of them), so a partition's log start may lie below its first local segment.
:meth:`Tier.each_segment` opens the published segments of a range one at a time from the
partition's :class:`~.read_cache.ReadCache` (the first one's ``.log`` fetched only from where
the read starts), ordinary read-only :class:`~embedlog.segment.segment.Segment` objects the
normal read path scans.

Lock: ``Tier.lock`` serialises manifest changes and the cache. It is taken after the
partition's lock, never before it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

from .. import _io
from ..errors import (
    CorruptCheckpointError,
    CorruptionError,
    OffsetOutOfRangeError,
    StorageError,
)
from ..naming import REMOTE_MANIFEST, filename_prefix, parse_segment_file
from ..segment.segment import Segment, SegmentSettings
from .read_cache import ReadCache
from .remote_manifest import FILES, MAX_BYTES, Manifest, Published, encode, parse
from .store import RemoteStore

__all__ = ["Tier"]


class Tier:
    """The tiered state of the partition folder ``directory`` (named ``name`` on the remote).
    ``cache`` gives the log's private cache folder (made on first use)."""

    def __init__(self, store: RemoteStore, directory: str, name: str,
                 cache: Callable[[], str], *, writable: bool) -> None:
        self.store = store
        self.directory = directory
        self.name = name
        self.writable = writable
        self._cache_root = cache
        self.lock = threading.RLock()
        self.synced = False
        """Whether the remote's manifest was read since the open (the writer's first run)."""
        self._note_stamp: tuple[int, int, int] | None = None
        self.manifest = self._read_note()
        self._reads: ReadCache | None = None

    # ------------------------------------------------------------------ the manifest

    @property
    def note_path(self) -> str:
        return os.path.join(self.directory, REMOTE_MANIFEST)

    def _read_note(self) -> Manifest:
        path = self.note_path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return Manifest()
        self._note_stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        raw = _io.read_regular(path, MAX_BYTES + 1, error=CorruptCheckpointError)
        return Manifest() if raw is None else parse(raw, path=path)

    def refresh_note(self) -> None:
        """A read-only view: read the local copy again when the writer replaced it."""
        try:
            st = os.lstat(self.note_path)
        except FileNotFoundError:
            return
        if (st.st_ino, st.st_size, st.st_mtime_ns) != self._note_stamp:
            with self.lock:
                self.manifest = self._read_note()

    def sync_remote(self) -> None:
        """The writer: take the remote's manifest as the truth (once per open), and keep
        the local copy equal to it."""
        with self.lock:
            if self.synced:
                return
            raw = self.store.get((self.name, REMOTE_MANIFEST), MAX_BYTES)
            remote = Manifest() if raw is None else parse(
                raw, path=self.store.path((self.name, REMOTE_MANIFEST)))
            if remote != self.manifest:
                _io.write_atomic(self.note_path, encode(remote))
                self.manifest = remote
            self._collect_garbage()
            self.synced = True

    def _collect_garbage(self) -> None:
        """Delete the remote segment files no manifest entry names: an upload a crash cut
        short, or a segment whose deletion a crash interrupted (the writer is alone, so nothing
        unpublished is in flight at its first run)."""
        published = {(s.base, FILES[key]) for s in self.manifest.segments for key in s.files}
        for name in sorted(self.store.listing(self.name)):
            parsed = parse_segment_file(name)
            if parsed is not None and (parsed[0], parsed[1]) not in published and (
                    parsed[1] in FILES.values() and not parsed[2]):
                self.store.delete((self.name, name))

    def publish(self, manifest: Manifest) -> None:
        """Make ``manifest`` the published one: the remote object first (the commit point),
        then the local copy."""
        with self.lock:
            data = encode(manifest)
            self.store.put_bytes((self.name, REMOTE_MANIFEST), data)
            _io.write_atomic(self.note_path, data)
            self.manifest = manifest

    def remote_names(self, base: int, key: str) -> tuple[str, str]:
        return self.name, filename_prefix(base) + FILES[key]

    # ------------------------------------------------------------------ reading

    def floor(self, local_base: int) -> int | None:
        """The lowest offset readable from the remote without a hole up to ``local_base`` (the
        first local segment's base), or None when the remote holds nothing right below it."""
        segs = self.manifest.segments
        below = [s for s in segs if s.base < local_base]
        if not below or below[-1].next != local_base:
            return None
        return max(self.manifest.log_start, below[0].base)

    def segments(self, start: int, below: int, settings: SegmentSettings) -> list[Segment]:
        """The published segments holding offsets in ``[start, below)``, fetched and opened."""
        return list(self.each_segment(start, below, settings))

    def each_segment(self, start: int, below: int, settings: SegmentSettings
                     ) -> Iterator[Segment]:
        """:meth:`segments` one at a time: each is fetched only when the caller asks for it
        (a read that stops early fetches no more)."""
        wanted = [s for s in self.manifest.segments if s.next > start and s.base < below]
        if not wanted or wanted[0].base > start:
            raise _gone(start)
        for entry in wanted:
            yield self._open(entry, settings, max(start, entry.base))

    def offset_for_timestamp(self, timestamp: int, below: int,
                             settings: SegmentSettings, start: int = 0) -> int | None:
        """The earliest offset in ``[max(start, log start), below)`` whose timestamp is
        ``>= timestamp``."""
        start = max(start, self.manifest.log_start)
        for entry in self.manifest.segments:
            if entry.base < below and entry.max_timestamp >= timestamp:
                found = self._open(entry, settings).find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found
        return None

    def _open(self, entry: Published, settings: SegmentSettings,
              offset: int | None = None) -> Segment:
        """``entry``'s segment from the read cache, its ``.log`` there from ``offset`` on
        (None: whole); a fetch that fails because the segment was unpublished meanwhile
        raises :class:`~embedlog.errors.OffsetOutOfRangeError`."""
        with self.lock:
            if self._reads is None:
                self._reads = ReadCache(self.store, self.name, self._cache_root())
            try:
                return self._reads.open(entry, settings, offset)
            except (StorageError, CorruptionError):
                if self.manifest.find(entry.base) != entry:
                    raise _gone(entry.base) from None
                raise

    def evict(self, base: int) -> None:
        """Drop a fetched segment from the cache (readers holding it keep reading it)."""
        with self.lock:
            if self._reads is not None:
                self._reads.evict(base)

    def close(self) -> None:
        with self.lock:
            if self._reads is not None:
                self._reads.close()


def _gone(offset: int) -> OffsetOutOfRangeError:
    return OffsetOutOfRangeError(f"offset {offset} was deleted from the remote store (retention "
                                 "or delete_records) while it was being read")
