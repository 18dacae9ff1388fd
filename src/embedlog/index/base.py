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

The file itself (opening, pre-allocation, the writer's in-place writes, trimming, mapping and
closing, and the bound the log puts on an index) is :mod:`embedlog.index.entry_store`'s.

Lookups are binary searches (``np.searchsorted``) over a cached native-endian int64 copy of the
search column; the big-endian column is converted once, not per lookup.
"""

from __future__ import annotations

import operator
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import CorruptIndexError
from .entry_store import DEFAULT_MAX_BYTES, EntryStore, ScanEnd

__all__ = ["DEFAULT_MAX_BYTES", "INT32_MAX", "INT64_MAX", "INT64_MIN", "EntryFile"]

INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

_FIRST_SCAN_CHUNK: Final = 4096  # entries examined by the first vectorised scan step

Columns = dict[str, npt.NDArray[np.int64]]
_E = TypeVar("_E", bound="EntryFile")


class EntryFile(EntryStore):
    """Base class of an index file of fixed-width big-endian entries (see the module docstring).

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (big-endian structured dtype with a ``rel``
    field), :attr:`KEY` (the field lookups search) and ``_STRUCT``, and implement the ordering
    rule in :meth:`_self_invalid` / :meth:`_pair_invalid`.
    """

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

    def entries(self) -> npt.NDArray[np.void]:
        """A copy of the valid entries, big-endian structured as on disk (``DTYPE``).

        A copy, so it stays valid after :meth:`close` and never pins the mapping."""
        self._check_open()
        return self._be_buf[: self._n].copy()

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
