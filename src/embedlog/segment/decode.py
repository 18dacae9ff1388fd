"""Decoding of a v2 batch's records section into columns (pure; no file I/O).

The record layout is documented in :mod:`embedlog.segment.header`; the columns are a
:class:`~embedlog.segment.decoded.DecodedRecords`; :mod:`embedlog.segment.format` re-exports it
and :func:`decode_records`. Decoding validates everything (lengths, varint widths, offset
deltas, exact consumption of the batch) and raises
:class:`~embedlog.errors.CorruptBatchError` with the batch position on any violation. The one
sequential step -- following the chain of record lengths -- is a tight Python loop; every other
field of every record is decoded with numpy. With the compiled core a whole uncompressed batch
of a read buffer is copied out and decoded by one call (``decode_stored``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from embedlog.errors import CorruptBatchError, UnsupportedFormatError
from embedlog.segment import _native
from embedlog.segment.codecs import MAX_DECOMPRESSED, Compression, decompress
from embedlog.segment.decoded import DecodedRecords, new_decoded
from embedlog.segment.header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    MIN_RECORD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    decode_varint,
)

__all__ = ["DecodedRecords", "decode_records", "decode_run", "records_section"]

I64 = npt.NDArray[np.int64]

_MIN_BODY: Final = MIN_RECORD - 1
"""Smallest record length (the bytes after the length varint)."""


class _Bad(Exception):
    """Internal: a record-level violation, turned into CorruptBatchError with the position."""


_EMPTY_I64: Final = np.empty(0, np.int64)
_EMPTY_I32: Final = np.empty(0, np.int32)


def _walk(data: bytes, n: int, skip: int = 0) -> tuple[list[int], int]:
    """Follow the record-length chain: the starts of records ``skip..n-1`` and the end of
    record ``n-1``.

    Kept as tight as possible: the one- and two-byte paths ignore the zigzag sign bit (so the
    chain always moves forward) and :func:`_decode` re-reads every length vectorised, which
    rejects a negative one.
    """
    starts: list[int] = []
    append = starts.append
    jump = _RECORD_JUMP
    p = 0
    for _ in repeat(None, min(skip, n)):  # records before the first one asked for
        j = jump[data[p] | data[p + 1] << 8]
        p = p + j if j else _long_record_end(data, p)
    for _ in repeat(None, n - min(skip, n)):
        append(p)
        j = jump[data[p] | data[p + 1] << 8]  # every record has more than two bytes
        if j:
            p += j
        else:
            p = _long_record_end(data, p)
    return starts, p


def _long_record_end(data: bytes, p: int) -> int:
    """End of the record at ``p`` whose length varint is longer than two bytes."""
    length, q = decode_varint(data, p, 5)
    if length < _MIN_BODY:
        raise _Bad(f"invalid record length {length}")
    return q + length


def _record_jumps() -> list[int]:
    """Bytes from a record's start to the next record's, indexed by the record's first two bytes
    (little-endian) when its length varint has one or two bytes (zigzag sign ignored, see
    :func:`_walk`); 0 when it is longer."""
    out = []
    for x in range(1 << 16):
        b0, b1 = x & 0xFF, x >> 8
        if b0 < 0x80:
            out.append(1 + (b0 >> 1))
        elif b1 < 0x80:
            out.append(2 + ((b0 & 0x7F) >> 1) + (b1 << 6))
        else:
            out.append(0)
    return out


_RECORD_JUMP: Final = _record_jumps()


def _small_varint_tables() -> tuple[I64, I64]:
    """Decoded value and width of a varint starting with bytes (b0, b1), indexed by
    ``b0 | b1 << 8``; width 0 = the varint is longer than two bytes. (1 MiB, built once.)"""
    i = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = i & 0xFF, i >> 8
    z = np.where(b0 < 0x80, b0, (b0 & 0x7F) | ((b1 & 0x7F) << 7))
    width = np.where(b0 < 0x80, 1, np.where(b1 < 0x80, 2, 0))
    return (z >> 1) ^ -(z & 1), width


_VARINT2_VALUE, _VARINT2_WIDTH = _small_varint_tables()


def _read_varints(
    d: npt.NDArray[np.uint8], pos: I64, lim: I64, max_bytes: int, what: str
) -> tuple[I64, I64 | int]:
    """Decode one varint per record at ``pos``, each ending at or before ``lim``:
    (values, widths); widths is the int 1 when every varint is a single byte.

    ``pos`` is increasing (one position inside each of consecutive records). Fast paths: all
    one byte; all at most two bytes (table lookup). Longer ones go through a loop over byte
    positions with the records still reading.
    """
    if bool((pos >= lim).any()):
        raise _Bad(f"record too short for its {what}")
    b = d[pos]
    if int(b.max()) < 0x80:
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), 1
    nxt = pos + 1
    if int(nxt[-1]) >= len(d):
        nxt = np.minimum(nxt, len(d) - 1)
    idx = d[nxt].astype(np.intp)
    idx <<= 8
    idx |= b
    w2 = _VARINT2_WIDTH[idx]
    if int(w2.min()) > 0:
        if bool((pos + w2 > lim).any()):
            raise _Bad(f"{what} varint runs past the record")
        return _VARINT2_VALUE[idx], w2
    z = (b & 0x7F).astype(np.uint64)
    w = np.ones(pos.shape, np.int64)
    active = np.flatnonzero(b >= 0x80)
    shift = 7
    while active.size:
        if shift >= 7 * max_bytes:
            raise _Bad(f"{what} varint longer than {max_bytes} bytes")
        p = pos[active] + w[active]
        if bool((p >= lim[active]).any()):
            raise _Bad(f"{what} varint runs past the record")
        b = d[p]
        if shift == 63 and bool((b > 1).any()):
            raise _Bad(f"{what} varlong overflows 64 bits")
        z[active] |= (b & 0x7F).astype(np.uint64) << shift
        w[active] += 1
        active = active[b >= 0x80]
        shift += 7
    if max_bytes <= 5 and shift > 28 and bool((z >> 32).any()):
        raise _Bad(f"{what} varint does not fit in 32 bits")
    vals: I64 = (z >> 1).astype(np.int64) ^ -(z & 1).astype(np.int64)
    return vals, w


def _parse_headers(
    data: bytes, p: int, end: int, count: int
) -> tuple[tuple[str, bytes | None], ...]:
    if count * 2 > end - p:
        raise _Bad(f"header count {count} exceeds the record")
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        klen, p = decode_varint(data, p, 5)
        if klen < 0 or p + klen > end:
            raise _Bad(f"invalid header key length {klen}")
        try:
            key = data[p : p + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad("header key is not valid UTF-8") from None
        p += klen
        vlen, p = decode_varint(data, p, 5)
        if vlen < -1 or p + vlen > end:
            raise _Bad(f"invalid header value length {vlen}")
        if vlen < 0:
            out.append((key, None))
        else:
            out.append((key, data[p : p + vlen]))
            p += vlen
    if p != end:
        raise _Bad("record headers do not end at the record's end")
    return tuple(out)


def _decode_headers(
    data: bytes, p: I64, ends: I64, hc: I64
) -> list[tuple[tuple[str, bytes | None], ...]] | None:
    """Header tuples of every record (None if none has headers); ``p`` = each record's position
    after headersCount, ``hc`` = the counts. Records must end exactly at ``ends``."""
    has = hc > 0
    if bool((p[~has] != ends[~has]).any()):
        raise _Bad("record does not consume exactly its length")
    if not has.any():
        return None
    headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * len(hc)
    for i, hp, he, cnt in zip(
        np.flatnonzero(has).tolist(),
        p[has].tolist(),
        ends[has].tolist(),
        hc[has].tolist(),
        strict=True,
    ):
        headers[i] = _parse_headers(data, hp, he, cnt)
    return headers


def decode_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    max_decompressed: int = MAX_DECOMPRESSED,
    first: int = 0,
    count: int | None = None,
) -> DecodedRecords:
    """Decompress (bounded by ``max_decompressed``) and fully validate the records of the
    batch at ``pos`` (see reliability.md section 3.2); columns of the result are per record.

    ``first``/``count`` restrict the result to the records at those positions in the batch (a
    point read): the record-length chain is followed only up to the last one asked for, and
    only those are decoded; the check that the records end exactly at the end of the batch is
    then left to the CRC, which the caller verified. The CRC is not checked here
    (:func:`next_batch` does). For LogAppendTime batches every timestamp is maxTimestamp. Any
    violation is CorruptBatchError with ``position=pos``.
    """
    core = _native.CORE
    n = header.records_count
    if (core is not None and not first and count is None and n
            and not header.attributes & COMPRESSION_MASK and buf.__class__ is bytes
            and pos >= 0 and pos + header.size <= len(buf)
            and n * MIN_RECORD <= header.size - HEADER_SIZE):
        return _guarded(_stored, core, buf, pos, header, pos=pos)  # the common case: one C call
    raw = _section(buf, pos, header, max_decompressed, copy=True)
    return _checked(raw, n, header, first, count, pos)


def _stored(core: _native.Core, buf: bytes, pos: int, header: BatchHeader) -> DecodedRecords:
    """Every record of the uncompressed batch at ``pos`` of ``buf`` (which holds it whole, with
    at least ``MIN_RECORD`` bytes of section per record): its records section copied and
    decoded by one call of the compiled core, as :func:`_decode_c` decodes a copy."""
    n = header.records_count
    cols64 = np.empty((4, n), np.int64)
    cols32 = np.empty((2, n), np.int32)
    data, headers = core.decode_stored(
        buf, pos, header.size, n, header.base_offset, header.base_timestamp,
        header.max_timestamp, header.last_offset_delta,
        bool(header.attributes & TIMESTAMP_TYPE_MASK), cols64, cols32,
    )  # fmt: skip
    return _columns(data, cols64, cols32, headers)


def _columns(data: bytes, cols64: I64, cols32: npt.NDArray[np.int32],
             headers: list[tuple[tuple[str, bytes | None], ...]] | None) -> DecodedRecords:
    """The decoded records over ``data`` from the core's columns: offsets, timestamps, key
    and value positions (``cols64``), key and value lengths (``cols32``). (Rows taken by
    index: half the cost of unpacking an array as an iterable.)"""
    return new_decoded(data, cols64[0], cols64[1], cols64[2], cols32[0], cols64[3], cols32[1],
                       headers)


def records_section(
    buf: bytes, pos: int, header: BatchHeader, *, max_decompressed: int = MAX_DECOMPRESSED
) -> tuple[bytes, int, int]:
    """The records section of the batch at ``pos`` as ``(data, start, end)``: for an
    uncompressed batch ``buf`` itself (no copy; only for a caller that reads it before
    returning, as ``buf`` may be a mapping) with the section's bounds, else the decompressed
    bytes, whole. Raises as :func:`decode_records` does before it decodes a record."""
    data = _section(buf, pos, header, max_decompressed, copy=False)
    if data is buf:
        return buf, pos + HEADER_SIZE, pos + header.size
    return data, 0, len(data)


def _section(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
             max_decompressed: int, *, copy: bool) -> bytes:
    """The decompressed records section; ``buf`` itself when it is uncompressed ``bytes`` and
    not ``copy`` (else a copy: no view of the caller's buffer, maybe an mmap, outlives the call)."""
    end = pos + header.size
    if end > len(buf):
        raise CorruptBatchError("batch extends past the end of the data", position=pos)
    n = header.records_count
    codec = header.attributes & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise UnsupportedFormatError(f"unknown compression codec id {codec}", position=pos)
    if codec == Compression.NONE and not copy and isinstance(buf, bytes):
        return buf  # the caller reads it within its call
    with memoryview(buf) as mv, mv[pos + HEADER_SIZE : end] as section:
        raw = bytes(section)  # no view of the caller's buffer (an mmap) outlives this call
    if codec != Compression.NONE and (n or raw):
        try:
            raw = decompress(codec, raw, max_size=max_decompressed)
        except CorruptBatchError as e:
            raise type(e)(e.reason, position=pos) from e
    return raw


def decode_run(data: bytes, n: int, header: BatchHeader, position: int) -> DecodedRecords:
    """The ``n`` whole records that make up ``data``, a run of consecutive records of the
    uncompressed batch ``header`` (at byte ``position`` of its file, named in errors): a point
    read that knows where its records lie in the batch (:mod:`.point_memo`). Checked as
    :func:`decode_records` checks a batch's records, the run standing for the records section
    (it must hold exactly ``n`` records); positions are relative to ``data``."""
    return _checked(data, n, header, 0, None, position)


def _checked(data: bytes, n: int, header: BatchHeader, first: int, count: int | None,
             pos: int) -> DecodedRecords:
    return _guarded(_decode, data, n, header, first, count, pos=pos)


def _guarded(decoder: Callable[..., DecodedRecords], *args: Any, pos: int) -> DecodedRecords:
    """``decoder(*args)``, any failure of the records raised as :class:`CorruptBatchError`
    naming the batch's position ``pos``."""
    try:
        return decoder(*args)
    except (_Bad, CorruptBatchError) as e:
        raise CorruptBatchError(str(e), position=pos) from None
    except (IndexError, ValueError, OverflowError, UnicodeDecodeError) as e:
        raise CorruptBatchError(f"malformed records: {e}", position=pos) from None


def _decode(
    data: bytes, n: int, header: BatchHeader, first: int = 0, count: int | None = None
) -> DecodedRecords:
    size = len(data)
    if n == 0:
        if size:
            raise _Bad("bytes after the last record")
        return _empty(data)
    if n * MIN_RECORD > size:
        raise _Bad(f"records count {n} cannot fit in {size} bytes")
    first = min(max(first, 0), n)
    last = n if count is None else min(n, first + max(count, 0))
    core = _native.CORE
    if core is not None:
        return _decode_c(core, data, n, header, first, last)
    starts, stop = _walk(data, last, first)
    if last == n and stop != size:
        raise _Bad("records do not end at the end of the batch")
    if stop > size:
        raise _Bad("record runs past the end of the batch")
    starts.append(stop)
    chain = np.array(starts, np.int64)  # strictly increasing (see _walk)
    if len(chain) == 1:
        return _empty(data)
    return _decode_fields(data, chain[:-1], chain[1:], header)


def _decode_c(
    core: _native.Core, data: bytes, n: int, header: BatchHeader, first: int, last: int
) -> DecodedRecords:
    """:func:`_decode` by the compiled core: the same walk, checks, errors and columns."""
    m = last - first
    cols64 = np.empty((4, m), np.int64)
    cols32 = np.empty((2, m), np.int32)
    headers = core.decode(
        data, n, first, last, header.base_offset, header.base_timestamp, header.max_timestamp,
        header.last_offset_delta, bool(header.attributes & TIMESTAMP_TYPE_MASK), cols64, cols32,
    )  # fmt: skip
    if m == 0:
        return _empty(data)
    return _columns(data, cols64, cols32, headers)


def _empty(data: bytes) -> DecodedRecords:
    return DecodedRecords(
        data, _EMPTY_I64, _EMPTY_I64, _EMPTY_I64, _EMPTY_I32, _EMPTY_I64, _EMPTY_I32, None
    )


def _decode_fields(data: bytes, rs: I64, ends: I64, header: BatchHeader) -> DecodedRecords:
    """Every field of the records starting at ``rs`` and ending at ``ends``, one numpy pass
    per field (so the first failing field, in record layout order, is the one reported)."""
    d = np.frombuffer(data, np.uint8)
    rec_len, w_len = _read_varints(d, rs, ends, 5, "length")
    bs = rs + w_len
    if bool((bs + rec_len != ends).any()) or int(rec_len.min()) < _MIN_BODY:
        raise _Bad("invalid record length")
    # attributes byte at bs is unused; fields follow
    tsd, w = _read_varints(d, bs + 1, ends, 10, "timestampDelta")
    p = bs + 1 + w
    od, w = _read_varints(d, p, ends, 5, "offsetDelta")
    p += w
    if int(od.min()) < 0 or int(od.max()) > header.last_offset_delta:
        raise _Bad("offset delta outside [0, lastOffsetDelta]")
    kl, w = _read_varints(d, p, ends, 5, "keyLength")
    kp = p + w
    if int(kl.min()) < -1:
        raise _Bad("negative key length")
    p = kp + np.maximum(kl, 0)
    vl, w = _read_varints(d, p, ends, 5, "valueLength")
    vp = p + w
    if int(vl.min()) < -1:
        raise _Bad("negative value length")
    p = vp + np.maximum(vl, 0)
    headers: list[tuple[tuple[str, bytes | None], ...]] | None = None
    if not (bool((p + 1 == ends).all()) and not d[p].any()):  # else: every headersCount is 0
        hc, w = _read_varints(d, p, ends, 5, "headersCount")
        p = p + w
        if int(hc.min()) < 0:
            raise _Bad("negative headers count")
        headers = _decode_headers(data, p, ends, hc)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        timestamps = np.full(len(rs), header.max_timestamp, np.int64)
    else:
        timestamps = tsd + np.int64(header.base_timestamp)
    offsets = od + np.int64(header.base_offset)
    return DecodedRecords(
        data, offsets, timestamps, kp, kl.astype(np.int32), vp, vl.astype(np.int32), headers
    )
