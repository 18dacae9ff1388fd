"""embedlog.segment.codecs: stream formats Kafka writes, round trips, bounded decompression."""

from __future__ import annotations

import contextlib
import pathlib
import struct
import subprocess
import sys
import textwrap
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec

from embedlog.errors import CorruptBatchError, InvalidConfigError, UnsupportedFormatError
from embedlog.segment.codecs import (
    XERIAL_MAGIC,
    Compression,
    compress,
    compression_from_name,
    decompress,
)

ALL = list(Compression)
COMPRESSED = [c for c in Compression if c is not Compression.NONE]
MiB = 1 << 20


def _text(n: int) -> bytes:
    return b"".join(b'{"id":%d,"event":"click","page":"/p/%d"}' % (i, i % 97) for i in range(n))


# --------------------------------------------------------------------------- names and ids


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Compression.NONE),
        ("uncompressed", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("snappy", Compression.SNAPPY),
        ("lz4", Compression.LZ4),
        ("zstd", Compression.ZSTD),
        ("ZSTD", Compression.ZSTD),
        (None, Compression.NONE),
    ],
)
def test_compression_from_name(name: str | None, codec: Compression) -> None:
    assert compression_from_name(name) is codec


@pytest.mark.parametrize("name", ["producer", "lzo", "", "brotli"])
def test_compression_from_name_rejects(name: str) -> None:
    with pytest.raises(InvalidConfigError):
        compression_from_name(name)


