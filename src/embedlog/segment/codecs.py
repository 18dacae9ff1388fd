"""Compression codecs of Kafka record batches (attribute bits 0-2), as pure functions.

The codec applies to the whole records section of a v2 batch (bytes 61..end); see
design/kafka-format.md section 4. What is written here is what Kafka writes:

======  ====  ===========================================================================
codec   id    stream format
======  ====  ===========================================================================
none    0     the records, as is
gzip    1     one RFC 1952 gzip member (deflate level 6, mtime 0); the decoder accepts
              concatenated members
snappy  2     snappy-java "xerial" framing: magic ``82 'SNAPPY' 00``, int32 BE version 1,
              int32 BE compatible version 1, then blocks of (int32 BE length, raw snappy
              block) each compressing at most 32 KiB; the decoder also accepts one unframed
              raw snappy block (kafka-python does)
lz4     3     one LZ4 frame, independent 64 KiB blocks, no content size, no checksums
              (FLG ``0x60``, BD ``0x40``, as Kafka's ``Lz4BlockOutputStream``)
zstd    4     zstd frame(s); the decoder accepts concatenated and skippable frames
======  ====  ===========================================================================

Invariants of :func:`decompress`:

* memory is bounded by ``max_size`` whatever the input claims: it only uses streaming or
  bounded decoders (never a one-shot API that trusts a size declared in the stream);
* every failure is a :class:`~embedlog.errors.CorruptBatchError` (an unknown codec id is an
  :class:`~embedlog.errors.UnsupportedFormatError`); codec libraries' own exceptions never
  escape;
* a truncated stream, or bytes after the last frame/member, is corrupt.
"""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum
from typing import Final

import cramjam
import lz4.frame
import zstandard

from embedlog.errors import CorruptBatchError, InvalidConfigError, UnsupportedFormatError

__all__ = [
    "MAX_DECOMPRESSED",
    "Compression",
    "compress",
    "compression_from_name",
    "decompress",
]

MAX_DECOMPRESSED = 64 * 1024 * 1024
"""The largest records section a compressed batch may hold: every reader decompresses one
batch's section up to this size at most (a bound against decompression bombs in untrusted
files), and the encoder refuses to compress a larger one
(:class:`embedlog.segment.encode.SectionTooLargeError`), so nothing is written that a read
would refuse."""


class Compression(IntEnum):
    """Kafka's codec ids, stored in the low 3 bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_NAMES: Final[dict[str, Compression]] = {
    "none": Compression.NONE,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

GZIP_LEVEL: Final = 6
"""Deflate level used for gzip (Java's ``Deflater.DEFAULT_COMPRESSION``, Kafka's default)."""
ZSTD_LEVEL: Final = 1
"""zstd level: on Kafka-sized batches level 1 is faster than Kafka's default 3 and compresses
as well or better (design/performance.md)."""

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024
_INT32_BE: Final = struct.Struct(">i")

_CHUNK: Final = 1 << 20
"""Output chunk of the streaming decoders (bounded APIs allocate their whole limit up front)."""


def compression_from_name(name: str | None) -> Compression:
    """Map a Kafka ``compression.type`` value (``none``, ``gzip``, ``snappy``, ``lz4``,
    ``zstd``; also ``uncompressed``) to its codec; ``None`` means no compression.

    ``producer`` (a topic-level value meaning "keep the producer's codec") must be resolved by
    the caller and is rejected here, like any other unknown name, with InvalidConfigError.
    """
    if name is None:
        return Compression.NONE
    try:
        return _NAMES[name.strip().lower()]
    except (KeyError, AttributeError):
        raise InvalidConfigError(
            f"unknown compression type {name!r}; expected one of none, gzip, snappy, lz4, zstd"
        ) from None


def _codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedFormatError(f"unknown compression codec id {codec}") from None


_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "zc", None)
    if cache is None:
        cache = _local.zc = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d


def compress(codec: int, data: bytes, *, level: int | None = None) -> bytes:
    """Compress a records section with ``codec`` in the stream format Kafka writes.

    ``level`` overrides the codec's default level (gzip 6, zstd 1, lz4 0); ignored for snappy
    and none.
    """
    c = _codec(codec)
    if c is Compression.NONE:
        return bytes(data)
    if c is Compression.GZIP:
        z = zlib.compressobj(GZIP_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return z.compress(data) + z.flush()
    if c is Compression.SNAPPY:
        parts = [_XERIAL_HEADER]
        mv = memoryview(data)
        for start in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK]))
            parts.append(_INT32_BE.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if c is Compression.LZ4:
        out: bytes = lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return out
    zout: bytes = _zstd_compressor(ZSTD_LEVEL if level is None else level).compress(data)
    return zout


def decompress(codec: int, data: bytes | bytearray | memoryview, *, max_size: int) -> bytes:
    """Decompress a records section; output larger than ``max_size`` is CorruptBatchError."""
    c = _codec(codec)
    if max_size < 0:
        raise ValueError("max_size must be >= 0")
    try:
        if c is Compression.NONE:
            out = bytes(data)
        elif c is Compression.GZIP:
            out = _gunzip(data, max_size)
        elif c is Compression.SNAPPY:
            out = _unsnappy(bytes(data), max_size)
        elif c is Compression.LZ4:
            out = _unlz4(data, max_size)
        else:
            out = _unzstd(data, max_size)
    except CorruptBatchError:
        raise
    except MemoryError:
        raise CorruptBatchError(f"{c.name.lower()} stream needs too much memory") from None
    except Exception as e:  # codec libraries raise assorted types (zlib.error, RuntimeError...)
        raise CorruptBatchError(f"invalid {c.name.lower()} data: {e}") from e
    if len(out) > max_size:
        raise _too_big(max_size)
    return out


def _too_big(max_size: int) -> CorruptBatchError:
    return CorruptBatchError(f"decompressed size exceeds the limit of {max_size} bytes")


def _gunzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: bytes | memoryview = memoryview(data)
    while True:
        d = zlib.decompressobj(wbits=31)
        chunk = d.decompress(rest, max_size + 1 - total)
        total += len(chunk)
        out.append(chunk)
        if total > max_size:
            raise _too_big(max_size)
        if not d.eof:
            raise CorruptBatchError("truncated gzip stream")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _snappy_raw_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its leading uint32 varint)."""
    n = 0
    for i in range(min(5, len(block))):
        b = block[i]
        n |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return n
    raise CorruptBatchError("invalid snappy block length")


