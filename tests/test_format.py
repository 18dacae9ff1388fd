"""embedlog.segment.format: the v2 record-batch codec (layout, worked examples, round trips,
validation of hostile input)."""

from __future__ import annotations

import dataclasses
import re
import struct
import tracemalloc

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedlog.errors import CorruptBatchError, UnsupportedFormatError
from embedlog.segment import decode as record_decoder
from embedlog.segment import format as fmt
from embedlog.segment import header as layout
from embedlog.segment import records_encode as encoder
from embedlog.segment.codecs import Compression
from embedlog.segment.format import (
    BatchHeader,
    decode_control_record,
    decode_records,
    decode_varint,
    encode_batch,
    encode_varint,
    iter_batches,
    next_batch,
    parse_header,
    set_base_offset,
    verify_crc,
)

T0 = 1_700_000_000_000

# The worked examples of design/kafka-format.md (sections 2.1 and 5), built by kafka-python.
EXAMPLE_80 = bytes.fromhex(
    "0000000000000000 00000044 00000000 02 16c8334a 0000 00000000"
    "0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001"
    "24 00 00 00 06 6b6579 0a 76616c7565 02 02 68 02 31"
)
COMMIT_MARKER = bytes.fromhex(
    "00000000000000be 00000042 00000005 02 b2183bfd 0030 00000000"
    "0000018bcfe568d2 0000018bcfe568d2 0000000000001e61 0001 ffffffff 00000001"
    "20 00 00 00 08 00000001 0c 000000000000 00"
)


# --------------------------------------------------------------------------- independent helpers


def zz(n: int) -> bytes:
    """Zigzag varint, written independently of the module under test."""
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def rec(
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    *,
    ts_delta: int = 0,
    offset_delta: int = 0,
    headers: bytes = b"\x00",
    key_len: bytes | None = None,
    value_len: bytes | None = None,
    length: bytes | None = None,
    ts_raw: bytes | None = None,
    od_raw: bytes | None = None,
) -> bytes:
    """One record; any field can be replaced by raw (lying) bytes."""
    body = b"\x00"
    body += zz(ts_delta) if ts_raw is None else ts_raw
    body += zz(offset_delta) if od_raw is None else od_raw
    if key_len is None:
        key_len = zz(-1 if key is None else len(key))
    body += key_len + (key or b"")
    if value_len is None:
        value_len = zz(-1 if value is None else len(value))
    body += value_len + (value or b"") + headers
    return (zz(len(body)) if length is None else length) + body


def raw_batch(
    records: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_offset: int = 0,
    base_ts: int = T0,
    max_ts: int = T0,
) -> bytes:
    """A batch around ``records`` with a correct length and CRC (whatever the records say)."""
    lod = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    body = struct.pack(">hiqqqhii", attributes, lod, base_ts, max_ts, -1, -1, -1, count) + records
    return struct.pack(">qiibI", base_offset, 9 + len(body), 0, 2, crc32c.crc32c(body)) + body


def decode(buf: bytes, pos: int = 0) -> fmt.DecodedRecords:
    header = next_batch(buf, pos)
    assert header is not None
    return decode_records(buf, pos, header)


