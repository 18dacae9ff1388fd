"""Encoding of v2 record batches (pure; no I/O): records section, header, CRC-32C.

The layout is documented in :mod:`embedlog.segment.header`. What a batch says about all of its
records (codec, timestamp type, transactional and control bits, producer id/epoch, base
sequence, base offset, leader epoch, delete horizon) travels as one frozen
:class:`BatchAttributes`; :func:`encode_batch` takes it plus the per-record columns.

The records section is written by the compiled core when it is built (header, records and
CRC-32C into one buffer), else by :mod:`embedlog.segment.records_encode`; both give the same
bytes. An uncompressed batch with timestamps given as Python ints goes through the core's
``encode_listed`` (:func:`encode_listed`), which reads them itself: no numpy column is made.
:func:`encode_for_append` is the write path's entry: a bytearray (the partition writes the base
offset into it), and with :data:`STRICT` the check of ``append_batch``'s arguments as they are
read.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

from embedlog.segment import _native
from embedlog.segment.codecs import MAX_DECOMPRESSED, Compression, compress
from embedlog.segment.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from embedlog.segment.records_encode import (
    SCALAR_MAX_RECORDS,
    encode_records_scalar,
    encode_records_vectorised,
)

__all__ = ["PLAIN", "STRICT", "BatchAttributes", "SectionTooLargeError", "encode_batch",
           "encode_for_append", "encode_listed", "rebuild_batch"]

I64 = npt.NDArray[np.int64]
Values = Sequence[bytes | None]
Headers = Sequence[Sequence[tuple[str, bytes | None]] | None]
Timestamps = int | Sequence[int] | npt.NDArray[np.int64]

_U32: Final = struct.Struct(">I")


class SectionTooLargeError(ValueError):
    """The records of a batch to compress take more than
    :data:`~embedlog.segment.codecs.MAX_DECOMPRESSED` bytes: no reader would decompress it
    (the write path splits the batch, or stores a single record uncompressed)."""


@dataclass(frozen=True, slots=True)
class BatchAttributes:
    """The batch-wide fields of a batch to encode (every record shares them).

    ``compression`` and ``compression_level`` choose the codec of the records section;
    ``timestamp_type`` is 0 (CreateTime) or 1 (LogAppendTime); ``producer_id``,
    ``producer_epoch``, ``base_sequence`` are -1 for a non-idempotent batch;
    ``delete_horizon_ms`` (compaction) sets attribute bit 6 and becomes baseTimestamp.
    ValueError at construction for an unknown codec or timestamp type.
    """

    compression: Compression = Compression.NONE
    compression_level: int | None = None
    timestamp_type: int = 0
    is_transactional: bool = False
    is_control: bool = False
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    base_offset: int = 0
    leader_epoch: int = 0
    delete_horizon_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression", Compression(self.compression))
        if self.timestamp_type not in (0, 1):
            raise ValueError(f"timestamp_type must be 0 or 1, not {self.timestamp_type}")

    @classmethod
    def of(cls, header: BatchHeader, delete_horizon_ms: int | None = None) -> BatchAttributes:
        """The attributes of an existing batch (compaction re-encodes with them)."""
        return cls(
            header.compression, None, header.timestamp_type, header.is_transactional,
            header.is_control, header.producer_id, header.producer_epoch,
            header.base_sequence, header.base_offset, header.leader_epoch, delete_horizon_ms,
        )  # fmt: skip

    @property
    def flags(self) -> int:
        """Attribute bits 3-6 (the codec bits are added once the records are compressed)."""
        attrs = self.timestamp_type << 3
        if self.is_transactional:
            attrs |= TRANSACTIONAL_MASK
        if self.is_control:
            attrs |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attrs |= DELETE_HORIZON_MASK
        return attrs


PLAIN: Final = BatchAttributes()
"""No codec, CreateTime, no producer: what a plain append writes."""


@dataclass(frozen=True, slots=True)
class _Header:
    """The header fields :func:`_assemble` needs besides the attributes."""

    attrs: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    count: int


# --------------------------------------------------------------------------- encoding


def encode_batch(
    values: Values,
    *,
    keys: Values | None = None,
    headers: Headers | None = None,
    timestamps: Timestamps,
    attrs: BatchAttributes = PLAIN,
    offset_deltas: Sequence[int] | I64 | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one complete v2 batch (correct batchLength and CRC-32C).

    ``values[i]``/``keys[i]`` None = null (``keys=None``: every key null), else bytes, a
    bytearray or a one-dimensional memoryview of single bytes (the argument checks flatten any
    other view); ``headers[i]`` a sequence of (str, bytes | None) or None. ``timestamps``: one
    int for all records or one per record. ``offset_deltas`` (default 0..n-1) must be strictly
    increasing and >= 0; ``last_offset_delta`` defaults to the last of them and may be larger
    (compaction keeps the original). baseTimestamp is the first record's timestamp, or
    ``attrs.delete_horizon_ms`` (deltas are then relative to it); maxTimestamp is the largest
    timestamp unless ``max_timestamp`` is given (LogAppendTime callers pass the append time).

    With no records (compaction's empty batch) ``last_offset_delta`` is required and, as in
    Kafka's ``writeEmptyHeader``, the batch is the 61-byte header with codec none,
    baseTimestamp -1 and maxTimestamp ``max_timestamp`` (default -1).
    """
    n = len(values)
    if n == 0:
        return _encode_empty(attrs, last_offset_delta, max_timestamp)
    if not isinstance(values, list):
        values = list(values)
    if n == 1 and offset_deltas is None and isinstance(timestamps, int):
        return _encode_one(values, keys, headers, timestamps, attrs, last_offset_delta,
                           max_timestamp)
    core = _native.CORE
    if core is not None and offset_deltas is None and attrs.compression is Compression.NONE:
        batch = encode_listed(core, values, keys, headers, timestamps, attrs,
                              last_offset_delta, max_timestamp, 0)
        if batch is not None:
            return batch  # type: ignore[return-value]  # (bytes: no _MUTABLE)
    horizon = attrs.delete_horizon_ms
    ts = _timestamp_column(timestamps, n)
    base_ts = int(ts[0]) if horizon is None else int(horizon)
    max_ts = int(ts.max()) if max_timestamp is None else int(max_timestamp)
    tsd = ts - np.int64(base_ts)
    od, lod = _offset_deltas(offset_deltas, last_offset_delta, n)
    h = _Header(attrs.flags, lod, base_ts, max_ts, n)
    if core is not None:
        return _encode_c(core, values, keys, headers, tsd, od, attrs, h)
    if n <= SCALAR_MAX_RECORDS:
        records = encode_records_scalar(values, keys, headers, tsd.tolist(), od.tolist())
    else:
        records = encode_records_vectorised(values, keys, headers, tsd, od)
    return _assemble(records, attrs, h)


