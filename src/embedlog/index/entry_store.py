"""The file under an index: opening, pre-allocating, writing, trimming and closing the
fixed-width entry files of ``.index`` and ``.timeindex``.

:class:`EntryStore` owns the descriptor or mapping and the in-memory copy of the valid entries;
:class:`~embedlog.index.base.EntryFile` (the reader rule, sanity checks, lookups) builds on it.
The on-disk layout and the reader rule are described in :mod:`embedlog.index.base`.

Modes
=====

``writable=True`` (the active segment, or a segment being recovered): the file is created if
missing and pre-allocated to ``max_bytes`` rounded down to a multiple of the entry size, as Kafka
does (10 MiB gives 10,485,760 bytes for ``.index`` and 10,485,756 for ``.timeindex``). The valid
entries live in an in-memory numpy array that grows by doubling; each new entry is written with
one ``pwrite`` at ``n * ENTRY_SIZE``. Every mutation goes through :mod:`embedlog._io` so tests
can record and replay it. The writer never maps the file: a mapping of a file that is later
shrunk dies with ``SIGBUS`` (reliability.md section 3.8). The writer keeps the invariant "valid
entries, then only zero bytes up to the end of the file": dropped entries are overwritten with
zeros instead of shrinking the file, and stale bytes found after the valid entries when the file
is opened are zeroed at once, so an old entry can never reappear after the next append.

``writable=False``: the file is mapped read-only with :mod:`mmap` and viewed with
``np.frombuffer``; the mapping is closed explicitly in :meth:`EntryStore.close`. With ``copy=True``
the file is read with ``os.pread`` into memory instead, for the live active segment of another
process, whose writer may trim (shrink) the file under a mapping. A 0-byte file is never mapped.
A read-only instance is a snapshot of the file at open time.

Bounded by the log
==================

An index holds at most one entry per batch of its log, and the smallest v2 batch is 61 bytes,
so a ``.log`` of ``L`` bytes justifies at most ``L // 61`` entries. The segment passes that bound
as ``entry_limit``; then no open reads, copies or maps more than ``entry_limit`` entries, however
large the file claims to be (a sparse 10 GiB ``.index`` costs nothing). A read-only file longer
than the bound is reported by :meth:`EntryFile.sanity_check` (the caller ignores or rebuilds it);
a writer cuts it back to its pre-allocated size. Only regular files are opened
(:func:`embedlog._io.open_regular`): anything else is a :class:`~embedlog.errors.CorruptIndexError`.
"""

from __future__ import annotations

import contextlib
import mmap
import operator
import os
import struct
from typing import ClassVar, Final, Literal

import numpy as np
import numpy.typing as npt

from .. import _io
from ..errors import CorruptIndexError, ReadOnlyError
from ._fileops import ZERO_CHUNK as _ZERO_CHUNK
from ._fileops import data_extents as _data_extents
from ._fileops import first_nonzero as _first_nonzero
from ._fileops import pread_all as _pread_all

__all__ = ["DEFAULT_MAX_BYTES", "EntryStore", "ScanEnd"]

DEFAULT_MAX_BYTES: Final = 10 * 1024 * 1024
"""Kafka's ``segment.index.bytes`` default."""

_MIN_CAPACITY: Final = 1024  # entries of in-memory buffer a writer starts with
_FIRST_READ: Final = 64 * 1024  # bytes a writer reads first when opening an existing file

ScanEnd = Literal["end", "padding", "invalid"]
"""Why the reader rule stopped: the end of the data, zero padding, or an invalid entry."""


def _round_down(max_bytes: int, entry_size: int) -> int:
    return max_bytes - max_bytes % entry_size