def small_batch(**kw: object) -> bytes:
    return encode_batch(
        [b"v0", None, b"value-2"],
        keys=[b"k0", b"k1", None],
        headers=[None, [("h", b"x"), ("n", None)], None],
        timestamps=[T0, T0 + 5, T0 - 3],
        **kw,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- layout


def test_layout_constants() -> None:
    assert fmt.HEADER.format == ">qiibIhiqqqhii"
    assert (fmt.HEADER_SIZE, fmt.LOG_OVERHEAD) == (61, 12)
    assert (fmt.MAGIC_OFFSET, fmt.CRC_OFFSET, fmt.ATTRIBUTES_OFFSET) == (16, 17, 21)
    assert (fmt.COMPRESSION_MASK, fmt.TIMESTAMP_TYPE_MASK, fmt.TRANSACTIONAL_MASK) == (7, 8, 16)
    assert (fmt.CONTROL_MASK, fmt.DELETE_HORIZON_MASK) == (0x20, 0x40)
    assert [f.name for f in dataclasses.fields(BatchHeader)] == [n for n, _ in fmt.FIELDS]


def test_docstring_table_matches_field_table() -> None:
    """The header table in the module docstring and FIELDS describe the same layout."""
    doc = layout.__doc__ or ""
    rows = re.findall(r"^(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s", doc, re.MULTILINE)
    assert len(rows) == len(fmt.FIELDS)
    offset = 0
    for (off, size, _kafka_name, attr), (name, code) in zip(rows, fmt.FIELDS, strict=True):
        assert (int(off), int(size), attr) == (offset, struct.calcsize(">" + code), name)
        offset += int(size)
    assert offset == fmt.HEADER_SIZE


# --------------------------------------------------------------------------- worked examples


def test_worked_example_80_bytes() -> None:
    built = encode_batch([b"value"], keys=[b"key"], headers=[[("h", b"1")]], timestamps=T0)
    assert built == EXAMPLE_80
    h = parse_header(EXAMPLE_80)
    assert h.crc == 0x16C8334A
    assert (h.size, h.batch_length, h.records_count, h.magic) == (80, 68, 1, 2)
    assert (h.base_timestamp, h.max_timestamp, h.producer_id) == (T0, T0, -1)
    r = decode(EXAMPLE_80)
    assert (r.keys(), r.values(), r.header(0)) == ([b"key"], [b"value"], (("h", b"1"),))
    assert r.offsets.tolist() == [0] and r.timestamps.tolist() == [T0]


def test_commit_marker_vector() -> None:
    key, value = fmt.control_record(fmt.CONTROL_COMMIT)
    built = encode_batch(
        [value],
        keys=[key],
        timestamps=T0 + 210,
        base_offset=190,
        leader_epoch=5,
        producer_id=7777,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    assert built == COMMIT_MARKER
    h = next_batch(COMMIT_MARKER, 0)
    assert h is not None and h.crc == 0xB2183BFD
    assert h.is_control and h.is_transactional and h.attributes == 0x30
    assert (h.base_offset, h.leader_epoch, h.producer_id, h.producer_epoch) == (190, 5, 7777, 1)
    r = decode_records(COMMIT_MARKER, 0, h)
    assert decode_control_record(r.key(0)) == (0, 1)
    assert r.value(0) == b"\x00" * 6
    assert h.next_offset == 191


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
        (2**63 - 1, "feffffffffffffffff01"),
        (-(2**63), "ffffffffffffffffff01"),
    ],
)
def test_varint_examples(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert zz(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded) + b"\xaa", 0) == (value, len(encoded) // 2)


def test_varint_limits() -> None:
    with pytest.raises(CorruptBatchError):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0, 5)  # 6 bytes for an int32
    with pytest.raises(CorruptBatchError):
        decode_varint(b"\x80" * 10 + b"\x00", 0, 10)  # 11 bytes for an int64
    with pytest.raises(CorruptBatchError):
        decode_varint(b"\xff\xff\xff\xff\x1f", 0, 5)  # does not fit 32 bits
    with pytest.raises(CorruptBatchError):
        decode_varint(b"\x80\x80", 0)  # runs past the end
    with pytest.raises(ValueError):
        encode_varint(2**63)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
@settings(max_examples=60, deadline=None)
def test_vectorised_varints_match_scalar(values: list[int]) -> None:
    x = np.array(values, np.int64)
    z = encoder._zigzag(x)
    w = encoder._widths(z)
    stride = 10 + encoder._SLACK  # one varint per row, as the encoder writes a field
    rows = np.arange(len(values), dtype=np.int64) * stride
    out = np.zeros(len(values) * stride, np.uint8)
    encoder._put_varints(out, rows, z, w)
    for i, v in enumerate(values):
        row = out[i * stride : (i + 1) * stride].tobytes()
        assert row == zz(v).ljust(stride, b"\x00")
    starts = np.concatenate(([0], np.cumsum(w)[:-1]))
    d = np.frombuffer(b"".join(map(zz, values)), np.uint8)
    got, widths = record_decoder._read_varints(d, starts, starts + w, 10, "test")
    assert got.tolist() == values
    assert np.array_equal(np.broadcast_to(widths, w.shape), w)


