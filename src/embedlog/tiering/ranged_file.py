"""A local copy of one remote object that is filled by ranged reads as it is read.

A :class:`RangedFile` is made (``O_CREAT | O_EXCL | O_NOFOLLOW``) as a sparse file at the
object's known size -- the remote manifest's (tiered storage) or the listing's (a remote log
folder) -- and registered with :mod:`embedlog.segment.ondemand`, so a
:class:`~embedlog.segment.segment.Segment` opened on it fetches each byte range before it reads
it (:meth:`RangedFile.ensure`: the missing parts of the range, each stretched by a read-ahead
that doubles while a reader walks forward, from :data:`AHEAD_MIN` to :data:`AHEAD_MAX`, and
never over bytes already there). :meth:`RangedFile.fill` fetches an exact range.

Invariants: the filled ranges (sorted, disjoint, merged) hold the remote's bytes and nothing
reads outside them; nothing is ever written outside ``[0, size)`` and the file never grows;
every ranged read checks the object's size against the known one and a range that ends early
is refused (:meth:`~.store.RemoteStore.get_range`: :class:`~embedlog.errors.CorruptionError`),
so a remote that lies about a size or tears a read cannot make a read go out of bounds or hand
out short data. With a known CRC-32 (tiered storage) the whole file is checked once it is all
there; without one (a plain remote folder) each batch's own CRC, checked by every read, is the
integrity check. A file that failed its CRC stays refused. Only the file this object created
(the same ``(st_dev, st_ino)``, still at its size) is ever written, and only by the process
that created it: in a ``fork()`` child a read of bytes not fetched yet raises
:class:`~embedlog.errors.InheritedLogError` (what is there reads on).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import threading
import zlib
from typing import Final

from .. import _fork, _io
from ..errors import CorruptionError, StorageError
from ..segment import ondemand
from .store import CHUNK, RemoteStore

__all__ = ["AHEAD_MAX", "AHEAD_MIN", "RangedFile"]

AHEAD_MIN: Final = 64 << 10
"""Smallest ranged read for a reader's miss (a point read fetches about this much)."""
AHEAD_MAX: Final = 16 << 20
"""Largest ranged read a forward walk grows to."""


class RangedFile:
    """The local file ``local``: the object ``names`` of ``store``, ``size`` bytes, filled as
    needed (see the module notes); ``crc`` is the whole object's CRC-32 when known."""

    def __init__(self, store: RemoteStore, names: tuple[str, ...], local: str, size: int,
                 crc: int | None = None) -> None:
        self.store, self.names, self.path, self.size, self.crc = store, names, local, size, crc
        fd = _io.open_file(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        try:
            _io.truncate(fd, size)
            st = os.fstat(fd)
        finally:
            _io.close(fd)
        self.identity = (st.st_dev, st.st_ino, size)
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._ahead = AHEAD_MIN
        self._last_end = -1
        self._refused: CorruptionError | None = None
        self._closed = False
        self._whole = size == 0
        """Every byte is there (and checked, with a CRC): reads need no lock."""
        self._owner = os.getpid()
        self._inherited = False
        ondemand.register(self.identity, self)
        _fork.track(self)

    def _on_fork_child(self) -> None:
        self._inherited = True
        self._lock = threading.Lock()  # another thread of the parent may have held it

    @property
    def complete(self) -> bool:
        return self.size == 0 or (self._starts == [0] and self._ends == [self.size])

    def front(self) -> int:
        """Where the part filled up to the end begins (``size`` when the end is missing)."""
        with self._lock:
            return self._starts[-1] if self._ends and self._ends[-1] == self.size else self.size

    def ensure(self, position: int, length: int) -> None:
        """A reader's ``[position, position + length)``: its missing parts fetched, with
        read-ahead."""
        end = min(self.size, position + length)
        if position >= end or self._whole:
            return
        with self._lock:
            for start, stop in self._gaps(position, end):
                if start == self._last_end:
                    self._ahead = min(self._ahead * 2, AHEAD_MAX)
                else:
                    self._ahead = AHEAD_MIN
                i = bisect.bisect_right(self._starts, start)
                limit = self._starts[i] if i < len(self._starts) else self.size
                stop = min(limit, max(stop, start + self._ahead))
                self._fetch(start, stop)
                self._last_end = stop

    def fill(self, start: int, end: int) -> None:
        """Fetch the missing parts of exactly ``[start, end)``."""
        with self._lock:
            for lo, hi in self._gaps(max(0, start), min(end, self.size)):
                self._fetch(lo, hi)

    def _gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of ``[start, end)`` not filled yet (raises for a refused file, and in a
        ``fork()`` child for any part missing)."""
        if self._refused is not None:
            raise self._refused
        if self._inherited and not self._whole:
            raise _fork.inherited_error(self.path, self._owner)
        gaps = []
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while start < end and i < len(self._starts):
            lo, hi = self._starts[i], self._ends[i]
            if lo >= end:
                break
            if lo > start:
                gaps.append((start, lo))
            start = max(start, hi)
            i += 1
        if start < end:
            gaps.append((start, end))
        return gaps

    def _open(self) -> int:
        """This object's file, opened to write; ``StorageError(ESTALE)`` once it was closed,
        removed or replaced."""
        fd = -1
        if not self._closed:
            with contextlib.suppress(FileNotFoundError):
                fd = _io.open_regular(self.path, os.O_WRONLY)
        if fd >= 0 and _identity(fd) == self.identity:
            return fd
        if fd >= 0:
            _io.close(fd)
        raise StorageError(errno.ESTALE, "a cached remote file was removed or replaced before "
                           "all of it was fetched", self.path)

    def _fetch(self, start: int, end: int) -> None:
        fd = self._open()
        try:
            for position, chunk in self.store.get_range(self.names, self.size, start, end,
                                                        AHEAD_MAX):
                _io.pwrite(fd, chunk, position)
        finally:
            _io.close(fd)
        self._add(start, end)
        if self.complete:
            if self.crc is not None:
                self._check_crc()
            self._whole = True

    def _add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self._ends, start)
        j = bisect.bisect_right(self._starts, end)
        if i < j:
            start, end = min(start, self._starts[i]), max(end, self._ends[j - 1])
        self._starts[i:j], self._ends[i:j] = [start], [end]

    def _check_crc(self) -> None:
        crc = 0
        fd = _io.open_regular(self.path)
        try:
            while chunk := os.read(fd, CHUNK):
                crc = zlib.crc32(chunk, crc)
        finally:
            os.close(fd)
        if crc != self.crc:
            self._refused = CorruptionError(
                f"remote file does not match the CRC-32 its manifest gives ({self.crc})",
                path=self.store.path(self.names))
            raise self._refused

    def close(self) -> None:
        """No more fills (call before the file is unlinked): a reader still holding the
        file reads what is there; reaching a hole is ``StorageError(ESTALE)``."""
        self._closed = True
        ondemand.forget(self.identity)


def _identity(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size
