"""Kafka's v2 record batch (message format "magic 2"): encoder, decoder, validator. No I/O.

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

Encoding and decoding work on whole batches with numpy (varint widths, field positions and
lengths as arrays); only the record-length chain of the decoder and the header sections are
walked record by record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

from embedlog.errors import CorruptBatchError, UnsupportedFormatError
from embedlog.segment.codecs import Compression, compress

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
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MIN_BATCH_LENGTH",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchHeader",
    "DecodedRecords",
    "control_record",
    "decode_control_record",
    "decode_records",
    "decode_varint",
    "encode_batch",
    "encode_varint",
    "iter_batches",
    "next_batch",
    "parse_header",
    "rebuild_batch",
    "set_base_offset",
    "verify_crc",
]

I64 = npt.NDArray[np.int64]

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

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

_INT32_MAX: Final = 2**31 - 1
_MIN_RECORD: Final = 7
"""Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
valueLength and headersCount, one byte each."""
_MIN_BODY: Final = _MIN_RECORD - 1

_SLACK: Final = 9
"""Zero bytes after each row of the encoder's varint matrices (see :func:`_put_varints`)."""

_U32: Final = struct.Struct(">I")
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
    h = BatchHeader(*HEADER.unpack_from(buf, pos))
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


# --------------------------------------------------------------------------- vector helpers


def _zigzag(x: I64) -> npt.NDArray[np.uint64]:
    z: npt.NDArray[np.uint64] = ((x << 1) ^ (x >> 63)).view(np.uint64)
    return z


def _widths(z: npt.NDArray[np.uint64]) -> I64:
    """Bytes of each varint (1-10)."""
    w = np.ones(z.shape, np.int64)
    if z.size:
        hi = int(z.max())
        t = 0x80
        while t <= hi:
            w += z >= t
            t <<= 7
    return w


_Z14 = np.arange(1 << 14, dtype=np.int64)
_VARINT2_BYTE0: Final = ((_Z14 & 0x7F) | np.where(_Z14 >= 0x80, 0x80, 0)).astype(np.uint8)
_VARINT2_BYTE1: Final = (_Z14 >> 7).astype(np.uint8)
"""First and second byte of the varint of each zigzag value below 2**14 (0 if one byte)."""
del _Z14


def _put_varints(out: npt.NDArray[np.uint8], pos: I64, z: npt.NDArray[np.uint64], w: I64) -> None:
    """Write varints ``z`` (already zigzagged) of widths ``w`` at positions ``pos`` of ``out``.

    Every varint is written as ``max(w)`` bytes, the ones past its width being 0x00, so no
    per-width selection is needed: callers write a row's fields left to right (a later field
    overwrites those zeros) and leave ``max(w) - 1`` bytes of slack at the end of each row.
    """
    wmax = int(w.max())
    if wmax == 1:
        out[pos] = z
        return
    if wmax == 2:  # z < 2**14: both bytes from tables
        out[pos] = _VARINT2_BYTE0[z]
        out[pos + 1] = _VARINT2_BYTE1[z]
        return
    for j in range(wmax):
        byte = (z >> np.uint64(7 * j)) & np.uint64(0x7F)
        if j + 1 < wmax:
            byte |= (w > j + 1).astype(np.uint64) << np.uint64(7)
        out[pos + j] = byte


def _rows_to_pieces(
    flat: npt.NDArray[np.uint8], width: int, row_w: I64, zero_end: I64 | None
) -> list[bytes]:
    """Split a row-major (n, width) byte matrix into n bytes objects of lengths ``row_w``.

    Rows are zero padded; numpy's fixed-width ``S`` dtype strips trailing zeros, which gives
    each row's bytes unless the row itself ends in 0x00: those rows (``zero_end`` = their
    indices) are sliced explicitly.
    """
    pieces: list[bytes] = flat.view(f"S{width}").tolist()
    if zero_end is not None and zero_end.size:
        raw = flat.tobytes()
        for i, wi in zip(zero_end.tolist(), row_w[zero_end].tolist(), strict=True):
            pieces[i] = raw[i * width : i * width + wi]
    return pieces