# --------------------------------------------------------------------------- round trips

headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3
)


@st.composite
def batch_args(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(0, 20))
    args: dict[str, object] = {
        "values": draw(st.lists(st.none() | st.binary(max_size=200), min_size=n, max_size=n)),
        "keys": draw(
            st.none() | st.lists(st.none() | st.binary(max_size=30), min_size=n, max_size=n)
        ),
        "headers": draw(st.none() | st.lists(st.none() | headers_st, min_size=n, max_size=n)),
        "compression": draw(st.sampled_from(list(Compression))),
        "base_offset": draw(st.integers(0, 2**62)),
        "leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "producer_id": draw(st.integers(-1, 2**63 - 1)),
        "producer_epoch": draw(st.integers(-1, 2**15 - 1)),
        "base_sequence": draw(st.integers(-1, 2**31 - 1)),
        "is_transactional": draw(st.booleans()),
        "timestamp_type": draw(st.sampled_from([0, 1])),
    }
    if draw(st.booleans()):
        args["timestamps"] = draw(st.integers(-(2**40), 2**45))
    else:
        base = draw(st.integers(0, 2**45))
        deltas = st.integers(-(2**40), 2**40)
        args["timestamps"] = [base + d for d in draw(st.lists(deltas, min_size=n, max_size=n))]
    if n and draw(st.booleans()):
        gaps = sorted(draw(st.sets(st.integers(0, 100_000), min_size=n, max_size=n)))
        args["offset_deltas"] = gaps
        args["last_offset_delta"] = gaps[-1] + draw(st.integers(0, 1000))
    elif n == 0:
        args["last_offset_delta"] = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        args["delete_horizon_ms"] = draw(st.integers(0, 2**45))
    if args["timestamp_type"] == 1 or draw(st.booleans()):
        args["max_timestamp"] = draw(st.integers(0, 2**45))
    return args


def expected_records(args: dict[str, object]) -> dict[str, list[object]]:
    values = list(args["values"])  # type: ignore[call-overload]
    n = len(values)
    ts = args["timestamps"]
    stamps = [ts] * n if isinstance(ts, int) else list(ts)  # type: ignore[call-overload]
    if args["timestamp_type"] == 1:
        stamps = [args["max_timestamp"]] * n
    deltas = args.get("offset_deltas") or list(range(n))
    keys = args["keys"] or [None] * n
    hdrs = args["headers"] or [None] * n
    return {
        "values": values,
        "keys": list(keys),  # type: ignore[call-overload]
        "headers": [tuple(h) if h else () for h in hdrs],  # type: ignore[union-attr]
        "timestamps": stamps,
        "offsets": [args["base_offset"] + d for d in deltas],  # type: ignore[operator]
    }