def test_ids_match_kafka() -> None:
    assert [int(c) for c in Compression] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_id(codec: int) -> None:
    with pytest.raises(UnsupportedFormatError):
        decompress(codec, b"abc", max_size=100)
    with pytest.raises(UnsupportedFormatError):
        compress(codec, b"abc")


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", ALL)
@given(data=st.binary(max_size=3000))
@settings(max_examples=25, deadline=None)
def test_round_trip(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data


@pytest.mark.parametrize("codec", ALL)
def test_round_trip_large_and_exact_limit(codec: Compression) -> None:
    data = _text(5000)  # ~200 KB: several snappy blocks, several lz4 blocks
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    assert decompress(codec, memoryview(packed), max_size=len(data)) == data
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decompress(codec, packed, max_size=len(data) - 1)


# --------------------------------------------------------------------------- wire formats


def test_gzip_is_a_standard_gzip_member() -> None:
    packed = compress(Compression.GZIP, b"hello")
    assert packed[:3] == b"\x1f\x8b\x08"
    assert zlib.decompress(packed, wbits=31) == b"hello"
    assert kcodec.gzip_decode(packed) == b"hello"


def test_gzip_concatenated_members() -> None:
    packed = compress(Compression.GZIP, b"abc") + compress(Compression.GZIP, b"def")
    assert decompress(Compression.GZIP, packed, max_size=6) == b"abcdef"
    with pytest.raises(CorruptBatchError):
        decompress(Compression.GZIP, packed, max_size=5)


def test_snappy_xerial_framing() -> None:
    data = _text(3000)
    packed = compress(Compression.SNAPPY, data)
    assert packed[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    pos, out = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out.append(block)
        pos += 4 + n
    assert b"".join(out) == data
    assert kcodec.snappy_decode(packed) == data  # kafka-python's xerial reader


def test_snappy_accepts_kafka_python_and_raw_blocks() -> None:
    data = _text(2000)
    assert decompress(Compression.SNAPPY, kcodec.snappy_encode(data), max_size=len(data)) == data
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw, max_size=len(data)) == data


def test_lz4_frame_header_is_what_kafka_writes() -> None:
    packed = compress(Compression.LZ4, _text(2000))
    assert packed[:4] == b"\x04\x22\x4d\x18"
    assert packed[4] == 0x60  # version 01, independent blocks, no checksums, no content size
    assert packed[5] == 0x40  # 64 KiB max block size
    assert kcodec.lz4_decode(packed) == _text(2000)


def test_lz4_reads_kafka_python_and_default_frames() -> None:
    data = _text(500)
    for packed in (kcodec.lz4_encode(data), lz4.frame.compress(data)):
        assert decompress(Compression.LZ4, packed, max_size=len(data)) == data


def test_zstd_frames() -> None:
    data = _text(500)
    packed = compress(Compression.ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert kcodec.zstd_decode(packed) == data
    two = packed + zstandard.ZstdCompressor(write_checksum=True).compress(b"tail")
    assert decompress(Compression.ZSTD, two, max_size=len(data) + 4) == data + b"tail"
    skippable = struct.pack("<II", 0x184D2A5A, 3) + b"xyz"
    assert decompress(Compression.ZSTD, skippable + packed, max_size=len(data)) == data
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(data) + streamed.flush()  # no content size in the header
    assert decompress(Compression.ZSTD, frame, max_size=len(data)) == data


def test_compression_levels() -> None:
    data = _text(1000)
    for codec in (Compression.GZIP, Compression.ZSTD, Compression.LZ4):
        assert decompress(codec, compress(codec, data, level=9), max_size=len(data)) == data


# --------------------------------------------------------------------------- corrupt input


@pytest.mark.parametrize("codec", COMPRESSED)
def test_every_truncation_is_corrupt(codec: Compression) -> None:
    data = _text(40)
    packed = compress(codec, data)
    for cut in range(len(packed)):
        try:
            out = decompress(codec, packed[:cut], max_size=len(data))
        except CorruptBatchError:
            continue
        # snappy: a prefix ending on a block boundary is a valid shorter stream
        assert codec is Compression.SNAPPY and data.startswith(out), cut


@pytest.mark.parametrize("codec", COMPRESSED)
def test_trailing_garbage_is_corrupt(codec: Compression) -> None:
    packed = compress(codec, _text(20))
    with pytest.raises(CorruptBatchError):
        decompress(codec, packed + b"\x07garbage", max_size=MiB)


@pytest.mark.parametrize("codec", COMPRESSED)
@given(junk=st.binary(max_size=200))
@settings(max_examples=60, deadline=None)
def test_garbage_raises_only_corrupt_batch_error(codec: Compression, junk: bytes) -> None:
    try:
        out = decompress(codec, junk, max_size=64 * 1024)
    except CorruptBatchError:
        return
    assert len(out) <= 64 * 1024


@pytest.mark.parametrize("codec", COMPRESSED)
@given(pos=st.integers(0, 10_000), xor=st.integers(1, 255))
@settings(max_examples=40, deadline=None)
def test_bit_flips_raise_only_corrupt_batch_error(codec: Compression, pos: int, xor: int) -> None:
    packed = bytearray(compress(codec, _text(60)))
    packed[pos % len(packed)] ^= xor
    with contextlib.suppress(CorruptBatchError):
        decompress(codec, bytes(packed), max_size=64 * 1024)


# --------------------------------------------------------------------------- bombs


def _gzip_zeros(n_mib: int) -> bytes:
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    return b"".join([z.compress(chunk) for _ in range(n_mib)] + [z.flush()])


def _lz4_zeros(n_mib: int) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    chunk = bytes(MiB)
    return b"".join([c.begin(), *(c.compress(chunk) for _ in range(n_mib)), c.flush()])


def _zstd_claiming(content_size: int, real_mib: int = 1) -> bytes:
    """A small real zstd frame of ``real_mib`` MiB of zeros, its header patched to declare
    ``content_size`` bytes (what a one-shot decompress would allocate)."""
    co = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    chunk = bytes(MiB)
    frame = b"".join([co.compress(chunk) for _ in range(real_mib)] + [co.flush()])
    fhd = frame[4]
    assert fhd >> 6 == 0 and not fhd & 0x20 and not fhd & 3  # no FCS, window byte, no dict
    return (
        frame[:4] + bytes([fhd | 0xC0]) + frame[5:6] + struct.pack("<Q", content_size) + frame[6:]
    )


def _zstd_zeros(n_mib: int) -> bytes:
    co = zstandard.ZstdCompressor(level=1).compressobj(size=n_mib * MiB)
    chunk = bytes(MiB)
    return b"".join([co.compress(chunk) for _ in range(n_mib)] + [co.flush()])


def _snappy_lying_block() -> bytes:
    # a raw block whose varint preamble declares 4 GiB - 1, followed by junk
    block = b"\xff\xff\xff\xff\x0f" + b"\x00" * 16
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


def _snappy_zeros(n_mib: int) -> bytes:
    return compress(Compression.SNAPPY, bytes(n_mib * MiB))


@pytest.mark.timeout(60)
def test_zstd_frame_claiming_one_tebibyte() -> None:
    bomb = _zstd_claiming(1 << 40)
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decompress(Compression.ZSTD, bomb, max_size=64 * 1024)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("codec", "make"),
    [
        (Compression.GZIP, lambda: _gzip_zeros(200)),
        (Compression.LZ4, lambda: _lz4_zeros(200)),
        (Compression.ZSTD, lambda: _zstd_zeros(2048)),
        (Compression.SNAPPY, lambda: _snappy_zeros(8)),
        (Compression.SNAPPY, _snappy_lying_block),
    ],
    ids=["gzip-200MB", "lz4-200MB", "zstd-2GiB", "snappy-8MB", "snappy-lying-block"],
)
def test_bombs_stop_at_the_limit(codec: Compression, make: object) -> None:
    bomb = make()  # type: ignore[operator]
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decompress(codec, bomb, max_size=MiB)


@pytest.mark.timeout(120)
def test_bombs_under_an_address_space_limit() -> None:
    """In a child whose address space is capped ~300 MiB above its start, every bomb fails with
    the size error (not MemoryError, which decompress would report as 'too much memory')."""
    script = textwrap.dedent(
        """
        import resource, sys
        sys.path[:0] = [TESTS_DIR]
        import test_codecs as t
        from embedlog.errors import CorruptBatchError
        from embedlog.segment.codecs import Compression, decompress
        bombs = [
            (Compression.GZIP, t._gzip_zeros(200)),
            (Compression.LZ4, t._lz4_zeros(200)),
            (Compression.ZSTD, t._zstd_zeros(2048)),
            (Compression.ZSTD, t._zstd_claiming(1 << 40, real_mib=100)),
            (Compression.SNAPPY, t._snappy_lying_block()),
        ]
        vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1])
        limit = vm * 1024 + (300 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for codec, bomb in bombs:
            try:
                decompress(codec, bomb, max_size=64 << 20)
            except CorruptBatchError as e:
                assert "exceeds" in str(e), (codec, str(e))
            else:
                raise AssertionError(codec)
        print("ok")
        """
    ).replace("TESTS_DIR", repr(str(pathlib.Path(__file__).parent)))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