def _encode_one(values: list[bytes | None], keys: Values | None, headers: Headers | None,
                timestamp: int, attrs: BatchAttributes, last_offset_delta: int | None,
                max_timestamp: int | None) -> bytes:
    """The single-record batch with one int timestamp: no numpy at all (its timestamp delta
    is exact, so a delete horizon too far from it is refused, not wrapped)."""
    horizon = attrs.delete_horizon_ms
    base_ts = timestamp if horizon is None else int(horizon)
    max_ts = timestamp if max_timestamp is None else int(max_timestamp)
    lod = 0 if last_offset_delta is None else int(last_offset_delta)
    if not 0 <= lod <= INT32_MAX:
        raise ValueError(f"last_offset_delta {lod} outside [0, {INT32_MAX}]")
    h = _Header(attrs.flags, lod, base_ts, max_ts, 1)
    core = _native.CORE
    if core is not None:
        return _encode_c(core, values, keys, headers, timestamp - base_ts, None, attrs, h)
    records = encode_records_scalar(values, keys, headers, [timestamp - base_ts], [0])
    return _assemble(records, attrs, h)


STRICT: Final = 1
"""``encode_listed`` flag: the arguments were not checked yet (see :func:`encode_for_append`)."""
_MUTABLE: Final = 2
_KEEP_BASE: Final = 4
_KEEP_MAX: Final = 8


