"""The time index (``<base offset>.timeindex``): sparse map from timestamps to offsets.

On-disk layout (Kafka's ``TimeIndex``, kafka-format.md section 6.2): a sequence of 12-byte
big-endian entries, no header, no checksum::

    bytes 0-7   int64  timestamp (ms): the largest timestamp seen in the segment so far
    bytes 8-11  int32  relative offset of the last offset of the batch holding that timestamp

Entry ``(ts, rel)`` means: no record at or before offset ``base + rel`` has a timestamp above
``ts``; records with a larger timestamp come later. Invariants kept by
:meth:`TimeIndex.maybe_append` and checked by the reader rule:

* timestamps are strictly increasing (an entry is written only when the maximum timestamp grew);
* relative offsets are non-decreasing and ``>= 0``, and only entry 0 may have relative offset 0
  (a later one would read as padding; a larger timestamp at the base offset replaces entry 0);
* only the first ``len`` entries are meaningful; the rest of a pre-allocated file is zeros.

When a segment is rolled or closed Kafka appends a final ``(max timestamp, its offset)`` entry
bypassing the full check, so a full time index keeps one slot in reserve: it counts as full at
``max_entries - 1``. The index is **sparse** (written alongside offset-index entries) and a
**cache** rebuilt from the ``.log``: it is not checksummed, and a lookup only yields an offset to
start scanning from.
"""

from __future__ import annotations

import operator
import struct
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import CorruptIndexError
from .base import INT32_MAX, INT64_MAX, INT64_MIN, Columns, EntryFile

__all__ = ["TimeIndex"]


class TimeIndex(EntryFile):
    """A ``.timeindex`` file. Absolute offsets at the API, relative offsets on disk.

    Same constructor as :class:`~embedlog.index.OffsetIndex`; ``max_bytes`` is rounded down to a
    multiple of 12 (10 MiB gives 10,485,756 bytes).
    """

    ENTRY_SIZE: ClassVar[int] = 12
    DTYPE: ClassVar[np.dtype[np.void]] = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    KEY: ClassVar[str] = "ts"
    _STRUCT: ClassVar[struct.Struct] = struct.Struct(">qi")

    @classmethod
    def _self_invalid(cls, cur: Columns) -> npt.NDArray[np.bool_]:
        return cur["rel"] < 0

    @classmethod
    def _pair_invalid(cls, prev: Columns, cur: Columns) -> npt.NDArray[np.bool_]:
        return (cur["ts"] <= prev["ts"]) | (cur["rel"] < prev["rel"])

    _virtual_zero: bool = False  # maybe_append(0, base_offset) seen on an empty index

    @property
    def is_full(self) -> bool:
        """``len(self) >= max_entries - 1``: one slot stays reserved for the entry written when
        the segment is rolled (``maybe_append(..., skip_full_check=True)``)."""
        return self._n >= self._max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, absolute offset)`` of the last entry; ``(-1, base_offset)`` if empty
        (-1 is Kafka's ``NO_TIMESTAMP``)."""
        self._check_open()
        return self._last_entry()

    def _last_entry(self) -> tuple[int, int]:
        if self._n == 0:
            return (0 if self._virtual_zero else -1), self.base_offset
        ts, rel = self._row(self._n - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's timestamp
        (Kafka's rule; otherwise nothing is written). Pass the largest timestamp seen so far and
        the last offset of the batch that holds it.

        Raises:
            ValueError: the index is full (unless ``skip_full_check``, which may use the one
                reserved slot); ``offset`` is below the last entry's offset or outside the
                segment's relative int32 range; ``timestamp`` does not fit int64.
            ReadOnlyError: the index was opened read-only.

        Kafka raises when the timestamp goes backwards; here it is ignored like an equal one,
        so a caller may pass per-batch maxima. ``(0, base_offset)`` on an empty index is not
        stored: it would be all zero bytes, which readers take for padding.
        """
        timestamp, offset = self._writer_ints(timestamp, offset)
        n = self._n
        if not skip_full_check and n >= self._max_entries - 1:
            raise ValueError(
                f"time index {self.path} is full ({self._n} of {self._max_entries} entries, "
                "one reserved)"
            )
        if not INT64_MIN <= timestamp <= INT64_MAX:
            raise ValueError(f"timestamp {timestamp} does not fit int64")
        last_ts, last_offset = self._last_entry()
        if n and offset < last_offset:
            raise ValueError(f"offset {offset} is below the last time-indexed offset {last_offset}")
        rel = self._relative(offset)
        if timestamp <= last_ts:
            return
        if rel == 0:
            # Entry bytes (0, 0) read back as padding, and so would any second entry with a
            # relative offset of 0. Neither is written; both forms give the same lookups.
            if self._n == 0 and timestamp == 0:
                self._virtual_zero = True  # remembered in memory only: last_entry() is (0, base)
                return
            if self._n:  # only entry 0 can have rel 0 (offsets never decrease): replace it
                self._replace_entry(0, timestamp, (timestamp, rel))
                return
        if self._n >= self._max_entries:
            raise ValueError(f"time index {self.path} has no room left, not even the reserved slot")
        self._append_entry(timestamp, (timestamp, rel))

    def lookup(self, target_ts: int) -> int:
        """Absolute offset of the last entry whose timestamp is ``<= target_ts``, or
        ``base_offset`` if there is none: where to start scanning for the first batch whose max
        timestamp is ``>= target_ts``."""
        entry = self.floor_entry(target_ts)
        return self.base_offset if entry is None else entry[1]

    def floor_entry(self, target_ts: int) -> tuple[int, int] | None:
        """``(timestamp, absolute offset)`` of the last entry whose timestamp is ``<= target_ts``
        (None if there is none). The batch holding that offset has exactly that max timestamp
        when the entry is intact: callers check it against the log before trusting it."""
        if self._closed:
            self._check_open()
        slot = self._floor_slot(operator.index(target_ts))
        if slot < 0:
            return None
        ts, rel = self._row(slot)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose absolute offset is ``>= offset`` (zeroed on disk)."""
        self._check_writable()
        rel = operator.index(offset) - self.base_offset
        if rel <= 0:
            keep = 0
            self._virtual_zero = False
        elif rel > INT32_MAX:
            keep = self._n
        else:
            rels = self._be_buf["rel"][: self._n].astype(np.int64)
            keep = int(rels.searchsorted(rel, side="left"))
        self._truncate_entries(keep)

    def reset(self) -> None:
        super().reset()
        self._virtual_zero = False

    def _check_entries(self, log_size: int) -> None:
        if self._n and log_size == 0:
            raise CorruptIndexError(
                f"{self._n} time-index entries for an empty log", path=self.path, position=0
            )