def _lengths(items: Sequence[bytes | None], n: int) -> tuple[I64, bool]:
    """(lengths with -1 for None, whether any None)."""
    try:
        return np.fromiter(map(len, items), np.int64, n), False  # type: ignore[arg-type]
    except TypeError:
        lens = np.fromiter((-1 if v is None else len(v) for v in items), np.int64, n)
        return lens, True


def _encode_headers(hs: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    if not hs:
        return b"\x00"
    parts = [encode_varint(len(hs))]
    for k, v in hs:
        if not isinstance(k, str):
            raise TypeError(f"header keys must be str, not {type(k).__name__}")
        kb = k.encode("utf-8")
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if v is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(v)))
            parts.append(bytes(v))
    return b"".join(parts)


# --------------------------------------------------------------------------- encoding


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    timestamps: int | Sequence[int] | npt.NDArray[np.int64],
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    leader_epoch: int = 0,
    offset_deltas: Sequence[int] | npt.NDArray[np.int64] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    max_timestamp: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one complete v2 batch (correct batchLength and CRC-32C).

    ``values[i]``/``keys[i]`` None = null (``keys=None``: every key null); ``headers[i]`` a
    sequence of (str, bytes | None) or None. ``timestamps``: one int for all records or one per
    record. ``offset_deltas`` (default 0..n-1) must be strictly increasing and >= 0;
    ``last_offset_delta`` defaults to the last of them and may be larger (compaction keeps the
    original). baseTimestamp is the first record's timestamp, or ``delete_horizon_ms`` (which
    sets attribute bit 6; deltas are then relative to it); maxTimestamp is the largest
    timestamp unless ``max_timestamp`` is given (LogAppendTime callers pass the append time).

    With no records (compaction's empty batch) ``last_offset_delta`` is required and, as in
    Kafka's ``writeEmptyHeader``, the batch is the 61-byte header with codec none,
    baseTimestamp -1 and maxTimestamp ``max_timestamp`` (default -1).
    """
    n = len(values)
    codec = Compression(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
    attrs = timestamp_type << 3
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    if n == 0:
        if last_offset_delta is None:
            raise ValueError("an empty batch needs last_offset_delta")
        if not 0 <= last_offset_delta <= _INT32_MAX:
            raise ValueError(f"last_offset_delta out of range: {last_offset_delta}")
        return _assemble(
            b"",
            Compression.NONE,
            None,
            base_offset,
            leader_epoch,
            attrs,
            last_offset_delta,
            -1,
            -1 if max_timestamp is None else max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            0,
        )
    if not isinstance(values, list):
        values = list(values)

    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_MASK
    if n == 1 and offset_deltas is None and isinstance(timestamps, int):
        # The single-record append: no numpy at all.
        base_ts = timestamps if delete_horizon_ms is None else int(delete_horizon_ms)
        max_ts = timestamps if max_timestamp is None else int(max_timestamp)
        lod = 0 if last_offset_delta is None else int(last_offset_delta)
        if not 0 <= lod <= _INT32_MAX:
            raise ValueError(f"last_offset_delta {lod} outside [0, {_INT32_MAX}]")
        records = _encode_records_scalar(values, keys, headers, [timestamps - base_ts], [0])
        return _assemble(records, codec, compression_level, base_offset, leader_epoch, attrs, lod,
                       base_ts, max_ts, producer_id, producer_epoch, base_sequence, n)

    # ---- per-record integers, vectorised
    ts = np.asarray(timestamps, dtype=np.int64)
    if ts.ndim == 0:
        ts = np.full(n, ts, np.int64)
    elif ts.shape != (n,):
        raise ValueError(f"{ts.size} timestamps for {n} records")
    base_ts = int(ts[0]) if delete_horizon_ms is None else int(delete_horizon_ms)
    max_ts = int(ts.max()) if max_timestamp is None else int(max_timestamp)
    tsd = ts - np.int64(base_ts)

    if offset_deltas is None:
        od = np.arange(n, dtype=np.int64)
    else:
        od = np.asarray(offset_deltas, dtype=np.int64)
        if od.shape != (n,):
            raise ValueError(f"{od.size} offset deltas for {n} records")
        if od[0] < 0 or (n > 1 and bool((np.diff(od) <= 0).any())):
            raise ValueError("offset_deltas must be >= 0 and strictly increasing")
    lod = int(od[-1]) if last_offset_delta is None else int(last_offset_delta)
    if not int(od[-1]) <= lod <= _INT32_MAX:
        raise ValueError(f"last_offset_delta {lod} outside [{int(od[-1])}, {_INT32_MAX}]")

    if n <= _SCALAR_MAX_RECORDS:
        records = _encode_records_scalar(values, keys, headers, tsd.tolist(), od.tolist())
    else:
        records = _encode_records_vectorised(values, keys, headers, tsd, od)
    return _assemble(records, codec, compression_level, base_offset, leader_epoch, attrs, lod,
                   base_ts, max_ts, producer_id, producer_epoch, base_sequence, n)


_SCALAR_MAX_RECORDS: Final = 8  # below this, numpy's per-call overhead exceeds a Python loop


def _encode_records_scalar(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    tsd: list[int],
    od: list[int],
) -> bytes:
    """The records section of a small batch, one record at a time."""
    n = len(values)
    if keys is not None and len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} values")
    if headers is not None and len(headers) != n:
        raise ValueError(f"{len(headers)} headers for {n} values")
    out = []
    for i in range(n):
        key = None if keys is None else keys[i]
        value = values[i]
        body = b"".join(
            (
                b"\x00",
                encode_varint(tsd[i]),
                encode_varint(od[i]),
                b"\x01" if key is None else encode_varint(len(key)) + bytes(key),
                b"\x01" if value is None else encode_varint(len(value)) + bytes(value),
                _encode_headers(headers[i] if headers is not None else None),
            )
        )
        out.append(encode_varint(len(body)))
        out.append(body)
    return b"".join(out)


def _encode_records_vectorised(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    tsd: npt.NDArray[np.int64],
    od: npt.NDArray[np.int64],
) -> bytes:
    """The records section of a batch with no per-record Python work except header sections."""
    n = len(values)
    vl, v_null = _lengths(values, n)
    if keys is None:
        kl = np.full(n, -1, np.int64)
        k_null = True
        keyed = False
    else:
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if not isinstance(keys, list):
            keys = list(keys)
        kl, k_null = _lengths(keys, n)
        keyed = int(kl.max()) >= 0  # all-null keys are laid out like keys=None

    hsec: list[bytes] | None = None
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"{len(headers)} headers for {n} values")
        if any(headers):
            hsec = [_encode_headers(h) for h in headers]
    hl = np.ones(n, np.int64) if hsec is None else np.fromiter(map(len, hsec), np.int64, n)

    z_tsd, z_od, z_kl, z_vl = _zigzag(tsd), _zigzag(od), _zigzag(kl), _zigzag(vl)
    w_tsd, w_od, w_kl, w_vl = _widths(z_tsd), _widths(z_od), _widths(z_kl), _widths(z_vl)
    body = 1 + w_tsd + w_od + w_kl + np.maximum(kl, 0) + w_vl + np.maximum(vl, 0) + hl
    if int(body.max()) > _INT32_MAX:
        raise ValueError("record too large")
    z_body = _zigzag(body)
    w_body = _widths(z_body)

    # ---- the "A" row of each record: length, attributes, tsDelta, offsetDelta, keyLength
    # (+ valueLength when unkeyed); written into a zero-padded matrix, split into bytes.
    # Without headers, row i > 0 starts with record i-1's headersCount byte 0x00.
    if hsec is None:
        c_body = np.ones(n, np.int64)
        c_body[0] = 0
        w_body_end = c_body + w_body
    else:
        c_body = None
        w_body_end = w_body
    c_tsd = w_body_end + 1
    c_od = c_tsd + w_tsd
    c_kl = c_od + w_od
    row_a = c_kl + w_kl
    if not keyed:
        c_vl = row_a
        row_a = row_a + w_vl
    wa = int(row_a.max()) + _SLACK
    base_a = np.arange(0, n * wa, wa, dtype=np.int64)
    mat_a = np.zeros(n * wa, np.uint8)
    _put_varints(mat_a, base_a if c_body is None else base_a + c_body, z_body, w_body)
    if z_tsd.any():
        _put_varints(mat_a, base_a + c_tsd, z_tsd, w_tsd)
    _put_varints(mat_a, base_a + c_od, z_od, w_od)
    _put_varints(mat_a, base_a + c_kl, z_kl, w_kl)
    if not keyed:
        _put_varints(mat_a, base_a + c_vl, z_vl, w_vl)
    last_a = kl if keyed else vl
    zero_a = np.flatnonzero(last_a == 0) if int(last_a.min()) <= 0 else None
    pieces_a = _rows_to_pieces(mat_a, wa, row_a, zero_a)

    # ---- interleave: A, [key, B = valueLength], value, [header section]
    k = 4 if keyed else 2
    if hsec is not None:
        k += 1
    parts: list[bytes | None] = [None] * (k * n + (hsec is None))
    parts[0::k] = pieces_a if hsec is not None else [*pieces_a, b"\x00"]
    if keyed:
        wb = int(w_vl.max()) + _SLACK
        mat_b = np.zeros(n * wb, np.uint8)
        _put_varints(mat_b, np.arange(0, n * wb, wb, dtype=np.int64), z_vl, w_vl)
        zero_b = np.flatnonzero(vl == 0) if int(vl.min()) <= 0 else None
        parts[1::k] = keys  # type: ignore[assignment]
        parts[2::k] = _rows_to_pieces(mat_b, wb, w_vl, zero_b)
        parts[3::k] = values
    else:
        parts[1::k] = values
    if hsec is not None:
        parts[k - 1 :: k] = hsec
    # None (null) items carry no bytes: drop them (filter also drops b"", harmlessly)
    chunks = filter(None, parts) if v_null or (keyed and k_null) else parts
    return b"".join(chunks)  # type: ignore[arg-type]


def _assemble(
    records: bytes,
    codec: Compression,
    level: int | None,
    base_offset: int,
    leader_epoch: int,
    attrs: int,
    lod: int,
    base_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> bytes:
    """Header + records (compressed first when a codec is set) with batchLength and CRC-32C
    filled in."""
    if codec is not Compression.NONE:
        attrs |= codec
        records = compress(codec, records, level=level)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    if batch_length > _INT32_MAX:
        raise ValueError("batch too large")
    try:
        hdr = HEADER.pack(
            base_offset,
            batch_length,
            leader_epoch,
            MAGIC,
            0,
            attrs,
            lod,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None
    tail = hdr[ATTRIBUTES_OFFSET:]
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    return b"".join((hdr[:CRC_OFFSET], _U32.pack(crc), tail, records))


def rebuild_batch(
    header: BatchHeader, records: bytes, records_count: int, max_timestamp: int
) -> bytes:
    """The batch ``header`` describes with another records section: ``records`` (encoded, not
    compressed) holding ``records_count`` records, compressed here with the batch's codec.
    Every other field is kept; batchLength and the CRC are recomputed. Compaction uses it to
    drop records without re-encoding the ones it keeps: their offset and timestamp deltas
    stay relative to the same base offset and base timestamp."""
    return _assemble(
        records, header.compression, None, header.base_offset, header.leader_epoch,
        header.attributes & ~COMPRESSION_MASK, header.last_offset_delta, header.base_timestamp,
        max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
        records_count,
    )  # fmt: skip


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


# The decoder builds on the layout above; it is re-exported so that ``format`` stays the one
# name for the v2 batch format.
from embedlog.segment.record_decoder import (  # noqa: E402
    DecodedRecords,
    decode_records,
)