def encode_listed(
    core: _native.Core,
    values: Values,
    keys: Values | None,
    headers: Headers | None,
    timestamps: Timestamps,
    attrs: BatchAttributes,
    last_offset_delta: int | None,
    max_timestamp: int | None,
    flags: int,
) -> bytes | bytearray | None:
    """:func:`encode_batch`'s bytes for an uncompressed batch with offset deltas 0..n-1 and
    timestamps as Python ints (a list or tuple, or one int), in one pass of the compiled core
    (``_ccodec.encode_listed``): no numpy column is made. A bytearray with ``_MUTABLE`` in
    ``flags``. None when it is not that case (the caller takes the general path, which gives
    the same bytes or raises what the general path raises): no values, a header field or
    ``last_offset_delta`` out of range, a timestamp that is not an int of int64's range, or,
    with :data:`STRICT`, an item :func:`encode_for_append` does not take as is."""
    n = len(values)
    horizon = attrs.delete_horizon_ms
    lod = n - 1 if last_offset_delta is None else last_offset_delta
    if lod.__class__ is not int or not n - 1 <= lod <= INT32_MAX:
        return None
    if horizon is not None:
        if horizon.__class__ is not int:
            return None
        flags |= _KEEP_BASE
    if max_timestamp is not None:
        if max_timestamp.__class__ is not int:
            return None
        flags |= _KEEP_MAX
    try:
        hdr = HEADER.pack(
            attrs.base_offset, 0, attrs.leader_epoch, MAGIC, 0, attrs.flags, lod,
            horizon or 0, max_timestamp or 0, attrs.producer_id, attrs.producer_epoch,
            attrs.base_sequence, n,
        )  # fmt: skip
    except struct.error:
        return None
    return core.encode_listed(values, keys, headers, timestamps, hdr, flags)


def encode_for_append(
    values: Values,
    keys: Values | None,
    headers: Headers | None,
    timestamps: int | Sequence[int],
    attrs: BatchAttributes,
    max_timestamp: int | None,
    flags: int = 0,
) -> bytearray | None:
    """:func:`encode_batch` (offset deltas 0..n-1) as a bytearray: the partition writes the
    base offset into it in place, so it is never copied.

    With :data:`STRICT` in ``flags`` the values, keys and timestamps are ``append_batch``'s
    arguments not checked yet: only an uncompressed batch of the plain case (values and keys
    None or bytes-like -- bytes, bytearray, a C-contiguous memoryview --, timestamps ints in
    ``[0, 2**63)``, one per value or one for all) is encoded, by the compiled core as it
    checks them; anything else, and everything without the core, gives None (the caller
    checks its arguments and takes the general path)."""
    core = _native.CORE
    if core is not None and attrs.compression is Compression.NONE:
        batch = encode_listed(core, values, keys, headers, timestamps, attrs, None,
                              max_timestamp, flags | _MUTABLE)
        if batch is not None or flags & STRICT:
            return batch  # type: ignore[return-value]
    elif flags & STRICT:
        return None
    return bytearray(encode_batch(values, keys=keys, headers=headers, timestamps=timestamps,
                                  attrs=attrs, max_timestamp=max_timestamp))


def _encode_c(
    core: _native.Core,
    values: Values,
    keys: Values | None,
    headers: Headers | None,
    tsd: I64 | int,
    od: I64 | None,
    attrs: BatchAttributes,
    h: _Header,
) -> bytes:
    """:func:`encode_batch` by the compiled core: without a codec it writes the header,
    records and CRC-32C into one buffer; with one it encodes the records section only."""
    if attrs.compression is Compression.NONE:
        return core.encode(values, keys, headers, tsd, od, _pack(attrs, h, h.attrs, 0))
    return _assemble(core.encode(values, keys, headers, tsd, od, None), attrs, h)


def _encode_empty(
    attrs: BatchAttributes, last_offset_delta: int | None, max_timestamp: int | None
) -> bytes:
    if last_offset_delta is None:
        raise ValueError("an empty batch needs last_offset_delta")
    if not 0 <= last_offset_delta <= INT32_MAX:
        raise ValueError(f"last_offset_delta out of range: {last_offset_delta}")
    flags = attrs.flags & ~DELETE_HORIZON_MASK
    max_ts = -1 if max_timestamp is None else max_timestamp
    h = _Header(flags, last_offset_delta, -1, max_ts, 0)
    return _assemble(b"", attrs, h, Compression.NONE)


def _timestamp_column(timestamps: Timestamps, n: int) -> I64:
    core = _native.CORE
    if core is not None and timestamps.__class__ is list and len(timestamps) == n:  # type: ignore[arg-type]
        ts = np.empty(n, np.int64)  # one C pass; anything unusual goes through numpy below
        if core.first_not_int64(timestamps, ts) < 0:  # type: ignore[arg-type]
            return ts
    ts = np.asarray(timestamps, dtype=np.int64)
    if ts.ndim == 0:
        return np.full(n, ts, np.int64)
    if ts.shape != (n,):
        raise ValueError(f"{ts.size} timestamps for {n} records")
    return ts


