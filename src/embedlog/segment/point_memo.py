"""Where each record of a batch ends, remembered so that a point read reads its records only.

The records of a v2 batch can only be located by following the chain of record lengths from
the batch's first record, so a read of one record (``Log.read(topic, partition, offset,
max_records=1)``) reads and walks its whole batch: about 125 KB for 1,000 records of 100 B. The
first point read of a batch decodes all of it (its CRC checked as every read checks it) and
remembers, here, the batch's header and where each of its records ends; a later point read of
that batch reads only the bytes of the records it wants (one ``pread``) and decodes those
(:func:`embedlog.segment.decode.decode_run`, with the checks of the whole-batch decode, or
:mod:`.run_records`, which gives the same records and errors). A
point read of a segment with nothing remembered (:func:`holds`) and of a batch that cannot be
remembered costs nothing more than before: no file identity is taken, nothing is looked up.

Entries are keyed by ``(owner, file identity, position)``: ``owner`` is a number never reused
in the process, one per open :class:`~embedlog.segment.segment.Segment` (:func:`new_owner`), so
that, exactly as with :mod:`.crc_memo`'s per-segment memo, an entry never outlives the segment
object it was made for (a later file that got the same inode number is another segment); the
identity (device, inode, size, modification time of the open descriptor) makes a file changed
since (a new size or modification time) never answered from an entry of its old contents. The
writer's own active segment, which has no identity, is never remembered.

Only batches whose records can be decoded alone are kept (:func:`eligible`): uncompressed (the
bytes on disk are the records), dense (record ``i`` has offset ``base + i``), not a control
batch, and with no record headers (a record then ends one byte -- the zero headers count --
after its value). Layout of an :class:`Entry`: its key and position, the
:class:`~embedlog.segment.header.BatchHeader` (and its base and last offsets) and ``ends``
(int32, one per record: the end of record ``i`` relative to the start of the records section,
strictly increasing, the last one the section's size).

A point read finds its batch here by offset (:func:`find`), with no offset-index lookup: the
batches of one ``(owner, identity)`` are also kept ordered by base offset. Their positions must
follow the same order and their offsets must not overlap (as in every file a whole read
accepts: a batch's offsets lie above the previous batch's); a batch that would break this is
not remembered, so the batch :func:`find` names for an offset is the one a walk of the file
from any earlier batch reaches first.

Bounded: entries for at most :data:`MEMO_RECORDS` records in the process; the least recently
used go first (an LRU table keyed by the entry objects). Thread-safe (one lock around the
tables); a ``fork()`` child starts with a new lock and empty tables (another thread of the
parent may have held the lock).
"""

from __future__ import annotations

import itertools
import os
import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from typing import Final

import numpy as np

from . import _native
from .codecs import Compression
from .crc_memo import Identity
from .decode import DecodedRecords
from .header import HEADER_SIZE, TIMESTAMP_TYPE_MASK, BatchHeader

__all__ = ["MEMO_RECORDS", "MIN_RECORDS", "Entry", "Key", "Run", "clear", "eligible", "find",
           "find_latest", "floor_index", "get", "header_fields", "holds", "new_owner", "remember"]

MEMO_RECORDS: Final = 4 << 20
"""Records whose ends the process remembers at most (4 bytes each: 16 MiB)."""

MIN_RECORDS: Final = 16
"""Smaller batches are read whole: the saving would not pay for the entry."""

Key = tuple[int, Identity]
"""``(owner, file identity)`` of a segment being read (:func:`new_owner`)."""


