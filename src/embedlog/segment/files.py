"""A segment's descriptors: opened on first use, counted by the descriptor budget.

:class:`SegmentFiles` is the file-handle half of :class:`~embedlog.segment.segment.Segment`:
the ``.log`` read and write descriptors (and, through the segment's indexes, their files or
mappings) are opened when first needed and may be closed again by the process-wide LRU
(:mod:`embedlog._handles`) whenever no thread uses them. Every use runs *pinned* (:func:`pinned`,
or ``CACHE.pin``/``unpin`` around it); a released segment reopens its files by name, and a
reopened ``.log`` must be the inode first seen (else ``StorageError(ESTALE)``: the file was
deleted or replaced meanwhile). A segment about to be deleted or replaced is :meth:`retired
<SegmentFiles.retire>`: its ``.log`` is opened now and kept outside the budget until its last
reference goes, so iterators that captured it read the old file to the end.

A ``.log`` registered with :mod:`.ondemand` (a sparse copy of a remote file) is filled through
its filler before every :meth:`SegmentFiles.pread` (the one place a ``.log`` is read).

Lock order: ``_open_lock`` -> ``HandleCache._lock`` (``release_handles`` runs under the latter
and takes no lock).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import weakref
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from .. import _io
from .._closer import close_later
from .._handles import CACHE
from ..errors import StorageError
from ..index import OffsetIndex, TimeIndex
from . import ondemand

__all__ = ["SegmentFiles", "pinned"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound="SegmentFiles")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def pinned(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """Run ``method`` with the segment's descriptors pinned (never closed meanwhile by the
    descriptor budget); afterwards the budget learns how many it holds."""

    def run(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        CACHE.pin(self)
        try:
            return method(self, *args, **kwargs)
        finally:
            CACHE.unpin(self, self._descriptors())

    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


class SegmentFiles:
    """The descriptors of one segment (see the module notes)."""

    log_path: str
    writable: bool
    size: int
    _index: OffsetIndex | None
    _timeindex: TimeIndex | None
    _index_size_seen: int
    _next_offset: int | None

    def _open_files(self, writable: bool, suffix: str) -> None:
        """Create (a writer) or stat the ``.log``; nothing else is opened yet."""
        self._wfd: int | None = None
        self._rfd: int | None = None
        self._missing = False  # the .log did not exist when the segment was opened
        self._retired = False  # deleted or replaced: descriptors kept, outside the budget
        self._open_lock = threading.Lock()
        self._rfd_closer: weakref.finalize[[int], SegmentFiles] | None = None
        st: os.stat_result | None
        if writable:
            self._wfd = _io.open_file(self.log_path, os.O_WRONLY | os.O_CREAT)
            st = os.fstat(self._wfd)
        else:
            st = self._stat_log()
        self._identity: tuple[int, int] | None = (st.st_dev, st.st_ino) if st else None
        self.size = st.st_size if st is not None else 0
        # A sparse .log filled on demand (a remote's cache): every pread asks for its bytes.
        self._filler = None if writable or st is None else ondemand.filler_of(
            (st.st_dev, st.st_ino, st.st_size))
        if writable:
            self._done_with_handles()
        elif suffix:
            # A compaction's .cleaned/.swap files are renamed away soon: open now, keep open.
            self.retire()

    def _stat_log(self) -> os.stat_result | None:
        """The ``.log`` of a read-only segment, not opened yet (None: missing)."""
        try:
            st = os.lstat(self.log_path)
        except FileNotFoundError:
            self._missing = True
            return None
        except OSError as exc:
            raise StorageError(exc.errno or 0, f"cannot open segment: {exc.strerror}",
                               self.log_path) from exc
        if not stat.S_ISREG(st.st_mode):
            # Not a regular file (a planted symlink, a FIFO): the open refuses it as it says.
            os.close(self._open_regular())
        return st

    # ------------------------------------------------------------------ descriptors
    #
    # Files are opened on first use and may be closed by the descriptor budget
    # (:mod:`embedlog._handles`) whenever no thread uses them: every use runs pinned.

    def _close_files(self) -> None:
        """Stop counting this segment and close the read descriptor (the writer's is closed
        by sealing)."""
        CACHE.forget(self)
        if self._rfd_closer is not None:
            self._rfd_closer()
        self._rfd = self._rfd_closer = None

    def _descriptors(self) -> int:
        if self._retired:
            return 0
        n = (self._wfd is not None) + (self._rfd is not None)
        for idx in (self._index, self._timeindex):
            if idx is not None and idx.holds_descriptor:
                n += 1
        return n

    def _done_with_handles(self) -> None:
        CACHE.pin(self)
        CACHE.unpin(self, self._descriptors())

    def release_handles(self) -> None:
        """Close every descriptor, keeping the state needed to reopen (the budget's eviction:
        runs under the cache lock while no thread uses this segment)."""
        rfd_closer, self._rfd_closer, self._rfd = self._rfd_closer, None, None
        wfd, self._wfd = self._wfd, None
        with contextlib.suppress(OSError):  # the descriptor is gone whatever close says
            if rfd_closer is not None:
                rfd_closer()
            if wfd is not None:
                _io.close(wfd)
        if self.writable:
            for idx in (self._index, self._timeindex):
                if idx is not None:
                    idx.release()
        else:
            for name in ("_index", "_timeindex"):
                idx = getattr(self, name)
                if idx is not None and idx.holds_descriptor:
                    idx.close()
                    setattr(self, name, None)
                    self._index_size_seen = -1

    def _read_fd(self) -> int | None:
        """The ``.log`` read descriptor (caller pinned), opened on first use: None if the file
        did not exist when the segment was opened."""
        fd = self._rfd
        if fd is not None or self._missing:
            return fd
        with self._open_lock:
            if self._rfd is None:
                self._rfd = self._reopen(os.O_RDONLY)
                self._rfd_closer = weakref.finalize(self, os.close, self._rfd)
            return self._rfd

    def _write_fd(self) -> int:
        """The writer's ``.log`` descriptor (caller pinned), reopened after an eviction."""
        fd = self._wfd
        if fd is not None:
            return fd
        assert self.writable, "append to a read-only segment"
        with self._open_lock:
            if self._wfd is None:
                self._wfd = self._reopen(os.O_WRONLY, through_io=True)
            return self._wfd

    def _reopen(self, flags: int, *, through_io: bool = False) -> int:
        """Open ``log_path`` again, refusing a file that is not the one this segment opened
        (compaction renamed another over the name, or it was deleted meanwhile)."""
        try:
            fd = (_io.open_file(self.log_path, flags) if through_io
                  else self._open_regular())
        except FileNotFoundError as exc:
            raise self._gone() from exc
        except StorageError as exc:
            if exc.errno == errno.ENOENT:
                raise self._gone() from exc
            raise
        st = os.fstat(fd)
        if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
            os.close(fd) if not through_io else _io.close(fd)
            raise self._gone()
        self._identity = (st.st_dev, st.st_ino)
        return fd

    def _open_regular(self) -> int:
        """Open the ``.log`` to read: a regular file only (a FIFO must not block the open, a
        symlink is not followed)."""
        return _io.open_regular(self.log_path)

    def _gone(self) -> StorageError:
        return StorageError(
            errno.ESTALE,
            "the segment was deleted or replaced while its file was closed by the descriptor "
            "budget (embedlog._handles)", self.log_path)

    def retire(self) -> None:
        """About to be deleted or replaced: open the ``.log`` now and keep it open outside the
        budget, so iterators that captured this segment read the old file to the end. The
        descriptor closes with the last reference (or :meth:`close`)."""
        CACHE.pin(self)
        try:
            if not self._missing:
                try:
                    self._read_fd()
                except StorageError:  # gone already: read as a missing file, as if never there
                    self._missing, self.size, self._identity = True, 0, None
            self._retired = True
            detached = self._rfd_closer.detach() if self._rfd_closer is not None else None
            if detached is not None:  # its last close frees the file's blocks: off this thread
                self._rfd_closer = weakref.finalize(self, close_later, detached[2][0])
        finally:
            CACHE.unpin(self, self._descriptors())

    def pread(self, position: int, length: int) -> bytes:
        CACHE.pin(self)
        try:
            return self.pread_pinned(position, length)
        finally:
            CACHE.unpin(self, self._descriptors())

    def pread_pinned(self, position: int, length: int) -> bytes:
        """:meth:`pread` for a caller that has pinned the segment."""
        if self._filler is not None:
            self._filler.ensure(position, length)
        fd = self._read_fd()
        return b"" if fd is None else os.pread(fd, length, position)

    @pinned
    def refresh(self) -> None:
        """Re-read the file size (read-only view of a segment another process appends to)."""
        if not self._missing and not self.writable:
            fd = self._read_fd()
            assert fd is not None
            size = os.fstat(fd).st_size
            if size != self.size:
                self.size = size
                self._next_offset = None

    def is_current(self) -> bool:
        """Whether ``log_path`` still names the file this segment reads. Compaction renames a
        new file over a segment's name; an index found by that name then belongs to the new
        file, and a reader still holding the old one must not use it."""
        if self._identity is None or self._missing:
            return False
        try:
            named = os.lstat(self.log_path)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == self._identity