@given(batch_args())
@settings(max_examples=150, deadline=None)
def test_round_trip(args: dict[str, object]) -> None:
    buf = encode_batch(**args)  # type: ignore[arg-type]
    h = next_batch(buf, 0)
    assert h is not None and h.size == len(buf)
    exp = expected_records(args)
    n = len(exp["values"])
    assert h.records_count == n
    assert h.base_offset == args["base_offset"]
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        args["producer_id"],
        args["producer_epoch"],
        args["base_sequence"],
    )
    assert h.is_transactional == args["is_transactional"] and not h.is_control
    r = decode_records(buf, 0, h)
    assert len(r) == n
    assert r.values() == exp["values"]
    assert r.keys() == exp["keys"]
    assert [r.header(i) for i in range(n)] == exp["headers"]
    assert r.offsets.tolist() == exp["offsets"]
    if n == 0:
        assert h.base_timestamp == -1 and h.compression is Compression.NONE
        assert h.last_offset_delta == args["last_offset_delta"]
        assert h.max_timestamp == args.get("max_timestamp", -1)
        assert len(buf) == 61
        return
    assert h.compression is args["compression"]
    assert h.timestamp_type == args["timestamp_type"]
    assert r.timestamps.tolist() == exp["timestamps"]
    assert h.last_offset_delta == args.get("last_offset_delta", exp["offsets"][-1] - h.base_offset)
    horizon = args.get("delete_horizon_ms")
    assert h.delete_horizon_ms == horizon and h.has_delete_horizon == (horizon is not None)
    ts = args["timestamps"]
    first = ts if isinstance(ts, int) else ts[0]  # type: ignore[index]
    assert h.base_timestamp == (first if horizon is None else horizon)
    if "max_timestamp" in args:
        assert h.max_timestamp == args["max_timestamp"]
    else:
        assert h.max_timestamp == max(np.broadcast_to(np.asarray(ts), (n,)).tolist())
    for i in range(n):
        assert r.value(i) == exp["values"][i] and r.key(i) == exp["keys"][i]
    if not any(exp["headers"]):
        assert r.headers is None


def test_numpy_timestamps_and_large_records() -> None:
    big = bytes(range(256)) * 400  # 100 KB: a 3-byte record-length varint
    ts = np.array([0, 2**62, -(2**62), 5], np.int64)  # 10-byte timestamp deltas
    buf = encode_batch(
        [big, b"", None, b"x" * 70], keys=[b"", None, b"k", b"y" * 9000], timestamps=ts
    )
    r = decode(buf)
    assert r.values() == [big, b"", None, b"x" * 70]
    assert r.keys() == [b"", None, b"k", b"y" * 9000]
    assert r.timestamps.tolist() == ts.tolist()


def test_empty_values_and_keys_are_not_null() -> None:
    buf = encode_batch([b"", b"", None], keys=[b"", None, b""], timestamps=1)
    r = decode(buf)
    assert r.values() == [b"", b"", None] and r.keys() == [b"", None, b""]
    assert r.value_len.tolist() == [0, 0, -1] and r.key_len.tolist() == [0, -1, 0]


def test_log_append_time_uses_max_timestamp() -> None:
    buf = encode_batch([b"a", b"b"], timestamps=[5, 7], timestamp_type=1, max_timestamp=99)
    h = parse_header(buf)
    assert (h.timestamp_type, h.max_timestamp, h.base_timestamp) == (1, 99, 5)
    assert decode(buf).timestamps.tolist() == [99, 99]


def test_delete_horizon_rebases_deltas() -> None:
    buf = encode_batch(
        [b"a", None], keys=[b"k", b"t"], timestamps=[T0, T0 + 9], delete_horizon_ms=T0 + 86_400_000
    )
    h = parse_header(buf)
    assert h.attributes & 0x40 and h.delete_horizon_ms == T0 + 86_400_000
    assert h.base_timestamp == T0 + 86_400_000 and h.max_timestamp == T0 + 9
    assert decode(buf).timestamps.tolist() == [T0, T0 + 9]
    assert parse_header(small_batch()).delete_horizon_ms is None


def test_compaction_style_batch() -> None:
    """Surviving records keep their offsets; lastOffsetDelta keeps the original end."""
    buf = encode_batch(
        [b"b", b"d"],
        keys=[b"2", b"4"],
        timestamps=[10, 12],
        base_offset=100,
        offset_deltas=[1, 3],
        last_offset_delta=9,
    )
    h = parse_header(buf)
    assert (h.last_offset, h.next_offset, h.records_count) == (109, 110, 2)
    assert decode(buf).offsets.tolist() == [101, 103]