def _unsnappy_block(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    declared = _snappy_raw_length(block)
    if declared > budget:
        raise _too_big(max_size)
    out = bytes(cramjam.snappy.decompress_raw(block))
    if len(out) != declared:
        raise CorruptBatchError("snappy block length mismatch")
    return out


def _unsnappy(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _unsnappy_block(data, max_size, max_size)
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptBatchError("truncated snappy (xerial) header")
    mv = memoryview(data)
    out: list[bytes] = []
    total = 0
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptBatchError("truncated snappy (xerial) block length")
        (n,) = _INT32_BE.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptBatchError("snappy (xerial) block extends past the data")
        block = _unsnappy_block(mv[pos : pos + n], max_size - total, max_size)
        pos += n
        total += len(block)
        out.append(block)
    return b"".join(out)


def _unlz4(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: bytes | bytearray | memoryview = data
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk: bytes = d.decompress(rest, max_length=min(max_size + 1 - total, _CHUNK))
        while True:
            total += len(chunk)
            out.append(chunk)
            if total > max_size:
                raise _too_big(max_size)
            if d.eof or d.needs_input:
                break
            chunk = d.decompress(b"", max_length=min(max_size + 1 - total, _CHUNK))
        if not d.eof:
            raise CorruptBatchError("truncated lz4 frame")
        rest = d.unused_data or b""
        if not rest:
            return b"".join(out)


_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_ZSTD_SKIPPABLE: Final = 0x184D2A50
_DID_SIZE: Final = (0, 1, 2, 4)
_FCS_SIZE: Final = (0, 2, 4, 8)


def _zstd_check_frames(data: bytes | bytearray | memoryview) -> None:
    """Walk the frame and block headers: every frame complete, nothing after the last one.

    The streaming decoder silently stops at a truncated frame; this structural walk (no
    decompression) makes truncation an error.
    """
    end = len(data)
    pos = 0
    if end == 0:
        raise CorruptBatchError("empty zstd stream")
    while pos < end:
        if pos + 4 > end:
            raise CorruptBatchError("truncated zstd frame magic")
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            if pos + 8 > end:
                raise CorruptBatchError("truncated zstd skippable frame")
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            if pos > end:
                raise CorruptBatchError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptBatchError("bad zstd frame magic")
        pos += 4
        if pos >= end:
            raise CorruptBatchError("truncated zstd frame header")
        fhd = data[pos]
        single = (fhd >> 5) & 1
        fcs_flag = fhd >> 6
        pos += 1 + (0 if single else 1) + _DID_SIZE[fhd & 3]
        pos += 1 if (fcs_flag == 0 and single) else _FCS_SIZE[fcs_flag]
        while True:
            if pos + 3 > end:
                raise CorruptBatchError("truncated zstd block header")
            bh = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            btype = (bh >> 1) & 3
            if btype == 3:
                raise CorruptBatchError("reserved zstd block type")
            pos += 3 + (1 if btype == 1 else bh >> 3)
            if bh & 1:
                break
        if fhd & 4:
            pos += 4
        if pos > end:
            raise CorruptBatchError("truncated zstd frame")


def _unzstd(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    _zstd_check_frames(data)
    reader = _zstd_decompressor().stream_reader(data, read_across_frames=True)
    out: list[bytes] = []
    total = 0
    while True:
        chunk: bytes = reader.read(min(max_size + 1 - total, _CHUNK))
        if not chunk:
            return b"".join(out)
        total += len(chunk)
        out.append(chunk)
        if total > max_size:
            raise _too_big(max_size)