class Entry:
    """A remembered batch: its header and the end of each record (see the module notes), at
    ``position`` of the segment file ``key``. Equal only to itself (the memo's LRU is keyed by
    the entry object). ``fields``: what the compiled point read (``_ccodec.point_run``) needs
    of the header, ``(timestamp type, base offset, base timestamp, max timestamp, last offset
    delta, whether LogAppendTime)``."""

    __slots__ = ("base", "ends", "fields", "header", "key", "last", "position")

    def __init__(self, key: Key, position: int, header: BatchHeader, ends: array[int]) -> None:
        self.key = key
        self.position = position
        self.header = header
        self.ends = ends
        self.base = header.base_offset
        self.last = header.last_offset
        self.fields = header_fields(header)

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The file bytes ``(start, length)`` of records ``[first, last)`` of the batch at
        file position 0 (add the batch's position)."""
        ends = self.ends
        lo = ends[first - 1] if first else 0
        return HEADER_SIZE + lo, ends[last - 1] - lo


def floor_index(bases: array[int], value: int) -> int:
    """Where in ``bases`` (increasing) the last item <= ``value`` is; -1 when there is none.
    The pure twin of ``_ccodec.floor_index``."""
    return bisect_right(bases, value) - 1


def header_fields(header: BatchHeader) -> tuple[int, int, int, int, int, bool]:
    """:attr:`Entry.fields` of a batch's header."""
    ttype = (header.attributes & TIMESTAMP_TYPE_MASK) >> 3  # header.timestamp_type
    return (ttype, header.base_offset, header.base_timestamp, header.max_timestamp,
            header.last_offset_delta, ttype == 1)


Run = tuple[Entry, int, int, int]
"""``(entry, start, length, count)``: ``count`` consecutive records of a remembered batch
(``entry``), the ``length`` bytes at file position ``start``."""


class _Ordered:
    """The remembered batches of one :data:`Key`, by base offset (positions in the same
    order, offsets not overlapping: see the module notes)."""

    __slots__ = ("bases", "entries", "key")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.bases = array("q")  # int64: searched by the compiled floor_index
        self.entries: list[Entry] = []  # as bases

    def fits(self, i: int, position: int, header: BatchHeader) -> bool:
        """Whether a batch at ``position`` fits between batches ``i - 1`` and ``i``."""
        if i and not (self.entries[i - 1].position < position
                      and self.entries[i - 1].last < header.base_offset):
            return False
        return i == len(self.bases) or (position < self.entries[i].position
                                        and header.last_offset < self.bases[i])


_lock = threading.Lock()
_table: OrderedDict[Entry, None] = OrderedDict()  # every entry, least recently used first
_ordered: dict[Key, _Ordered] = {}
_latest: dict[int, _Ordered] = {}  # per owner: the file identity remembered or found last
_held = [0]  # records remembered
_owners = itertools.count()
_per_owner: dict[int, int] = {}  # entries held per owner (absent: none)


def new_owner() -> int:
    """A number no other segment object of the process gets."""
    return next(_owners)


def eligible(header: BatchHeader) -> bool:
    """Whether a batch of this header may be remembered (its records still to be checked for
    headers: :func:`remember` does)."""
    return (header.records_count >= MIN_RECORDS and not header.is_control
            and header.compression == Compression.NONE
            and header.records_count == header.last_offset_delta + 1)


def remember(identity: Key, position: int, header: BatchHeader,
             records: DecodedRecords) -> None:
    """Remember the batch at ``position`` of the segment file ``identity``, whose records
    section was decoded whole into ``records`` (positions relative to the section); a batch
    with record headers, not :func:`eligible`, already remembered, or out of order with the
    batches remembered for ``identity`` (see the module notes) is not remembered."""
    n = len(records)
    if records.headers is not None or n != header.records_count or not eligible(header):
        return
    ends = (records.value_pos + np.maximum(records.value_len, 0) + 1).astype(np.int32)
    if int(ends[-1]) != header.size - HEADER_SIZE:
        return  # not the layout assumed above: never trust such an entry
    with _lock:
        while _table and _held[0] + n > MEMO_RECORDS:
            _forget(_table.popitem(last=False)[0])
        ordered = _ordered.get(identity)
        if ordered is None:
            ordered = _ordered[identity] = _Ordered(identity)
        _latest[identity[0]] = ordered
        i = bisect_right(ordered.bases, header.base_offset)
        if not ordered.fits(i, position, header):
            if not ordered.bases:
                _drop(ordered)
            return
        entry = Entry(ordered.key, position, header, array("i", ends.tobytes()))
        ordered.bases.insert(i, header.base_offset)
        ordered.entries.insert(i, entry)
        _table[entry] = None
        _held[0] += n
        _per_owner[identity[0]] = _per_owner.get(identity[0], 0) + 1


def _forget(entry: Entry) -> None:
    """Drop one entry, gone from the LRU table already (the lock held)."""
    owner = entry.key[0]
    _held[0] -= len(entry.ends)
    _per_owner[owner] -= 1
    if not _per_owner[owner]:
        del _per_owner[owner]
    ordered = _ordered[entry.key]
    i = ordered.entries.index(entry)
    del ordered.bases[i], ordered.entries[i]
    if not ordered.bases:
        _drop(ordered)


def _drop(ordered: _Ordered) -> None:
    """Forget the (empty) batches of one file identity (the lock held)."""
    del _ordered[ordered.key]
    if _latest.get(ordered.key[0]) is ordered:
        del _latest[ordered.key[0]]


holds = _per_owner.__contains__
"""``holds(owner)``: whether any batch of the segment object ``owner`` is remembered (a point
read of a segment with none goes straight to its batch: no identity, no lookup)."""


def get(identity: Key, position: int) -> Entry | None:
    """The entry of the batch at ``position`` of the segment file ``identity``, if
    remembered."""
    with _lock:
        ordered = _ordered.get(identity)
        for entry in () if ordered is None else ordered.entries:
            if entry.position == position:
                _table.move_to_end(entry)
                return entry
        return None


def find(identity: Key, offset: int, stop: int, wanted: int) -> Run | None:
    """The records a read of up to ``wanted`` (>= 1) records from ``offset`` (below
    ``stop``) takes of the remembered batch of the segment file ``identity`` that holds
    ``offset``; None when no batch holding it is remembered, or when that batch holds fewer
    than ``wanted`` records from ``offset`` and ends below ``stop`` (the read goes on past
    it). Makes ``identity`` its owner's latest (:func:`find_latest`)."""
    return find_latest(identity[0], offset, stop, wanted, identity)


def find_latest(owner: int, offset: int, stop: int, wanted: int,
                identity: Key | None = None) -> Run | None:
    """:func:`find` for the file identity of segment object ``owner`` that was remembered or
    found last (its entries carry it: ``entry.key``). Only for a reader that then checks
    that the file still has that identity before it reads (``_ccodec.point_run``), and
    otherwise takes :func:`find` with the file's identity: the entry is then exactly the one
    :func:`find` would give. With ``identity``: :func:`find`."""
    with _lock:  # (not acquire/try: an interrupt could land between the two)
        if identity is None:
            ordered = _latest.get(owner)
        elif (ordered := _ordered.get(identity)) is not None:
            _latest[owner] = ordered
        if ordered is None:
            return None
        core = _native.CORE
        i = floor_index(ordered.bases, offset) if core is None else core.floor_index(
            ordered.bases, offset)
        if i < 0:
            return None
        entry = ordered.entries[i]
        if entry.last < offset:
            return None
        _table.move_to_end(entry)
    end = entry.last + 1  # one past the run: the batch's end, wanted records, or stop
    if offset + wanted < end:
        end = offset + wanted
    if stop < end:
        end = stop
    elif end < stop and end - offset < wanted:
        return None  # the read goes on past the batch
    ends, first = entry.ends, offset - entry.base
    lo = ends[first - 1] if first else 0
    return entry, entry.position + HEADER_SIZE + lo, ends[end - entry.base - 1] - lo, end - offset


def clear() -> None:
    """Forget every entry."""
    with _lock:
        _forget_all()


def _forget_all() -> None:
    _table.clear()
    _ordered.clear()
    _latest.clear()
    _per_owner.clear()
    _held[0] = 0


def _in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _forget_all()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
