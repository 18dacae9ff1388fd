"""The offset index (``<base offset>.index``): sparse map from offsets to ``.log`` byte positions.

On-disk layout (Kafka's ``OffsetIndex``, kafka-format.md section 6.1): a sequence of 8-byte
big-endian entries, no header, no checksum::

    bytes 0-3   int32  relative offset = absolute offset - segment base offset
    bytes 4-7   int32  position: byte offset in the .log of the *start of a batch*

Entry ``(rel, pos)`` means: the append that starts at ``pos`` ends with offset ``base + rel``
(Kafka writes the last offset of the appended batches, recovery the last offset of each indexed
batch). Invariants kept by :meth:`OffsetIndex.append` and checked by the reader rule:

* relative offsets are strictly increasing and ``>= 0`` (they fit int32, so a segment spans at
  most 2^31 - 1 offsets);
* positions are strictly increasing and ``>= 0`` (batches are appended in offset order);
* only the first ``len`` entries are meaningful; the rest of a pre-allocated file is zeros.

The index is **sparse** (one entry per ``index.interval.bytes``, 4096 by default, of appended
data, so the first append of a segment never has one) and is a **cache**: it is not
checksummed, Kafka rebuilds it from the ``.log`` on recovery, and embedlog does the same when
:meth:`~embedlog.index.base.EntryFile.sanity_check` fails. A lookup only yields a position to
start scanning the log from: the floor entry for the target offset, or ``(base_offset, 0)``.
"""

from __future__ import annotations

import operator
import struct
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import CorruptIndexError
from .base import INT32_MAX, Columns, EntryFile

__all__ = ["OffsetIndex"]


class OffsetIndex(EntryFile):
    """A ``.index`` file. Absolute offsets at the API, relative offsets on disk.

    Args:
        path: the ``.index`` file.
        base_offset: the segment base offset (the number in the file name).
        writable: open for appending (creates and pre-allocates the file) or read-only.
        max_bytes: ``segment.index.bytes``; a writer pre-allocates the file to this size rounded
            down to a multiple of 8 and holds at most ``max_bytes // 8`` entries.
        copy: a reader reads the file into memory instead of mapping it (for an index another
            process is writing and may shrink).
    """

    ENTRY_SIZE: ClassVar[int] = 8
    DTYPE: ClassVar[np.dtype[np.void]] = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    KEY: ClassVar[str] = "rel"
    _STRUCT: ClassVar[struct.Struct] = struct.Struct(">ii")

    @classmethod
    def _self_invalid(cls, cur: Columns) -> npt.NDArray[np.bool_]:
        return (cur["rel"] < 0) | (cur["pos"] < 0)

    @classmethod
    def _pair_invalid(cls, prev: Columns, cur: Columns) -> npt.NDArray[np.bool_]:
        return (cur["rel"] <= prev["rel"]) | (cur["pos"] <= prev["pos"])

    @property
    def is_full(self) -> bool:
        """``len(self) >= max_entries``: the segment must roll before the next entry."""
        return self._n >= self._max_entries

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry, or ``base_offset`` if there is none."""
        if self._n == 0:
            return self.base_offset
        return self.base_offset + self._row(self._n - 1)[0]

    def append(self, offset: int, position: int) -> None:
        """Add the entry ``(offset, position)``: the batch starting at ``position`` in the log
        ends at absolute ``offset``.

        Raises:
            ValueError: the index is full; ``offset`` is not above the last entry's offset or
                does not fit the segment's relative int32 range; ``position`` is negative, above
                int32, or not above the last entry's position.
            ReadOnlyError: the index was opened read-only.

        ``append(base_offset, 0)`` on an empty index stores nothing: that entry would be all
        zero bytes, which readers take for padding, and it equals the empty-index lookup answer.
        """
        offset, position = self._writer_ints(offset, position)
        n = self._n
        if n >= self._max_entries:
            raise ValueError(
                f"offset index {self.path} is full ({self._n} of {self._max_entries} entries)"
            )
        rel = self._relative(offset)
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} does not fit an int32 file position")
        if n:
            last_rel, last_pos = self._row(n - 1)
            if rel <= last_rel:
                raise ValueError(
                    f"offset {offset} is not larger than the last indexed offset "
                    f"{self.base_offset + last_rel}"
                )
            if position <= last_pos:
                raise ValueError(
                    f"position {position} is not larger than the last indexed position {last_pos}"
                )
        elif rel == 0 and position == 0:
            return
        self._append_entry(rel, (rel, position))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Floor search: ``(absolute offset, position)`` of the last entry whose offset is
        ``<= target_offset``, or ``(base_offset, 0)`` if there is none. Scan the log forward from
        the returned position to find the batch holding ``target_offset``."""
        if self._closed:
            self._check_open()
        slot = self._floor_slot(operator.index(target_offset) - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self._row(slot)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose absolute offset is ``>= offset`` (zeroed on disk)."""
        self._check_writable()
        rel = operator.index(offset) - self.base_offset
        keep = self._floor_slot(rel - 1) + 1
        self._truncate_entries(keep)

    def _check_entries(self, log_size: int) -> None:
        n = self._n
        if n == 0:
            return
        pos = self._be_buf["pos"][:n]
        beyond = pos >= log_size
        if beyond.any():
            i = int(np.argmax(beyond))
            raise CorruptIndexError(
                f"entry {i} (offset {self.base_offset + self._row(i)[0]}) points at "
                f"position {int(pos[i])}, beyond the log size {log_size}",
                path=self.path,
                position=i * self.ENTRY_SIZE,
            )
