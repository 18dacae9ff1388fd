"""The transaction index (``<base offset>.txnindex``): one entry per aborted transaction whose
ABORT marker lies in the segment. Pure functions: no file I/O (the segment reads and writes the
file, :mod:`embedlog.segment.segment`).

On-disk layout (Kafka's ``TransactionIndex`` / ``AbortedTxn``, kafka-format.md section 7.6): a
sequence of 34-byte big-endian entries, no header, no checksum, no padding::

    bytes  0-1   int16  version, 0
    bytes  2-9   int64  producer id
    bytes 10-17  int64  first offset of the transaction
    bytes 18-25  int64  last offset: the ABORT marker's offset
    bytes 26-33  int64  last stable offset right after the marker: the first offset of the
                        oldest transaction of *another* producer still open then, else
                        ``last offset + 1``

Entries are in marker order, so last offsets strictly increase. A reader collecting the aborted
transactions of ``[start, end)`` walks the segments from the one holding ``start`` and stops
after the first entry whose last stable offset is ``>= end`` (every transaction overlapping the
range ended before that marker: Kafka's ``collectAbortedTxns``).

Like the other indexes this file is a cache of the ``.log``: recovery rebuilds it from the
markers. Bad bytes raise :class:`~embedlog.errors.CorruptIndexError` (a
:class:`~embedlog.errors.CorruptionError`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from ..errors import CorruptIndexError

__all__ = ["ENTRY_SIZE", "VERSION", "TxnIndexEntry", "decode_entries", "encode_entries",
           "encode_entry"]

ENTRY_SIZE: Final = 34
VERSION: Final = 0
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_ENTRY: Final = struct.Struct(">hqqqq")


class TxnIndexEntry(NamedTuple):
    """One aborted transaction as the index stores it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entry(entry: TxnIndexEntry) -> bytes:
    """The 34 bytes of ``entry``; ``CorruptIndexError`` for values no index may hold."""
    _check(entry, None, None)
    return _ENTRY.pack(VERSION, *entry)


def encode_entries(entries: Iterable[TxnIndexEntry]) -> bytes:
    """The whole file for ``entries`` (in marker order)."""
    return b"".join(encode_entry(e) for e in entries)


def decode_entries(data: bytes | bytearray | memoryview, *, path: str | None = None,
                   base_offset: int | None = None) -> list[TxnIndexEntry]:
    """Every entry of a ``.txnindex`` file's bytes.

    Raises :class:`CorruptIndexError` (naming ``path`` and the byte position) when the size is
    not a multiple of 34, an entry's version is not 0, its first offset is above its last
    offset, its last offset is below ``base_offset`` (the segment's: the marker lies in it) or
    does not lie above the previous entry's."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(
            f"transaction index of {len(data)} bytes is not a whole number of "
            f"{ENTRY_SIZE}-byte entries", path=path, position=len(data) - len(data) % ENTRY_SIZE)
    out: list[TxnIndexEntry] = []
    floor = base_offset
    for position in range(0, len(data), ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != VERSION:
            raise CorruptIndexError(f"transaction index entry has version {version}, not 0",
                                    path=path, position=position)
        entry = TxnIndexEntry(*fields)
        _check(entry, floor, path, position)
        floor = entry.last_offset + 1
        out.append(entry)
    return out


def _check(entry: TxnIndexEntry, floor: int | None, path: str | None,
           position: int | None = None) -> None:
    if not all(type(v) is int and _INT64_MIN <= v <= _INT64_MAX for v in entry):
        raise CorruptIndexError(f"transaction index entry {entry} does not fit int64 fields",
                                path=path, position=position)
    if entry.first_offset < 0 or entry.first_offset > entry.last_offset:
        raise CorruptIndexError(
            f"aborted transaction's first offset {entry.first_offset} is negative or above its "
            f"last offset {entry.last_offset}", path=path, position=position)
    if floor is not None and entry.last_offset < floor:
        raise CorruptIndexError(
            f"aborted transaction's last offset {entry.last_offset} is below {floor} (the "
            "segment's base offset or the previous entry's marker)", path=path,
            position=position)