def test_empty_batch() -> None:
    buf = encode_batch(
        [],
        timestamps=[],
        base_offset=50,
        last_offset_delta=4,
        max_timestamp=77,
        compression=Compression.ZSTD,
        producer_id=3,
        producer_epoch=1,
    )
    assert len(buf) == 61
    h = next_batch(buf, 0)
    assert h is not None and h.records_count == 0 and h.base_timestamp == -1
    assert (h.max_timestamp, h.next_offset, h.compression) == (77, 55, Compression.NONE)
    r = decode_records(buf, 0, h)
    assert len(r) == 0 and r.keys() == [] and r.values() == [] and r.headers is None


def test_encode_argument_errors() -> None:
    with pytest.raises(ValueError):
        encode_batch([], timestamps=0)  # empty needs last_offset_delta
    with pytest.raises(ValueError):
        encode_batch([b"a"], keys=[b"a", b"b"], timestamps=0)
    with pytest.raises(ValueError):
        encode_batch([b"a"], headers=[None, None], timestamps=0)
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], timestamps=[1])
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], timestamps=0, offset_deltas=[3, 3])
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], timestamps=0, offset_deltas=[-1, 3])
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], timestamps=0, last_offset_delta=0)
    with pytest.raises(ValueError):
        encode_batch([b"a"], timestamps=0, timestamp_type=2)
    with pytest.raises(ValueError):
        encode_batch([b"a"], timestamps=0, producer_epoch=2**15)


# --------------------------------------------------------------------------- header & walking


def test_header_properties() -> None:
    h = parse_header(
        small_batch(compression=Compression.LZ4, base_offset=10, is_transactional=True)
    )
    assert h.compression is Compression.LZ4 and h.is_transactional and not h.is_control
    assert (h.base_offset, h.last_offset, h.next_offset) == (10, 12, 13)
    assert h.size == h.batch_length + 12
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 5)
    bad = dataclasses.replace(h, attributes=6)
    with pytest.raises(UnsupportedFormatError):
        _ = bad.compression


def test_set_base_offset_keeps_crc() -> None:
    buf = bytearray(small_batch())
    set_base_offset(buf, 12345)
    h = next_batch(buf, 0)
    assert h is not None and h.base_offset == 12345
    assert decode_records(buf, 0, h).offsets.tolist() == [12345, 12346, 12347]
    set_base_offset(memoryview(buf), 7)
    assert parse_header(buf).base_offset == 7


def test_iter_batches_and_tails() -> None:
    a, b, c = small_batch(base_offset=0), small_batch(base_offset=3), EXAMPLE_80
    log = a + b + c
    got = list(iter_batches(log))
    assert [p for p, _ in got] == [0, len(a), len(a) + len(b)]
    assert [h.base_offset for _, h in got] == [0, 3, 0]
    # end bound and start position
    assert [p for p, _ in iter_batches(log, len(a), len(a) + len(b))] == [len(a)]
    # an incomplete tail is not returned
    for cut in range(len(log)):
        sizes = [p + h.size for p, h in iter_batches(log[:cut])]
        assert all(s <= cut for s in sizes)
        assert len(sizes) == sum(1 for end in (len(a), len(a) + len(b), len(log)) if end <= cut)
    # a zero tail (preallocated file) is corrupt at its first byte
    with pytest.raises(CorruptBatchError) as err:
        list(iter_batches(log + bytes(100)))
    assert err.value.position == len(log)
    # 17 bytes or fewer are simply the end
    assert list(iter_batches(log + bytes(17))) == got


