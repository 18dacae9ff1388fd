"""The records of many batches decoded at once into columns (the cleaner's reader).

Decoding batch by batch costs tens of numpy calls per batch. The cleaner instead lays the
records sections of a run of data batches (decompressed when needed) back to back and decodes
them as one *virtual* batch with :func:`embedlog.segment.format.decode_records`: the record
chain of one section simply continues into the next. The record byte ranges are then derived
from the decoded columns and every batch must start exactly at one of them, which proves the
split is right (each section holds exactly its ``recordsCount`` records). A run that fails that
check (a non-minimal varint, or a damaged batch) is decoded batch by batch instead, which
raises :class:`~embedlog.errors.CorruptBatchError` on damage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ..errors import CorruptBatchError
from ..segment import format as fmt
from ..segment.codecs import MAX_DECOMPRESSED, Compression, decompress

__all__ = ["Columns", "decode_batches", "section"]

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

_INT32_MAX: Final = 2**31 - 1


def section(raw: bytes | memoryview, header: fmt.BatchHeader) -> bytes | memoryview:
    """The records section of the batch ``raw`` (decompressed; a view of ``raw`` when it is
    not compressed)."""
    body = memoryview(raw)[fmt.HEADER_SIZE : header.size]
    codec = header.attributes & fmt.COMPRESSION_MASK
    if codec == Compression.NONE or not (header.records_count or body):
        return body
    return decompress(codec, body, max_size=MAX_DECOMPRESSED)


@dataclass(frozen=True, slots=True)
class Columns:
    """Records of ``len(first) - 1`` batches, in order.

    ``records`` holds the columns over ``records.data`` (the sections back to back) with
    absolute offsets and timestamps; ``first[b]`` is the index of batch ``b``'s first record
    and ``first[-1]`` the record count; ``sections[b]`` is where batch ``b``'s section starts
    in ``records.data``. ``bounds[i]:bounds[i + 1]`` are record ``i``'s bytes there, for the
    records of the batches laid out with minimal varints (the only ones whose bytes can be
    copied on their own: ``inexact`` marks the records of the others, None when there is
    none); ``bounds`` is None when no batch is. Whether a batch's records are exact depends
    on that batch alone, not on the batches decoded with it.
    """

    records: fmt.DecodedRecords
    first: I64
    sections: I64
    bounds: I64 | None
    inexact: Bools | None = None

    def of_batch(self, b: int) -> tuple[int, int]:
        """``(first record, end record)`` of batch ``b``."""
        return int(self.first[b]), int(self.first[b + 1])

    def exact(self, record: int) -> bool:
        """Whether the bytes of the batch holding ``record`` can be copied record by record."""
        if self.bounds is None:
            return False
        return self.inexact is None or not (record < len(self.inexact) and self.inexact[record])


def _header_bytes(headers: tuple[tuple[str, bytes | None], ...]) -> int:
    """Encoded size of a record's headers section (headersCount included)."""
    size = len(fmt.encode_varint(len(headers)))
    for key, value in headers:
        k = len(key.encode("utf-8"))
        size += len(fmt.encode_varint(k)) + k
        size += 1 if value is None else len(fmt.encode_varint(len(value))) + len(value)
    return size


def _width(x: I64) -> I64:
    """Bytes of the minimal zigzag varint of each value."""
    z = ((x << 1) ^ (x >> 63)).view(np.uint64)
    w = np.ones(len(z), np.int64)
    top = int(z.max()) if len(z) else 0
    limit = 0x80
    while limit <= top:
        w += z >= np.uint64(limit)
        limit <<= 7
    return w


def _record_bounds(records: fmt.DecodedRecords, od: I64, tsd: I64) -> I64 | None:
    """Start of every record, then the end of the last, derived from the decoded columns
    (``od``/``tsd``: the offset and timestamp deltas as stored); None unless every record is
    laid out with minimal varints, the only layout in which the derivation is exact."""
    n = len(records)
    tail = np.ones(n, np.int64)
    if records.headers is not None:
        for i, h in enumerate(records.headers):
            if h:
                tail[i] = _header_bytes(h)
    kl = records.key_len.astype(np.int64)
    vl = records.value_len.astype(np.int64)
    bounds = np.zeros(n + 1, np.int64)
    bounds[1:] = records.value_pos + np.maximum(vl, 0) + tail
    total = np.diff(bounds)
    body = total - 1  # the length varint: body + width(body) == total
    for w in range(2, 6):
        longer = total - w >= 1 << (7 * (w - 1) - 1)  # zigzag(total - w) needs >= w bytes
        if not longer.any():
            break
        body = np.where(longer, total - w, body)
    prefix = _width(body) + 1 + _width(tsd) + _width(od) + _width(kl)
    exact = (
        (bounds[:-1] + prefix == records.key_pos).all()
        and (records.key_pos + np.maximum(kl, 0) + _width(vl) == records.value_pos).all()
    )
    return bounds if exact else None


def _virtual_header(size: int, count: int) -> fmt.BatchHeader:
    return fmt.BatchHeader(
        base_offset=0, batch_length=fmt.HEADER_SIZE - fmt.LOG_OVERHEAD + size, leader_epoch=0,
        magic=fmt.MAGIC, crc=0, attributes=0, last_offset_delta=_INT32_MAX, base_timestamp=0,
        max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        records_count=count,
    )  # fmt: skip