class EntryStore:
    """The file of an index of fixed-width big-endian entries and its valid entries in memory.

    Invariants: ``_be_buf[:_n]`` are the valid entries (disk layout), ``_key_buf[:_n]`` the
    native copy of their ``KEY`` column (a writer's always, a reader's once needed); a writer's
    file holds the valid entries, then only zero bytes; a reader never maps more than it saw at
    open time nor more than ``entry_limit`` entries. Subclasses supply the reader rule
    (:meth:`_scan`) and what it objects to (:meth:`_find_problem`).
    """

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype[np.void]]
    KEY: ClassVar[str]
    _STRUCT: ClassVar[struct.Struct]

    path: str
    base_offset: int
    writable: bool

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        *,
        writable: bool,
        max_bytes: int = DEFAULT_MAX_BYTES,
        copy: bool = False,
        entry_limit: int | None = None,
    ) -> None:
        """``entry_limit``: the most entries the log can justify (see "Bounded by the log");
        ``None`` reads the whole file."""
        base_offset = operator.index(base_offset)
        max_bytes = operator.index(max_bytes)
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.path = os.fspath(path)
        self.base_offset = base_offset
        self.writable = bool(writable)
        self._max_bytes = max_bytes
        self._closed = False
        self._fd: int | None = None
        self._mmap: mmap.mmap | None = None
        self._copied: bytes | None = None  # the file bytes of a copy=True reader
        self._n = 0
        # Valid entries are _be_buf[:_n] (big-endian, disk layout); _key_buf[:_n] is the native
        # copy of the KEY column (None until a read-only instance first needs it).
        self._be_buf: npt.NDArray[np.void] = np.empty(0, dtype=self.DTYPE)
        self._key_buf: npt.NDArray[np.int64] | None = None
        # Problem found in the file as opened: (message, byte position), or None.
        self._problem: tuple[str, int] | None = None
        self._problem_known = False
        self._scan_end: ScanEnd = "end"
        self._size = 0
        self._read_bytes = 0  # bytes of the file a reader looked at (<= _size)
        self._limit_bytes: int | None = (
            None if entry_limit is None else max(0, operator.index(entry_limit)) * self.ENTRY_SIZE
        )
        self._max_entries = 0
        if self.writable:
            self._open_writable()
        else:
            self._open_read_only(copy)

    def _open_read_only(self, copy: bool) -> None:
        try:
            fd = _io.open_regular(self.path, error=CorruptIndexError)
        except FileNotFoundError as exc:
            raise _io.storage_error(exc, "open", self.path) from exc
        try:
            size = os.fstat(fd).st_size
            readable = size if self._limit_bytes is None else min(size, self._limit_bytes)
            buf: bytes | mmap.mmap
            if copy:
                self._copied = buf = _pread_all(fd, readable)
                if len(buf) < readable:  # the file shrank meanwhile
                    size = readable = len(buf)
            elif readable > 0:
                # Map the size observed now, never more (reliability.md 3.8), and never more
                # than the log can justify.
                self._mmap = buf = mmap.mmap(fd, readable, access=mmap.ACCESS_READ)
            else:
                buf = b""
        except OSError as exc:
            raise _io.storage_error(exc, "read", self.path) from exc
        finally:
            os.close(fd)  # an mmap keeps its own reference to the file
        self._size = size
        self._read_bytes = readable
        count = readable // self.ENTRY_SIZE
        raw = np.frombuffer(buf, dtype=self.DTYPE, count=count) if count else self._be_buf
        self._n, self._scan_end = self._scan(raw)
        self._be_buf = raw
        self._max_entries = count

    def _open_writable(self) -> None:
        fd = _io.open_file(self.path, os.O_RDWR | os.O_CREAT)
        self._fd = fd
        try:
            es = self.ENTRY_SIZE
            rounded = _round_down(self._max_bytes, es)
            try:
                size = os.fstat(fd).st_size
                # Valid entries come first: read a prefix, and the whole file only if needed --
                # never more than the log can justify; what lies beyond the pre-allocated size
                # is cut below without being read.
                readable = size if self._limit_bytes is None else min(size, self._limit_bytes)
                data = _pread_all(fd, min(readable, _FIRST_READ))
                raw = np.frombuffer(data, dtype=self.DTYPE, count=len(data) // es)
                n, end = self._scan(raw)
                if end == "end" and len(data) < readable:
                    data = _pread_all(fd, readable)
                    raw = np.frombuffer(data, dtype=self.DTYPE, count=len(data) // es)
                    n, end = self._scan(raw)
                kept = size if self._limit_bytes is None else min(
                    size, max(self._limit_bytes, rounded))
                extents = _data_extents(fd, n * es, kept)
                first_nonzero = _first_nonzero(fd, extents)
            except OSError as exc:
                raise _io.storage_error(exc, "read", self.path) from exc
            self._problem = self._find_problem(size, raw, n, end, first_nonzero)
            self._problem_known = True
            self._n = n
            capacity = max(n, _MIN_CAPACITY)
            self._be_buf = np.zeros(capacity, dtype=self.DTYPE)
            self._be_buf[:n] = raw[:n]
            self._key_buf = np.zeros(capacity, dtype=np.int64)
            self._key_buf[:n] = raw[self.KEY][:n]
            del raw, data
            self._max_entries = rounded // es
            target = max(rounded, n * es)
            if size != target:
                _io.truncate(fd, target)
            self._size = target
            # Keep "valid entries, then zeros": clear stale bytes left after the valid entries
            # (only where the file has data; holes already read as zeros).
            if first_nonzero is not None:
                for lo, hi in extents:
                    if lo < target:
                        self._write_zeros(lo, min(hi, target))
        except BaseException:
            self._fd = None
            _io.close(fd)
            raise

    @property
    def max_entries(self) -> int:
        """Capacity: ``max_bytes // ENTRY_SIZE`` for a writer (``n`` after :meth:`trim`), the
        file length // ``ENTRY_SIZE`` for a reader."""
        return self._max_entries

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def file_size(self) -> int:
        """Length of the file in bytes (as opened, for a reader)."""
        return self._size

    def reset(self) -> None:
        """Drop every entry and grow the file back to ``max_bytes`` (Kafka's ``reset``), before a
        rebuild from the log. Clears a problem found when the file was opened."""
        self._check_writable()
        self._truncate_entries(0)
        self._problem = None
        self.resize(self._max_bytes)

    def trim(self) -> None:
        """Shrink the file to its valid entries (Kafka's ``trimToValidSize``, on roll and close).

        Afterwards the index is full until :meth:`resize` is called."""
        self._check_writable()
        valid = self._n * self.ENTRY_SIZE
        if self._size != valid:
            _io.truncate(self._writer_fd(), valid)
            self._size = valid
        self._max_entries = self._n

    def resize(self, max_bytes: int) -> None:
        """Pre-allocate the file to ``max_bytes`` rounded down to a multiple of the entry size
        (zero tail), as Kafka does for the active segment; never below the valid entries."""
        self._check_writable()
        max_bytes = operator.index(max_bytes)
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        rounded = _round_down(max_bytes, self.ENTRY_SIZE)
        target = max(rounded, self._n * self.ENTRY_SIZE)
        if target != self._size:
            _io.truncate(self._writer_fd(), target)
            self._size = target
        self._max_bytes = max_bytes
        self._max_entries = rounded // self.ENTRY_SIZE

    def flush(self) -> None:
        """``fsync`` the file (a writer); a no-op for a read-only instance."""
        self._check_open()
        if self.writable:
            _io.fsync(self._writer_fd())

    def close(self) -> None:
        """Release the file; idempotent. A writer trims the file first, as Kafka's ``close``."""
        if self._closed:
            return
        try:
            if self.writable:
                fd = self._writer_fd()
                try:
                    self.trim()
                finally:
                    self._fd = None
                    _io.close(fd)
        finally:
            self._closed = True
            self._n = 0
            self._be_buf = np.empty(0, dtype=self.DTYPE)  # drop the views before unmapping
            self._key_buf = None
            self._copied = None
            mm, self._mmap = self._mmap, None
            if mm is not None:
                # A leaked view would make close() raise; the GC then unmaps it instead.
                with contextlib.suppress(BufferError):
                    mm.close()

    @property
    def holds_descriptor(self) -> bool:
        """Whether a descriptor (a writer's file, a reader's mapping) is open now."""
        return self._fd is not None or self._mmap is not None

    def release(self) -> None:
        """A writer closes its descriptor and keeps everything else (its entries live in
        memory); the next write reopens the file by name (:mod:`embedlog._handles`). Nothing is
        trimmed or zeroed: the file stays as the entries written so far left it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            _io.close(fd)

    def _writer_fd(self) -> int:
        """The writer's descriptor, reopened if :meth:`release` closed it."""
        if self._fd is None:
            self._check_writable()
            self._fd = _io.open_file(self.path, os.O_RDWR)
        return self._fd

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{type(self).__name__} {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self.writable:
            raise ReadOnlyError(f"{type(self).__name__} {self.path} was opened read-only")

    def _writer_ints(self, a: int, b: int) -> tuple[int, int]:
        """A writer's two integer arguments as ints (``operator.index`` for any but an int),
        after the writer check (:class:`ReadOnlyError`, or ValueError when closed)."""
        if self._closed or not self.writable:
            self._check_writable()
        return (a if a.__class__ is int else operator.index(a),
                b if b.__class__ is int else operator.index(b))

    def _append_entry(self, key: int, row: tuple[int, ...]) -> None:
        """Write entry ``row`` at slot ``n`` (disk first, then memory)."""
        assert self._key_buf is not None
        n = self._n
        if n >= self._be_buf.shape[0]:
            self._grow(n + 1)
        at = n * self.ENTRY_SIZE
        _io.pwrite(self._fd if self._fd is not None else self._writer_fd(),
                   self._STRUCT.pack(*row), at)
        # The same bytes into the in-memory copy (cheaper than a structured row assignment).
        self._STRUCT.pack_into(self._be_buf, at, *row)  # type: ignore[arg-type]
        self._key_buf[n] = key
        self._n = n + 1

    def _replace_entry(self, i: int, key: int, row: tuple[int, ...]) -> None:
        """Overwrite the valid entry ``i`` in place (disk first, then memory)."""
        assert self._key_buf is not None and i < self._n
        _io.pwrite(self._writer_fd(), self._STRUCT.pack(*row), i * self.ENTRY_SIZE)
        self._be_buf[i] = row
        self._key_buf[i] = key

    def _grow(self, needed: int) -> None:
        assert self._key_buf is not None
        capacity = max(needed, min(2 * self._be_buf.shape[0], self._max_entries))
        be = np.zeros(capacity, dtype=self.DTYPE)
        be[: self._n] = self._be_buf[: self._n]
        keys = np.zeros(capacity, dtype=np.int64)
        keys[: self._n] = self._key_buf[: self._n]
        self._be_buf, self._key_buf = be, keys

    def _truncate_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; the dropped ones are zeroed on disk (never shrinks)."""
        if n >= self._n:
            return
        self._write_zeros(n * self.ENTRY_SIZE, self._n * self.ENTRY_SIZE)
        self._n = n

    def _write_zeros(self, start: int, stop: int) -> None:
        fd = self._writer_fd()
        zeros = bytes(min(_ZERO_CHUNK, stop - start))
        pos = start
        while pos < stop:
            length = min(len(zeros), stop - pos)
            _io.pwrite(fd, zeros if length == len(zeros) else zeros[:length], pos)
            pos += length

    # ------------------------------------------------------------------ the reader rule's hooks

    def _scan(self, raw: npt.NDArray[np.void]) -> tuple[int, ScanEnd]:
        """The number of valid leading entries of ``raw`` and why the scan stopped."""
        raise NotImplementedError

    def _find_problem(self, size: int, raw: npt.NDArray[np.void], n: int, end: ScanEnd,
                      first_nonzero: int | None) -> tuple[str, int] | None:
        """What the sanity check objects to in the file as opened, if anything."""
        raise NotImplementedError