def test_next_batch_edge_cases() -> None:
    buf = small_batch()
    assert next_batch(b"", 0) is None
    assert next_batch(buf[:17], 0) is None
    assert next_batch(buf[:60], 0) is None  # past the end: not yet complete
    with pytest.raises(CorruptBatchError, match="maximum"):
        next_batch(buf, 0, max_batch_size=len(buf) - 1)
    assert next_batch(buf, 0, max_batch_size=len(buf)) is not None
    short = bytearray(buf)
    struct.pack_into(">i", short, 8, 30)
    with pytest.raises(CorruptBatchError, match="below 49"):
        next_batch(bytes(short), 0)
    bad_crc = bytearray(buf)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC"):
        next_batch(bytes(bad_crc), 0)
    assert next_batch(bytes(bad_crc), 0, verify=False) is not None
    h = parse_header(bad_crc)
    with pytest.raises(CorruptBatchError):
        verify_crc(bytes(bad_crc), 0, h)
    with pytest.raises(CorruptBatchError):
        verify_crc(buf[:-1], 0, h)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported(magic: int) -> None:
    buf = bytearray(small_batch())
    buf[16] = magic
    with pytest.raises(UnsupportedFormatError, match=f"v0/v1 \\(magic {magic}\\) is not supported"):
        next_batch(bytes(buf), 0)
    with pytest.raises(UnsupportedFormatError):
        parse_header(bytes(buf))


@pytest.mark.parametrize("magic", [3, 0x7F, 0xFF])
def test_unknown_magic_is_corrupt(magic: int) -> None:
    buf = bytearray(small_batch())
    buf[16] = magic
    with pytest.raises(CorruptBatchError, match="magic") as err:
        next_batch(bytes(buf), 0)
    assert not isinstance(err.value, UnsupportedFormatError)


def test_parse_header_rejects() -> None:
    with pytest.raises(CorruptBatchError):
        parse_header(small_batch()[:60])
    for field_offset, fmt_code, value in [(57, ">i", -1), (23, ">i", -1), (8, ">i", 48)]:
        buf = bytearray(small_batch())
        struct.pack_into(fmt_code, buf, field_offset, value)
        with pytest.raises(CorruptBatchError):
            parse_header(bytes(buf))


# --------------------------------------------------------------------------- corruption


def test_every_single_byte_flip() -> None:
    """Outside the CRC (baseOffset, leaderEpoch) a flip decodes; anywhere else it is caught."""
    buf = small_batch()
    clean = decode(buf)
    for pos in range(len(buf)):
        for xor in (0x01, 0x80, 0xFF):
            flipped = bytearray(buf)
            flipped[pos] ^= xor
            data = bytes(flipped)
            if pos < 8 or 12 <= pos < 16:
                r = decode(data)
                assert r.values() == clean.values() and r.keys() == clean.keys()
                continue
            try:
                h = next_batch(data, 0)
            except CorruptBatchError:
                continue
            assert h is None and 8 <= pos < 12, (pos, xor)  # batchLength grew past the end


@pytest.mark.parametrize("codec", list(Compression))
def test_flips_without_crc_raise_only_corrupt_batch_error(codec: Compression) -> None:
    """With the CRC check off, the record parser alone rejects damage (or decodes it)."""
    buf = small_batch(compression=codec)
    for pos in range(21, len(buf)):
        for xor in (0x01, 0x40, 0x80, 0xFF):
            flipped = bytearray(buf)
            flipped[pos] ^= xor
            try:
                h = next_batch(bytes(flipped), 0, verify=False)
                if h is not None:
                    decode_records(bytes(flipped), 0, h, max_decompressed=1 << 20)
            except CorruptBatchError as e:
                assert e.position == 0


@given(st.binary(max_size=300), st.integers(0, 40), st.integers(0, 5))
@settings(max_examples=300, deadline=None)
def test_fuzz_records_section(records: bytes, count: int, codec: int) -> None:
    """Arbitrary bytes behind a valid header: CorruptBatchError or a consistent result."""
    buf = raw_batch(records, count, attributes=codec, last_offset_delta=50)
    h = next_batch(buf, 0)
    assert h is not None
    try:
        r = decode_records(buf, 0, h, max_decompressed=1 << 16)
    except CorruptBatchError:
        return
    assert len(r) == count
    assert all(v is None or isinstance(v, bytes) for v in r.values())


def test_truncation_at_every_length() -> None:
    for codec in Compression:
        buf = small_batch(compression=codec)
        for cut in range(len(buf)):
            assert next_batch(buf[:cut], 0) is None


