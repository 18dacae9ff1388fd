"""Fixed-width, big-endian entry files: the machinery shared by ``.index`` and ``.timeindex``.

On-disk layout
==============

An index file is a flat array of fixed-width entries and nothing else: no header, no footer, no
checksum. Every integer is big-endian (Kafka writes them through a ``java.nio.ByteBuffer``)::

    byte 0                ENTRY_SIZE            2*ENTRY_SIZE
    | entry 0             | entry 1             | ...             | zero padding ...  |

The field layout of one entry belongs to the subclass (:class:`~embedlog.index.OffsetIndex`:
8 bytes, :class:`~embedlog.index.TimeIndex`: 12 bytes). Offsets are stored *relative* to the
segment base offset as int32, so the API converts ``absolute = base_offset + relative``.

Why the format is this loose
============================

Indexes are **sparse caches** of facts that the ``.log`` file already holds: one entry every
``index.interval.bytes`` of appended batches. They are never checksummed and Kafka rebuilds them
from the log whenever it recovers a segment. A reader therefore treats an index as a *hint*:

* **Reader rule** (kafka-format.md section 6.3, same as Kafka's ``DumpLogSegments``): a length that
  is not a multiple of the entry size is rounded down; entries are taken in order and the scan
  stops at the first entry with index > 0 whose relative offset is 0 (pre-allocated zero padding)
  and at the first entry that breaks the ordering invariant of the subclass (for example a
  non-increasing offset). An all-zero entry 0 also counts as padding, so Kafka's 10 MiB all-zero
  active-segment files read as empty; the writers never store such an entry (it carries no
  information: it equals the "no entry" answer of a lookup).
* :meth:`EntryFile.sanity_check` is the strict counterpart (Kafka's ``sanityCheck``): anything the
  reader rule had to skip (a partial entry, an out-of-order entry, non-zero bytes after the zero
  padding) or an entry pointing past the log raises :class:`~embedlog.errors.CorruptIndexError`,
  and the caller rebuilds the index from the log.

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
``np.frombuffer``; the mapping is closed explicitly in :meth:`EntryFile.close`. With ``copy=True``
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

Lookups are binary searches (``np.searchsorted``) over a cached native-endian int64 copy of the
search column; the big-endian column is converted once, not per lookup.
"""

from __future__ import annotations

import contextlib
import mmap
import operator
import os
import struct
from typing import ClassVar, Final, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from .. import _io
from ..errors import CorruptIndexError, ReadOnlyError
from ._fileops import ZERO_CHUNK as _ZERO_CHUNK
from ._fileops import data_extents as _data_extents
from ._fileops import first_nonzero as _first_nonzero
from ._fileops import pread_all as _pread_all

__all__ = ["DEFAULT_MAX_BYTES", "INT32_MAX", "INT64_MAX", "INT64_MIN", "EntryFile"]

DEFAULT_MAX_BYTES: Final = 10 * 1024 * 1024
"""Kafka's ``segment.index.bytes`` default."""

INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_FIRST_SCAN_CHUNK: Final = 4096  # entries examined by the first vectorised scan step
_MIN_CAPACITY: Final = 1024  # entries of in-memory buffer a writer starts with
_FIRST_READ: Final = 64 * 1024  # bytes a writer reads first when opening an existing file

Columns = dict[str, npt.NDArray[np.int64]]
_E = TypeVar("_E", bound="EntryFile")
ScanEnd = Literal["end", "padding", "invalid"]


def _round_down(max_bytes: int, entry_size: int) -> int:
    return max_bytes - max_bytes % entry_size