def decode_batches(
    batches: Sequence[tuple[bytes | memoryview, fmt.BatchHeader]],
) -> Columns:
    """Decode the records of data batches ``(raw batch, header)`` into one :class:`Columns`,
    each batch's records in strictly increasing offset order (what every writer makes and the
    cleaner's rewrite relies on).

    Raises :class:`~embedlog.errors.CorruptBatchError` for a damaged batch.
    """
    cols = _decode_batches(batches)
    offsets, first = cols.records.offsets, cols.first
    if len(offsets) > 1:
        bad = np.diff(offsets) <= 0
        starts = first[1:-1]
        bad[starts[(starts >= 1) & (starts < len(offsets))] - 1] = False  # across batches
        if bool(bad.any()):
            b = int(np.searchsorted(first, int(np.argmax(bad)) + 1, side="right")) - 1
            raise out_of_order(batches[b][1].base_offset)
    return cols


def out_of_order(base_offset: int) -> CorruptBatchError:
    """The error of a batch whose records are not in increasing offset order."""
    return CorruptBatchError(f"batch at offset {base_offset}: its records' offsets are not "
                             "increasing inside [0, lastOffsetDelta]")


def _decode_batches(
    batches: Sequence[tuple[bytes | memoryview, fmt.BatchHeader]],
) -> Columns:
    """:func:`decode_batches` before the order check."""
    heads = [h for _, h in batches]
    counts = np.fromiter((h.records_count for h in heads), np.int64, len(heads))
    first = np.zeros(len(heads) + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    parts = [section(raw, h) for raw, h in batches]
    sections = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=sections[1:])
    virtual = b"".join((bytes(fmt.HEADER_SIZE), *parts))
    try:
        records = fmt.decode_records(
            virtual, 0, _virtual_header(len(virtual) - fmt.HEADER_SIZE, int(first[-1]))
        )
    except CorruptBatchError:  # find the damaged batch (and report it precisely)
        return _decode_one_by_one(batches, first, parts, sections)
    od, tsd = records.offsets, records.timestamps  # deltas: the virtual batch has base 0
    bounds = _record_bounds(records, od, tsd)
    full = counts > 0
    if (
        bounds is None
        or not (bounds[first[:-1][full]] == sections[:-1][full]).all()
        or not (sections[1:][~full] == sections[:-1][~full]).all()
    ):
        return _decode_one_by_one(batches, first, parts, sections)
    lod = np.repeat(np.fromiter((h.last_offset_delta for h in heads), np.int64, len(heads)), counts)
    if bool((od > lod).any()):  # the decoder of the batch alone reports it (with its byte)
        return _decode_one_by_one(batches, first, parts, sections)
    base = np.repeat(np.fromiter((h.base_offset for h in heads), np.int64, len(heads)), counts)
    base_ts = np.fromiter((h.base_timestamp for h in heads), np.int64, len(heads))
    timestamps = tsd + np.repeat(base_ts, counts)
    for b, h in enumerate(heads):
        if h.timestamp_type == 1:  # LogAppendTime: every record has the batch's maxTimestamp
            timestamps[first[b] : first[b + 1]] = h.max_timestamp
    records = dataclasses.replace(records, offsets=od + base, timestamps=timestamps)
    return Columns(records, first, sections, bounds)


def _decode_one_by_one(
    batches: Sequence[tuple[bytes | memoryview, fmt.BatchHeader]],
    first: I64,
    parts: list[bytes | memoryview],
    sections: I64,
) -> Columns:
    """The slow path: each batch decoded (and validated) on its own, then concatenated; the
    record bounds of each batch laid out with minimal varints."""
    decoded = [fmt.decode_records(raw, 0, h) for raw, h in batches]
    counts = np.diff(first)
    moved = np.repeat(sections[:-1], counts)
    bounds = np.repeat(sections[:-1], counts)  # an inexact batch: its records all at its start
    exact = np.zeros(len(decoded), np.bool_)
    for b, part in enumerate(parts):
        if counts[b]:
            one = _batch_bounds(part, int(counts[b]))
            if one is not None:
                bounds[first[b] : first[b + 1]] = one[:-1] + sections[b]
                exact[b] = True

    def cat64(name: str) -> I64:
        cols = [getattr(d, name) for d in decoded]
        return np.concatenate(cols).astype(np.int64) if cols else np.empty(0, np.int64)

    def cat32(name: str) -> npt.NDArray[np.int32]:
        cols = [getattr(d, name) for d in decoded]
        return np.concatenate(cols).astype(np.int32) if cols else np.empty(0, np.int32)

    headers = None
    if any(d.headers is not None for d in decoded):
        headers = [h for d in decoded for h in (d.headers or [()] * len(d))]
    records = fmt.DecodedRecords(
        b"".join(parts),
        cat64("offsets"),
        cat64("timestamps"),
        cat64("key_pos") + moved,
        cat32("key_len"),
        cat64("value_pos") + moved,
        cat32("value_len"),
        headers,
    )
    if not exact.any():
        return Columns(records, first, sections, None)
    inexact = None if exact[counts > 0].all() else np.repeat(~exact, counts)
    return Columns(records, first, sections, np.append(bounds, sections[-1]), inexact)


def _batch_bounds(part: bytes | memoryview, count: int) -> I64 | None:
    """The record bounds of one batch's records section ``part`` of ``count`` records (which
    decode), or None when they are not laid out with minimal varints."""
    virtual = b"".join((bytes(fmt.HEADER_SIZE), part))
    records = fmt.decode_records(virtual, 0, _virtual_header(len(part), count))
    return _record_bounds(records, records.offsets, records.timestamps)