def test_lying_records_count_does_not_allocate() -> None:
    buf = bytearray(small_batch())
    struct.pack_into(">i", buf, 57, 2**31 - 1)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    h = next_batch(bytes(buf), 0)
    assert h is not None
    tracemalloc.start()
    try:
        with pytest.raises(CorruptBatchError, match="cannot fit"):
            decode_records(bytes(buf), 0, h)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("delta", [-1, 1])
def test_records_count_off_by_one(codec: Compression, delta: int) -> None:
    buf = bytearray(small_batch(compression=codec))
    struct.pack_into(">i", buf, 57, 3 + delta)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    with pytest.raises(CorruptBatchError):
        decode(bytes(buf))


GOOD = rec(b"key", b"value")
LYING: dict[str, tuple[bytes, int]] = {
    "key length -2": (rec(key_len=zz(-2)), 1),
    "value length -2": (rec(value_len=zz(-2)), 1),
    "key past record": (rec(b"k", key_len=zz(50)), 1),
    "value past batch": (rec(b"k", b"v", value_len=zz(2**31 - 1)), 1),
    "headers count -1": (rec(headers=zz(-1)), 1),
    "headers count huge": (rec(headers=zz(2**31 - 1)), 1),
    "header key length -1": (rec(headers=zz(1) + zz(-1) + zz(-1)), 1),
    "header key past record": (rec(headers=zz(1) + zz(40) + b"h" + zz(-1)), 1),
    "header key not utf-8": (rec(headers=zz(1) + zz(2) + b"\xff\xfe" + zz(-1)), 1),
    "header value length -2": (rec(headers=zz(1) + zz(1) + b"h" + zz(-2)), 1),
    "header value past record": (rec(headers=zz(1) + zz(1) + b"h" + zz(9) + b"ab"), 1),
    "fewer headers than count": (rec(headers=zz(2) + zz(1) + b"h" + zz(-1)), 1),
    "offsetDelta 6-byte varint": (rec(od_raw=b"\x80\x80\x80\x80\x80\x00"), 1),
    "offsetDelta over 32 bits": (rec(od_raw=b"\xfe\xff\xff\xff\x1f"), 1),
    "timestampDelta 11-byte varlong": (rec(ts_raw=b"\x80" * 10 + b"\x00"), 1),
    "offsetDelta negative": (rec(offset_delta=-1), 1),
    "offsetDelta > lastOffsetDelta": (rec(offset_delta=5), 1),
    "record length negative": (rec(length=zz(-5)), 1),
    "record length too long": (rec(length=zz(len(GOOD) + 3)), 1),
    "record length too short": (rec(length=zz(len(GOOD) - 3)), 1),
    "record length below minimum": (zz(3) + b"\x00\x00\x00" + GOOD, 2),
    # the walk ignores the zigzag sign bit (same chain as length L); the vectorised re-read
    # must still see -(L + 1)
    "record length sign bit": (bytes([2 * (len(GOOD) - 1) + 1]) + GOOD[1:], 1),
    "3-byte negative record length": (b"\xff\xff\x0f" + GOOD, 1),
    "record length 6-byte varint": (b"\x80\x80\x80\x80\x80\x00" + GOOD, 1),
    "bytes after last record": (GOOD + b"\x00", 1),
    "record bytes but count 0": (GOOD, 0),
    "second record missing": (GOOD, 2),
    "truncated record": (GOOD[:-1], 1),
    "empty section": (b"", 1),
}


@pytest.mark.parametrize("name", list(LYING))
def test_lying_fields(name: str) -> None:
    records, count = LYING[name]
    buf = b"\x00" * 7 + raw_batch(records, count, last_offset_delta=0)  # not at position 0
    h = next_batch(buf, 7)
    assert h is not None
    with pytest.raises(CorruptBatchError) as err:
        decode_records(buf, 7, h)
    assert err.value.position == 7


