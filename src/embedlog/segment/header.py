"""Kafka's v2 record batch (message format "magic 2"): the layout, the header, varints. No I/O.

A ``.log`` segment is a plain concatenation of record batches. All integers are big-endian.
Batch header (61 bytes), as documented in Kafka's ``DefaultRecordBatch``:

====== ==== ==================== ================= ==========================================
offset size Kafka field          attribute         notes
====== ==== ==================== ================= ==========================================
0      8    baseOffset           base_offset       int64, offset of the first record slot
8      4    batchLength          batch_length      int32, batch size - 12 (bytes after it)
12     4    partitionLeaderEpoch leader_epoch      int32
16     1    magic                magic             int8, always 2
17     4    crc                  crc               uint32, CRC-32C of bytes [21, end)
21     2    attributes           attributes        int16, bit flags (below)
23     4    lastOffsetDelta      last_offset_delta int32, last offset - baseOffset
27     8    baseTimestamp        base_timestamp    int64, ms; delete horizon if bit 6
35     8    maxTimestamp         max_timestamp     int64, ms
43     8    producerId           producer_id       int64, -1 if none
51     2    producerEpoch        producer_epoch    int16, -1 if none
53     4    baseSequence         base_sequence     int32, -1 if none
57     4    recordsCount         records_count     int32, number of records (0 allowed)
====== ==== ==================== ================= ==========================================

Then the records section (bytes 61..end): the records back to back, or, when the codec bits are
set, one compressed stream of them (see :mod:`embedlog.segment.codecs`). baseOffset,
batchLength, partitionLeaderEpoch and magic lie outside the CRC, so a broker assigns the base
offset and leader epoch in place (:func:`set_base_offset`).

Attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp type
(1 = LogAppendTime: every record's timestamp is maxTimestamp), bit 4 transactional, bit 5
control batch, bit 6 baseTimestamp is the compaction delete horizon; other bits 0.

Record (inside the records section); varints are zigzag + base-128 little-endian groups
(protobuf ``sint``): varint at most 5 bytes (int32), varlong at most 10 bytes (int64):

================ ======= ===================================================================
field            type    notes
================ ======= ===================================================================
length           varint  bytes of the record after this field
attributes       int8    unused, 0
timestampDelta   varlong timestamp - baseTimestamp (may be negative)
offsetDelta      varint  offset - baseOffset, in [0, lastOffsetDelta]
keyLength        varint  -1 = null key
key              bytes
valueLength      varint  -1 = null value (tombstone)
value            bytes
headersCount     varint  >= 0
headers          ...     headersCount x (keyLength varint >= 0, key UTF-8, valueLength varint
                         >= -1, value bytes)
================ ======= ===================================================================

This module owns the layout and everything that reads or writes a header: the field table,
:class:`BatchHeader`, the file walk (:func:`next_batch`), the CRC check, scalar varints and
the control records' key/value layout. Records are encoded by :mod:`embedlog.segment.encode`
and decoded by :mod:`embedlog.segment.decode`; both import this module and nothing imports
them back. :mod:`embedlog.segment.format` re-exports the three.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import crc32c

from embedlog._frozen import builder
from embedlog.errors import CorruptBatchError, UnsupportedFormatError
from embedlog.segment.codecs import Compression

__all__ = [
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_MASK",
    "FIELDS",
    "HEADER",
    "HEADER_SIZE",
    "INT32_MAX",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MIN_BATCH_LENGTH",
    "MIN_RECORD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchHeader",
    "control_record",
    "decode_control_record",
    "decode_varint",
    "encode_varint",
    "iter_batches",
    "max_batches",
    "next_batch",
    "parse_header",
    "set_base_offset",
    "verify_crc",
]

# --------------------------------------------------------------------------- layout

FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)
"""The batch header, in order: (attribute name, struct code). Every constant below derives
from it."""

HEADER: Final = struct.Struct(">" + "".join(code for _, code in FIELDS))
HEADER_SIZE: Final = HEADER.size


def _offset_of(name: str) -> int:
    names = [n for n, _ in FIELDS]
    return struct.calcsize(">" + "".join(c for _, c in FIELDS[: names.index(name)]))


MAGIC_OFFSET: Final = _offset_of("magic")
CRC_OFFSET: Final = _offset_of("crc")
ATTRIBUTES_OFFSET: Final = _offset_of("attributes")
LOG_OVERHEAD: Final = _offset_of("leader_epoch")
"""baseOffset + batchLength: the bytes not counted by batchLength."""
_HEADER_TO_MAGIC: Final = MAGIC_OFFSET + 1
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
_LEGACY_MIN_LENGTH: Final = 14
"""Smallest batchLength of any message format (v0); below it Kafka calls the batch corrupt."""
MAGIC: Final = 2


def max_batches(log_size: int) -> int:
    """The most v2 batches ``log_size`` bytes can hold (a batch is at least
    :data:`HEADER_SIZE`, 61, bytes): what bounds an index of that log (one entry per batch)."""
    return log_size // HEADER_SIZE


COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

INT32_MAX: Final = 2**31 - 1
MIN_RECORD: Final = 7
"""Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
valueLength and headersCount, one byte each."""

_I64: Final = struct.Struct(">q")
_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")

assert HEADER_SIZE == 61 and LOG_OVERHEAD == 12 and CRC_OFFSET == 17
assert ATTRIBUTES_OFFSET == 21 and MAGIC_OFFSET == 16


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte v2 batch header; field order is :data:`FIELDS`."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch (batchLength + 12)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset following this batch (lastOffset + 1)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; UnsupportedFormatError for ids 5-7."""
        c = self.attributes & COMPRESSION_MASK
        if c > Compression.ZSTD:
            raise UnsupportedFormatError(f"unknown compression codec id {c}")
        return Compression(c)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """baseTimestamp when it holds the compaction delete horizon (bit 6), else None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None


_new_header = builder(BatchHeader)  # what parse_header builds per batch: slots set directly


# --------------------------------------------------------------------------- scalar varints


def encode_varint(value: int) -> bytes:
    """Zigzag base-128 varint/varlong of a signed 64-bit integer (Kafka ByteUtils)."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varint out of int64 range: {value}")
    z = (value << 1) ^ (value >> 63)
    if z < 0x80:
        return _SMALL_VARINTS[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL_VARINTS: Final = tuple(bytes((z,)) for z in range(0x80))


def decode_varint(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 10
) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns (value, position after it).

    CorruptBatchError if it runs past the buffer or exceeds ``max_bytes`` (5 for int32
    varints, 10 for varlongs).
    """
    z = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptBatchError("varint runs past the end of the data")
        b = buf[pos + i]
        z |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes <= 5 and z >= 1 << 32:
                raise CorruptBatchError("varint does not fit in 32 bits")
            z &= (1 << 64) - 1
            return (z >> 1) ^ -(z & 1), pos + i + 1
        shift += 7
    raise CorruptBatchError(f"varint longer than {max_bytes} bytes")


# --------------------------------------------------------------------------- batch walking


def _magic_error(magic: int, position: int) -> CorruptBatchError:
    if magic in (0, 1):
        return UnsupportedFormatError(
            f"message format v0/v1 (magic {magic}) is not supported", position=position
        )
    return CorruptBatchError(f"invalid magic byte {magic}", position=position)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header at ``pos`` (the CRC is not checked: :func:`verify_crc`).

    Raises CorruptBatchError when fewer than 61 bytes remain, batchLength < 49,
    recordsCount < 0 or lastOffsetDelta < 0; UnsupportedFormatError for magic 0/1;
    CorruptBatchError for any other magic != 2.
    """
    avail = len(buf) - pos
    if pos < 0 or avail < _HEADER_TO_MAGIC:
        raise CorruptBatchError("truncated batch header", position=pos)
    magic = buf[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        raise _magic_error(magic - 256 if magic > 127 else magic, pos)
    if avail < HEADER_SIZE:
        raise CorruptBatchError("truncated batch header", position=pos)
    h = _new_header(*HEADER.unpack_from(buf, pos))
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"batch length {h.batch_length} below 49", position=pos)
    if h.records_count < 0:
        raise CorruptBatchError(f"negative records count {h.records_count}", position=pos)
    if h.last_offset_delta < 0:
        raise CorruptBatchError(f"negative last offset delta {h.last_offset_delta}", position=pos)
    return h


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Check the CRC-32C over bytes [pos+21, pos+size); CorruptBatchError on mismatch."""
    end = pos + header.size
    if end > len(buf):
        raise CorruptBatchError("batch extends past the end of the data", position=pos)
    with memoryview(buf) as mv:
        crc = crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : end])
    if crc != header.crc:
        raise CorruptBatchError(
            f"CRC-32C mismatch: stored {header.crc:#010x}, computed {crc:#010x}", position=pos
        )


def _next(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    verify: bool,
    max_batch_size: int | None,
) -> BatchHeader | None:
    if pos >= end - _HEADER_TO_MAGIC:
        return None
    batch_length = int.from_bytes(buf[pos + 8 : pos + 12], "big", signed=True)
    if batch_length < _LEGACY_MIN_LENGTH:
        raise CorruptBatchError(f"invalid batch length {batch_length}", position=pos)
    size = batch_length + LOG_OVERHEAD
    if max_batch_size is not None and size > max_batch_size:
        raise CorruptBatchError(
            f"batch size {size} exceeds the maximum of {max_batch_size}", position=pos
        )
    if pos + size > end:
        return None
    header = parse_header(buf, pos)
    if verify:
        verify_crc(buf, pos, header)
    return header


def next_batch(
    buf: bytes | bytearray | memoryview,
    pos: int,
    *,
    verify: bool = True,
    max_batch_size: int | None = None,
) -> BatchHeader | None:
    """The batch starting at ``pos``, following Kafka's file walk (FileLogInputStream).

    Returns None at the end of the data: 17 bytes or fewer remain, or the batch extends past
    ``len(buf)`` (an incomplete tail, not yet written). Raises CorruptBatchError (with
    ``position=pos``) for batchLength < 14 (what a zero-filled tail looks like), a size above
    ``max_batch_size``, a header :func:`parse_header` rejects, or (``verify``) a bad CRC.
    """
    return _next(buf, pos, len(buf), verify, max_batch_size)


def iter_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    verify: bool = True,
    max_batch_size: int | None = None,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of consecutive batches in ``buf[start:end]``.

    Stops silently at an incomplete tail; raises CorruptBatchError at the first invalid batch
    (after yielding the valid ones before it).
    """
    stop = len(buf) if end is None else min(end, len(buf))
    pos = start
    while True:
        header = _next(buf, pos, stop, verify, max_batch_size)
        if header is None:
            return
        yield pos, header
        pos += header.size


def set_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Overwrite baseOffset (bytes 0-8, outside the CRC) in place, as a broker does."""
    _I64.pack_into(batch, 0, base_offset)


# --------------------------------------------------------------------------- control records

CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1


def decode_control_record(key: bytes | None) -> tuple[int, int]:
    """(version, type) of a control record key; CorruptBatchError if shorter than 4 bytes or
    the version is negative. Types: 0 ABORT, 1 COMMIT, 2-6 KRaft, others unknown (ignore)."""
    if key is None or len(key) < 4:
        raise CorruptBatchError("control record key shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptBatchError(f"negative control record version {version}")
    return version, kind


def control_record(kind: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """(key, value) of an end-transaction marker record (``kind`` 0 ABORT / 1 COMMIT)."""
    return _CONTROL_KEY.pack(0, kind), _END_TXN_VALUE.pack(0, coordinator_epoch)
