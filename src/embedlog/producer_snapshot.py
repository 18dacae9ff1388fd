"""Kafka's producer-state snapshot file (``<20-digit offset>.snapshot``): the codec, pure (no I/O).

Kafka's ``ProducerStateManager`` writes one at a segment roll and at a clean shutdown, named
after the offset it covers: it holds the state of every batch *below* that offset, so a
broker that opens the log replays only the batch headers from there. Layout (version 1, every
field big-endian)::

    offset  size  field
    0       2     version                 int16, always 1 (SNAPSHOT_VERSION)
    2       4     crc                     uint32, CRC-32C of every byte from offset 6 to the end
    6       4     entry count             int32, n
    10      46*n  entries, each:
                    producerId            int64
                    producerEpoch         int16
                    lastSequence          int32   last sequence written (-1: none)
                    lastOffset            int64   last offset of the last data batch (-1: none)
                    offsetDelta           int32   lastSequence - first sequence of that batch
                    timestamp             int64   the producer's last write (max timestamp)
                    coordinatorEpoch      int32   of the last marker seen (-1: none)
                    currentTxnFirstOffset int64   first offset of its open transaction (-1: none)

Only a producer's *last* batch is kept (``lastSequence``, ``lastOffset``, ``offsetDelta``),
not the last five embedlog's table remembers for duplicate detection
(:mod:`embedlog.producer_state`).

Decoding treats the bytes as untrusted: a wrong version, a size that is not exactly
``10 + 46 * count`` (so the count is bounded by the bytes present before anything is built), a
CRC mismatch or a field out of its range raises
:class:`~embedlog.errors.CorruptCheckpointError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

import crc32c

from .errors import CorruptCheckpointError

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SNAPSHOT_VERSION",
    "SnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
]

SNAPSHOT_VERSION: Final = 1
"""Kafka's ``PRODUCER_SNAPSHOT_VERSION``."""
_HEADER: Final = struct.Struct(">hIi")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
HEADER_SIZE: Final = _HEADER.size
"""Version, CRC and entry count: 10 bytes."""
ENTRY_SIZE: Final = _ENTRY.size
"""One producer entry: 46 bytes."""
_CRC_START: Final = 6
"""The CRC covers the bytes from here (the entry count) to the end (Kafka's
``PRODUCER_ENTRIES_OFFSET``)."""
_INT32_MAX: Final = 2**31 - 1


class SnapshotEntry(NamedTuple):
    """One producer of a snapshot, field for field as stored."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    """The file's bytes for ``entries`` (in the order given). Raises ``struct.error`` for a
    field that does not fit its type."""
    rows = list(entries)
    body = bytearray(_HEADER.size + _ENTRY.size * len(rows))
    struct.pack_into(">i", body, _CRC_START, len(rows))
    position = _HEADER.size
    for row in rows:
        _ENTRY.pack_into(body, position, *row)
        position += _ENTRY.size
    crc = crc32c.crc32c(memoryview(body)[_CRC_START:])
    struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview, *, path: str | None = None
                    ) -> list[SnapshotEntry]:
    """The entries of the snapshot bytes ``data`` (``path`` only names the file in errors).
    Raises :class:`~embedlog.errors.CorruptCheckpointError` unless ``data`` is exactly a
    version-1 snapshot with a matching CRC and entries within their ranges."""
    if len(data) < _HEADER.size:
        raise _bad(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header", path)
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise _bad(f"unknown version {version} (only {SNAPSHOT_VERSION} is known)", path)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise _bad(f"{len(data)} bytes cannot hold the {count} entries it announces", path)
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise _bad(f"CRC-32C {computed:#010x} does not match the stored {crc:#010x}", path)
    entries = [SnapshotEntry(*row) for row in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size:])]
    for i, entry in enumerate(entries):
        problem = _out_of_range(entry)
        if problem:
            raise _bad(f"entry {i} (producer id {entry.producer_id}): {problem}", path)
    return entries


def _out_of_range(e: SnapshotEntry) -> str | None:
    if e.producer_id < 0 or e.producer_epoch < -1:
        return "negative producer id or epoch"
    if e.last_sequence < -1 or e.last_offset < -1 or e.current_txn_first_offset < -1:
        return "sequence or offset below -1"
    if e.last_offset >= 0 and not 0 <= e.offset_delta <= min(e.last_offset, _INT32_MAX):
        return f"offset delta {e.offset_delta} outside [0, last offset {e.last_offset}]"
    return None


def _bad(msg: str, path: str | None) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"malformed producer snapshot: {msg}", path=path)