class EntryFile:
    """Base class of an index file of fixed-width big-endian entries (see the module docstring).

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (big-endian structured dtype with a ``rel``
    field), :attr:`KEY` (the field lookups search) and ``_STRUCT``, and implement the ordering
    rule in :meth:`_self_invalid` / :meth:`_pair_invalid`.
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

    # ------------------------------------------------------------------ subclass hooks

    @classmethod
    def _self_invalid(cls, cur: Columns) -> npt.NDArray[np.bool_]:
        """Entries that are invalid on their own (e.g. a negative relative offset)."""
        raise NotImplementedError

    @classmethod
    def _pair_invalid(cls, prev: Columns, cur: Columns) -> npt.NDArray[np.bool_]:
        """Entries that break the ordering invariant with respect to the entry before them."""
        raise NotImplementedError

    def _check_entries(self, log_size: int) -> None:
        """Subclass part of :meth:`sanity_check` over the valid entries."""
        raise NotImplementedError

    # ------------------------------------------------------------------ opening

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

    def _scan(self, raw: npt.NDArray[np.void]) -> tuple[int, ScanEnd]:
        """Apply the reader rule: the number of valid leading entries and why the scan stopped.

        Vectorised over chunks that double in size, so a 10 MiB pre-allocated file with a few
        entries is not converted in full.
        """
        m = raw.shape[0]
        if m == 0:
            return 0, "end"
        first = self._columns(raw[:1])
        if all(int(col[0]) == 0 for col in first.values()):
            return 0, "padding"
        if bool(self._self_invalid(first)[0]):
            return 0, "invalid"
        lo = 0
        chunk = _FIRST_SCAN_CHUNK
        while lo + 1 < m:
            end = min(m, lo + 1 + chunk)
            cols = self._columns(raw[lo:end])
            prev = {name: col[:-1] for name, col in cols.items()}
            cur = {name: col[1:] for name, col in cols.items()}
            padding = cur["rel"] == 0
            stop = padding | self._self_invalid(cur) | self._pair_invalid(prev, cur)
            if stop.any():
                k = int(np.argmax(stop))
                return lo + 1 + k, ("padding" if bool(padding[k]) else "invalid")
            lo = end - 1
            chunk *= 2
        return m, "end"

    def _columns(self, rows: npt.NDArray[np.void]) -> Columns:
        names = self.DTYPE.names or ()
        return {name: rows[name].astype(np.int64) for name in names}

    def _find_problem(
        self,
        size: int,
        raw: npt.NDArray[np.void],
        n: int,
        end: ScanEnd,
        first_nonzero: int | None,
    ) -> tuple[str, int] | None:
        """What :meth:`sanity_check` objects to in the file as opened, if anything.

        ``first_nonzero`` is the position of the first non-zero byte at or after the end of the
        valid entries (``n * ENTRY_SIZE``), or None."""
        es = self.ENTRY_SIZE
        if size % es:
            return (
                f"file length {size} is not a multiple of the entry size {es}",
                size - size % es,
            )
        if end == "invalid":
            names = self.DTYPE.names or ()
            fields = ", ".join(f"{name}={int(raw[n][name])}" for name in names)
            return (f"entry {n} ({fields}) breaks the ordering of the index", n * es)
        if first_nonzero is not None:
            return (
                "non-zero bytes after the last valid entry (zero padding expected)",
                first_nonzero,
            )
        return None

    # ------------------------------------------------------------------ shared API

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        mode = "writable" if self.writable else "read-only"
        state = "closed" if self._closed else f"{self._n} entries"
        name = type(self).__name__
        return f"{name}({self.path!r}, base_offset={self.base_offset}, {mode}, {state})"

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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

    def entries(self) -> npt.NDArray[np.void]:
        """A copy of the valid entries, big-endian structured as on disk (``DTYPE``).

        A copy, so it stays valid after :meth:`close` and never pins the mapping."""
        self._check_open()
        return self._be_buf[: self._n].copy()

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

    def sanity_check(self, log_size: int) -> None:
        """Raise :class:`~embedlog.errors.CorruptIndexError` if the file as opened had anything the
        reader rule skipped (partial entry, out-of-order entry, data after the zero padding) or
        if a valid entry is inconsistent with a ``.log`` of ``log_size`` bytes."""
        self._check_open()
        log_size = operator.index(log_size)
        if log_size < 0:
            raise ValueError(f"log_size must be >= 0, got {log_size}")
        if not self._problem_known:
            self._problem = self._read_only_problem()
            self._problem_known = True
        if self._problem is not None:
            message, position = self._problem
            raise CorruptIndexError(message, path=self.path, position=position)
        self._check_entries(log_size)

    def _read_only_problem(self) -> tuple[str, int] | None:
        # The numpy view of the mapping lives only inside this frame, so close() can unmap.
        if self._size > self._read_bytes:
            limit = (self._limit_bytes or 0) // self.ENTRY_SIZE
            return (f"file is {self._size} bytes, more than {limit} entries: the log can "
                    "justify at most one entry per batch", self._read_bytes)
        source = self._mmap if self._mmap is not None else self._copied
        if source is None or self._size == 0:
            return None
        tail = np.frombuffer(source, dtype=np.uint8, count=self._read_bytes)[
            self._n * self.ENTRY_SIZE :]
        first_nonzero = None
        if tail.shape[0] and np.any(tail):
            first_nonzero = self._n * self.ENTRY_SIZE + int(np.argmax(tail != 0))
        del tail
        return self._find_problem(self._size, self._be_buf, self._n, self._scan_end, first_nonzero)

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

    # ------------------------------------------------------------------ helpers for subclasses

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{type(self).__name__} {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if not self.writable:
            raise ReadOnlyError(f"{type(self).__name__} {self.path} was opened read-only")

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(
                f"offset {offset} does not fit a relative int32 offset of segment "
                f"{self.base_offset}"
            )
        return rel

    def _keys(self) -> npt.NDArray[np.int64]:
        """Native int64 copy of the KEY column of the valid entries (cached)."""
        if self._key_buf is None:
            self._key_buf = self._be_buf[self.KEY][: self._n].astype(np.int64)
        return self._key_buf[: self._n]

    def _floor_slot(self, key: int) -> int:
        """Index of the last entry whose KEY <= ``key``, or -1."""
        n = self._n
        if n == 0:
            return -1
        keys = self._key_buf if self._key_buf is not None else self._keys()
        if key >= int(keys[n - 1]):  # also clamps keys beyond the int64 range
            return n - 1
        if key < int(keys[0]):
            return -1
        # ndarray.searchsorted: the np.searchsorted wrapper costs more than the search itself.
        return int(keys[:n].searchsorted(key, side="right")) - 1

    def _row(self, i: int) -> tuple[int, ...]:
        """Entry ``i`` as Python ints, decoded from the big-endian bytes."""
        # An ndarray exports the buffer protocol; numpy's stubs only declare it on Python 3.12+.
        return self._STRUCT.unpack_from(self._be_buf, i * self.ENTRY_SIZE)  # type: ignore[arg-type]

    def _append_entry(self, key: int, row: tuple[int, ...]) -> None:
        """Write entry ``row`` at slot ``n`` (disk first, then memory)."""
        assert self._key_buf is not None
        n = self._n
        if n >= self._be_buf.shape[0]:
            self._grow(n + 1)
        _io.pwrite(self._writer_fd(), self._STRUCT.pack(*row), n * self.ENTRY_SIZE)
        self._be_buf[n] = row
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