def _offset_deltas(
    offset_deltas: Sequence[int] | I64 | None, last_offset_delta: int | None, n: int
) -> tuple[I64, int]:
    """(offset deltas, lastOffsetDelta), validated."""
    if offset_deltas is None:
        od = np.arange(n, dtype=np.int64)
    else:
        od = np.asarray(offset_deltas, dtype=np.int64)
        if od.shape != (n,):
            raise ValueError(f"{od.size} offset deltas for {n} records")
        if od[0] < 0 or (n > 1 and bool((np.diff(od) <= 0).any())):
            raise ValueError("offset_deltas must be >= 0 and strictly increasing")
    lod = int(od[-1]) if last_offset_delta is None else int(last_offset_delta)
    if not int(od[-1]) <= lod <= INT32_MAX:
        raise ValueError(f"last_offset_delta {lod} outside [{int(od[-1])}, {INT32_MAX}]")
    return od, lod


def _assemble(
    records: bytes, attrs: BatchAttributes, h: _Header, codec: Compression | None = None
) -> bytes:
    """Header + records (compressed first when a codec is set) with batchLength and CRC-32C
    filled in; ``codec`` overrides ``attrs.compression``."""
    flags = h.attrs
    codec = attrs.compression if codec is None else codec
    if codec is not Compression.NONE:
        if len(records) > MAX_DECOMPRESSED:
            raise SectionTooLargeError(f"{len(records)} bytes of records to compress: more than "
                                       f"a read decompresses ({MAX_DECOMPRESSED})")
        flags |= codec
        records = compress(codec, records, level=attrs.compression_level)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    if batch_length > INT32_MAX:
        raise ValueError("batch too large")
    hdr = _pack(attrs, h, flags, batch_length)
    tail = hdr[ATTRIBUTES_OFFSET:]
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    return b"".join((hdr[:CRC_OFFSET], _U32.pack(crc), tail, records))


def _pack(attrs: BatchAttributes, h: _Header, flags: int, batch_length: int) -> bytes:
    """The 61 header bytes with CRC 0; ValueError for a field out of its range."""
    try:
        return HEADER.pack(
            attrs.base_offset, batch_length, attrs.leader_epoch, MAGIC, 0, flags,
            h.last_offset_delta, h.base_timestamp, h.max_timestamp, attrs.producer_id,
            attrs.producer_epoch, attrs.base_sequence, h.count,
        )  # fmt: skip
    except struct.error as e:
        raise ValueError(f"batch header field out of range: {e}") from None


def rebuild_batch(
    header: BatchHeader, records: bytes, records_count: int, max_timestamp: int
) -> bytes:
    """The batch ``header`` describes with another records section: ``records`` (encoded, not
    compressed) holding ``records_count`` records, compressed here with the batch's codec.
    Every other field is kept; batchLength and the CRC are recomputed. Compaction uses it to
    drop records without re-encoding the ones it keeps: their offset and timestamp deltas
    stay relative to the same base offset and base timestamp."""
    h = _Header(
        header.attributes & ~COMPRESSION_MASK, header.last_offset_delta,
        header.base_timestamp, max_timestamp, records_count,
    )  # fmt: skip
    return _assemble(records, BatchAttributes.of(header), h)


def join_ranges(
    data: bytes | memoryview, starts: npt.NDArray[np.integer], ends: npt.NDArray[np.integer]
) -> bytes:
    """``data[starts[i]:ends[i]]`` back to back (the kept records of a batch for
    :func:`rebuild_batch`): one C pass with the compiled core, else a join of slices. A range
    outside ``data`` raises ValueError in both (the join would otherwise cut it silently)."""
    starts = np.asarray(starts, np.int64)
    lens = np.asarray(ends, np.int64) - starts
    if len(starts) and (int(starts.min()) < 0 or int(lens.min()) < 0
                        or int((starts + lens).max()) > len(data)):
        raise ValueError("record range outside the batch's data")
    core = _native.CORE
    if core is not None and len(data) < 2**31:
        whole = data if isinstance(data, bytes) else bytes(data)
        return core.gather([(whole, starts, lens.astype(np.int32))])[1]
    return b"".join(data[a:z] for a, z in zip(starts.tolist(), (starts + lens).tolist(),
                                               strict=True))