def test_hand_built_records_decode() -> None:
    """Non-minimal varints and odd but legal layouts that Kafka's reader accepts."""
    records = (
        rec(b"a", b"b", key_len=b"\x82\x00")  # key length 1 in a two-byte varint
        + rec(
            None,
            None,
            offset_delta=2,
            ts_delta=-7,
            headers=zz(2) + zz(1) + b"x" + zz(-1) + zz(0) + zz(0),
        )
    )
    buf = raw_batch(records, 2, last_offset_delta=2)
    r = decode(buf)
    assert r.keys() == [b"a", None] and r.values() == [b"b", None]
    assert r.offsets.tolist() == [0, 2] and r.timestamps.tolist() == [T0, T0 - 7]
    assert r.headers == [(), (("x", None), ("", b""))]


def test_unknown_codec_in_batch() -> None:
    buf = raw_batch(GOOD, 1, attributes=5)
    with pytest.raises(UnsupportedFormatError):
        decode(buf)


def test_decompressed_size_limit() -> None:
    buf = encode_batch([b"z" * 10_000] * 10, timestamps=0, compression=Compression.ZSTD)
    h = parse_header(buf)
    assert len(decode_records(buf, 0, h, max_decompressed=200_000)) == 10
    with pytest.raises(CorruptBatchError, match="exceeds"):
        decode_records(buf, 0, h, max_decompressed=50_000)


# --------------------------------------------------------------------------- control records


def test_control_records() -> None:
    assert decode_control_record(struct.pack(">hh", 0, 0)) == (0, 0)
    assert decode_control_record(struct.pack(">hhi", 0, 6, 9)) == (0, 6)
    with pytest.raises(CorruptBatchError):
        decode_control_record(b"\x00\x00\x01")
    with pytest.raises(CorruptBatchError):
        decode_control_record(None)
    with pytest.raises(CorruptBatchError):
        decode_control_record(struct.pack(">hh", -1, 1))
    key, value = fmt.control_record(fmt.CONTROL_ABORT, 3)
    assert (key, value) == (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x03")


# --------------------------------------------------------------------------- columns


def test_decoded_records_accessors() -> None:
    r = decode(small_batch(base_offset=40))
    assert len(r) == 3
    assert r.keys() == [b"k0", b"k1", None] and r.values() == [b"v0", None, b"value-2"]
    assert [r.key(i) for i in range(3)] == r.keys()
    assert [r.value(i) for i in range(3)] == r.values()
    assert r.header(1) == (("h", b"x"), ("n", None)) and r.header(0) == ()
    assert r.offsets.dtype == np.int64 and r.timestamps.dtype == np.int64
    assert r.key_len.dtype == np.int32 and r.value_len.dtype == np.int32
    assert r.key_pos.dtype == np.int64 and r.value_pos.dtype == np.int64
    assert r.timestamps.tolist() == [T0, T0 + 5, T0 - 3]
    plain = decode(encode_batch([b"a"], timestamps=0))
    assert plain.headers is None and plain.header(0) == () and plain.keys() == [None]
    with pytest.raises(IndexError):
        plain.header(1)


@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=60),
    st.integers(0, 70),
    st.one_of(st.none(), st.integers(0, 70)),
)
@settings(max_examples=80, deadline=None)
def test_partial_decode_equals_a_slice_of_the_full_decode(
    values: list[bytes], first: int, count: int | None
) -> None:
    batch = encode_batch(values, keys=[b"k%d" % i for i in range(len(values))], timestamps=T0)
    header = parse_header(batch)
    full = decode_records(batch, 0, header)
    part = decode_records(batch, 0, header, first=first, count=count)
    lo = min(first, len(values))
    hi = len(values) if count is None else min(len(values), lo + count)
    assert part.offsets.tolist() == full.offsets.tolist()[lo:hi]
    assert part.values() == full.values()[lo:hi]
    assert part.keys() == full.keys()[lo:hi]
    assert part.timestamps.tolist() == full.timestamps.tolist()[lo:hi]
