"""The compiled codec core against the pure-Python reference (differential tests).

Hypothesis builds batches (every codec, keys, values, nulls, headers, control and
transactional batches, offset gaps, LogAppendTime, delete horizons) and damages their records
sections (bit flips, truncation, inserted and deleted bytes, lying lengths and varints, lying
record counts); the compiled and the pure implementations must return the same records, or
raise the same exception type with the same message. The encoder must give the same bytes.
Runs whichever implementation ``EMBEDLOG_PURE`` selects for the rest of the suite.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.segment import _native, decode, encode
from embedlog.segment import format as fmt
from embedlog.segment.codecs import Compression
from embedlog.segment.run_records import run_records
from helpers import both_cores, codec_core

try:
    from embedlog.segment import _ccodec
except ImportError:  # pragma: no cover - the pure-only install
    pytest.skip("the compiled codec core is not built", allow_module_level=True)

T = TypeVar("T")
I64 = 2**63


_core = codec_core


def both(fn: Callable[[], T]) -> tuple[Any, Any]:
    """(C outcome, pure outcome): the value, or ("raised", type, message)."""
    return both_cores(_ccodec, fn)


# --------------------------------------------------------------------------- strategies

payload = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=100, max_size=300))
header_list = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
             max_size=3),
)
deltas = st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40), st.integers(-I64, I64 - 1))


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 24))
    keyed = draw(st.booleans())
    with_headers = draw(st.booleans())
    ts0 = draw(st.integers(-(2**50), 2**50))
    gaps = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    args: dict[str, Any] = {
        "values": draw(st.lists(payload, min_size=n, max_size=n)),
        "keys": draw(st.lists(payload, min_size=n, max_size=n)) if keyed else None,
        "headers": draw(st.lists(header_list, min_size=n, max_size=n)) if with_headers else None,
        "timestamps": draw(st.one_of(
            st.just(ts0),
            st.lists(st.integers(ts0 - 2**20, ts0 + 2**20), min_size=n, max_size=n))),
        "compression": draw(st.sampled_from(list(Compression))),
        "timestamp_type": draw(st.integers(0, 1)),
        "is_transactional": draw(st.booleans()),
        "is_control": draw(st.booleans()),
        "producer_id": draw(st.sampled_from([-1, 0, 7, 2**62])),
        "producer_epoch": draw(st.sampled_from([-1, 0, 3])),
        "base_sequence": draw(st.sampled_from([-1, 0, 11])),
        "base_offset": draw(st.sampled_from([0, 5, 2**40])),
    }
    if n and draw(st.booleans()):
        args["offset_deltas"] = np.cumsum(gaps) - gaps[0]
    if n == 0 or draw(st.booleans()):
        args["last_offset_delta"] = (int(np.sum(gaps)) if n else 0) + draw(st.integers(0, 9))
    if n and draw(st.booleans()):
        args["delete_horizon_ms"] = ts0 + draw(st.integers(-1000, 1000))
    if args["timestamp_type"] == 1:
        args["max_timestamp"] = ts0 + 99
    return args


# --------------------------------------------------------------------------- encoder


@given(batches())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_encoder_bytes_identical(args: dict[str, Any]) -> None:
    c, py = both(lambda: fmt.encode_batch(**args))
    assert c == py


@given(st.lists(payload, min_size=1, max_size=20), st.lists(deltas, min_size=1, max_size=20))
@settings(max_examples=150, deadline=None)
def test_encoder_extreme_deltas(values: list[bytes | None], tsd: list[int]) -> None:
    """Timestamp deltas anywhere in int64 (varlongs of every width), via delete horizons."""
    n = min(len(values), len(tsd))
    stamps = np.array(tsd[:n], np.int64)
    c, py = both(lambda: fmt.encode_batch(values[:n], timestamps=stamps, delete_horizon_ms=0))
    assert c == py
    c, py = both(lambda: fmt.encode_batch(values[:1], timestamps=int(tsd[0]),
                                          delete_horizon_ms=-(2**62)))
    assert c == py


@pytest.mark.parametrize("bad", [
    {"keys": [b"a", b"b"]},
    {"headers": [None, None]},
    {"headers": [[(1, b"x")]]},
    {"timestamps": 2**63 - 1, "delete_horizon_ms": -5},
    {"producer_epoch": 2**15},
    {"base_offset": 2**63},
])
def test_encoder_errors_match(bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"timestamps": 0, **bad}
    c, py = both(lambda: fmt.encode_batch([b"v"], **args))
    assert c[0] == "raised" and c[:2] == py[:2], (c, py)
    assert c == py or bad.get("headers") == [[(1, b"x")]]


def test_encoder_accepts_buffers() -> None:
    values = [bytearray(b"abc"), memoryview(b"defg"), b"h"] * 4
    c, py = both(lambda: fmt.encode_batch(values, keys=[b"k"] * 12, timestamps=1))  # type: ignore[arg-type]
    assert c == py


# --------------------------------------------------------------------------- decoder


def _outcome(buf: bytes, first: int = 0, count: int | None = None) -> Any:
    header = fmt.parse_header(buf, 0)
    r = fmt.decode_records(buf, 0, header, first=first, count=count)
    return (r.offsets.tolist(), r.timestamps.tolist(), r.key_pos.tolist(), r.key_len.tolist(),
            r.value_pos.tolist(), r.value_len.tolist(), r.keys(), r.values(), r.headers,
            [r.header(i) for i in range(len(r))],
            r.records("t", 3, header.timestamp_type))


def _with_records(batch: bytes, records: bytes, count: int, lod_extra: int) -> bytes:
    header = fmt.parse_header(batch, 0)
    rebuilt = fmt.rebuild_batch(header, records, count, header.max_timestamp)
    out = bytearray(rebuilt)
    lod = max(0, header.last_offset_delta + lod_extra)
    out[23:27] = min(lod, 2**31 - 1).to_bytes(4, "big")
    return bytes(out)


def _damage(data: bytes, how: int, at: int, blob: bytes) -> bytes:
    at = at % (len(data) + 1)
    if how == 0:  # bit flips
        b = bytearray(data)
        for i, x in enumerate(blob[:4]):
            if b:
                b[(at + i * 7) % len(b)] ^= x or 1
        return bytes(b)
    if how == 1:  # truncation
        return data[:at]
    if how == 2:  # inserted bytes
        return data[:at] + blob + data[at:]
    if how == 3:  # deleted bytes
        return data[:at] + data[at + len(blob) + 1 :]
    # a lying varint over whatever was there (a length, a delta, a count)
    lie = fmt.encode_varint(int.from_bytes(blob[:8].ljust(8, b"\0"), "big", signed=True)
                            >> (blob[0] % 64 if blob else 0))
    return data[:at] + lie + data[at + len(lie) :]


@given(batches(), st.integers(0, 5), st.integers(0, 10**6), st.binary(min_size=1, max_size=12),
       st.integers(-2, 3), st.integers(-1, 3), st.integers(0, 30), st.none() | st.integers(0, 9))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decoder_identical_on_damage(
    args: dict[str, Any], how: int, at: int, blob: bytes, count_extra: int, lod_extra: int,
    first: int, count: int | None,
) -> None:
    buf = _damaged_batch(args, how, at, blob, count_extra, lod_extra)
    c, py = both(lambda: _outcome(buf, first, count))
    assert c == py


def _damaged_batch(args: dict[str, Any], how: int, at: int, blob: bytes, count_extra: int,
                   lod_extra: int) -> bytes:
    """The batch of ``args`` with its records section damaged (``how`` 5: intact) and its record
    count and lastOffsetDelta moved by ``count_extra`` / ``lod_extra`` (CRC fixed up)."""
    try:
        batch = fmt.encode_batch(**args)
    except ValueError:
        assume(False)
    n = len(args["values"])
    assume(n > 0)
    section = fmt.encode_batch(args["values"], keys=args["keys"], headers=args["headers"],
                               timestamps=args["timestamps"],
                               offset_deltas=args.get("offset_deltas"))[fmt.HEADER_SIZE :]
    damaged = section if how == 5 else _damage(section, how, at, blob)
    return _with_records(batch, damaged, max(0, n + count_extra), lod_extra)


@given(batches(), st.integers(0, 30), st.none() | st.integers(0, 9))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decoder_identical_on_valid_batches(
    args: dict[str, Any], first: int, count: int | None
) -> None:
    try:
        buf = fmt.encode_batch(**args)
    except ValueError:
        assume(False)
    c, py = both(lambda: _outcome(buf, first, count))
    assert c == py
    assert c[0] != "raised"


@given(st.binary(max_size=200), st.integers(0, 40), st.integers(0, 3))
@settings(max_examples=400, deadline=None)
def test_decoder_identical_on_random_sections(data: bytes, n: int, lod: int) -> None:
    """Arbitrary bytes as a records section claiming ``n`` records."""
    batch = fmt.encode_batch([b"x"] * max(n, 1), timestamps=5, last_offset_delta=n + lod)
    buf = _with_records(batch, data, n, 0)
    c, py = both(lambda: _outcome(buf))
    assert c == py


def cut_run(args: dict[str, Any], lo: int, k: int
            ) -> tuple[bytes, fmt.BatchHeader, int, int, bytes]:
    """``(batch, header, lo, hi, run)``: the batch of ``args`` uncompressed (the example
    passed over if it has no records or cannot be encoded) and its records ``[lo, hi)``
    (``lo`` and ``k`` records from it, cut to the batch), cut at their true ends."""
    args = {**args, "compression": Compression.NONE}
    try:
        batch = fmt.encode_batch(**args)
    except ValueError:
        assume(False)
    header = fmt.parse_header(batch, 0)
    section = batch[fmt.HEADER_SIZE:]
    starts, end = decode._walk(section, header.records_count)
    ends = [*starts[1:], end]
    assume(header.records_count > 0)
    lo = min(lo, header.records_count - 1)
    hi = min(header.records_count, lo + max(k, 1))
    return batch, header, lo, hi, section[starts[lo]:ends[hi - 1]]


@given(batches(), st.integers(0, 5), st.integers(0, 10**6), st.binary(min_size=1, max_size=12),
       st.integers(0, 30), st.integers(0, 30), st.integers(-2, 2))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_run_records_identical(args: dict[str, Any], how: int, at: int, blob: bytes, lo: int,
                               k: int, n_extra: int) -> None:
    """A point read's run of records (records [lo, lo + k) of a batch's records section, cut
    at the true record ends, damaged unless ``how`` is 5, claiming ``n_extra`` more records
    than it holds): the compiled one-pass ``run_records`` gives the pure decoder's records, or
    its error."""
    batch, header, lo, hi, run = cut_run(args, lo, k)
    run = run if how == 5 else _damage(run, how, at, blob)
    n = max(0, hi - lo + n_extra)
    c, py = both(lambda: run_records(run, n, header, 1000, "t", 3))
    assert c == py
    if how == 5 and n_extra == 0:
        cut = fmt.decode_records(batch, 0, header).slice(lo, hi)
        assert c == cut.records("t", 3, header.timestamp_type)
        one_pass = _ccodec.run_records(
            embedlog.Record, "t", 3, header.timestamp_type, run, n, header.base_offset,
            header.base_timestamp, header.max_timestamp, header.last_offset_delta,
            header.timestamp_type == 1)
        assert (one_pass is None) == any(cut.headers or ())  # taken unless headers


@given(st.binary(max_size=200), st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_run_records_identical_on_random_runs(data: bytes, n: int) -> None:
    header = fmt.parse_header(fmt.encode_batch([b"x"] * 64, timestamps=5, base_offset=7), 0)
    c, py = both(lambda: run_records(data, n, header, 0, "t", 0))
    assert c == py


def test_run_records_are_untracked_when_atomic() -> None:
    buf = fmt.encode_batch([b"a", None] * 8, keys=[None, b"k"] * 8, timestamps=1)
    header = fmt.parse_header(buf)
    with _core(_ccodec):
        rs = run_records(buf[fmt.HEADER_SIZE:], 16, header, 0, "t", 0)
        assert gc.is_tracked(run_records(buf[fmt.HEADER_SIZE:], 16, header, 0, _Topic("t"),
                                         0)[0])
    assert rs[1] == embedlog.Record("t", 0, 1, 1, 0, b"k", None, ())
    assert type(rs[0]) is embedlog.Record and not gc.is_tracked(rs[0])
    with pytest.raises(TypeError):
        _ccodec.run_records(_Topic, "t", 0, 0, b"", 1, 0, 0, 0, 0, False)  # not a Record type


def test_file_identity_is_the_fstat_fields(tmp_path: Any) -> None:
    """The segment file identity the point-read memo keys by: what os.fstat gives, through
    either core; a closed descriptor raises OSError as os.fstat does."""
    from embedlog.segment import crc_memo
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        c, py = both(lambda: crc_memo.identity(fd))
        assert c == py == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        os.utime(path, ns=(5, 2**62))  # past 2**32 seconds
        assert both(lambda: crc_memo.identity(fd))[0][3] == 2**62
    finally:
        os.close(fd)
    c, py = both(lambda: crc_memo.identity(fd))
    assert c[:2] == py[:2] == ("raised", OSError)
    with pytest.raises(OSError):
        _ccodec.file_identity(-1)


# --------------------------------------------------------------------------- objects


def test_records_are_untracked_when_atomic() -> None:
    buf = fmt.encode_batch([b"a", None], keys=[None, b"k"],
                           headers=[None, [("h", b"v"), ("n", None)]], timestamps=[1, 2])
    header = fmt.parse_header(buf)
    with _core(_ccodec):
        rs = fmt.decode_records(buf, 0, header).records("t", 0, 0)
    assert rs[0] == embedlog.Record("t", 0, 0, 1, 0, None, b"a", ())
    assert rs[1] == embedlog.Record("t", 0, 1, 2, 0, b"k", None, (("h", b"v"), ("n", None)))
    assert type(rs[0]) is embedlog.Record
    assert not gc.is_tracked(rs[0]) and not gc.is_tracked(rs[1])
    tracked = [embedlog.Record("t", 0, 0, 0, 0, None, None, ([],))]  # type: ignore[list-item]
    assert gc.is_tracked(tracked[0])


def test_records_with_a_tracked_topic_stay_tracked() -> None:
    buf = fmt.encode_batch([b"a"], timestamps=1)
    with _core(_ccodec):
        r = fmt.decode_records(buf, 0, fmt.parse_header(buf))
        assert not gc.is_tracked(r.records("t", 0, 0)[0])
        assert gc.is_tracked(r.records(_Topic("t"), 0, 0)[0])


class _Topic(str):
    """A str subclass may carry a __dict__: records holding one stay tracked."""


def test_implementation_is_reported() -> None:
    assert embedlog.codec_implementation() in ("c", "python")
    assert embedlog.codec_implementation() == ("python" if _native.CORE is None else "c")
    assert decode.__name__ and encode.__name__


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.tuples(st.integers(-3, 210),
                                                             st.integers(-3, 60)), max_size=20))
def test_join_ranges_identical(data: bytes, cuts: list[tuple[int, int]]) -> None:
    """Kept record ranges copied for a rebuilt batch: C gather and the slice join agree, also
    on ranges outside the data (both raise)."""
    starts = np.array([a for a, _ in cuts], np.int64)
    ends = np.array([a + n for a, n in cuts], np.int64)
    got, want = both(lambda: fmt.join_ranges(data, starts, ends))
    assert got == want
    assert both(lambda: fmt.join_ranges(memoryview(data), starts, ends)) == (got, want)
    if not isinstance(want, tuple):
        assert want == b"".join(data[a:z] for a, z in zip(starts, ends, strict=True))


class _Bytes(bytes):
    pass


class _Int(int):
    pass


_ITEMS = st.one_of(
    st.none(), st.binary(max_size=3), st.binary(max_size=3).map(bytearray),
    st.binary(max_size=3).map(_Bytes), st.text(max_size=2), st.booleans(),
    st.integers(-3, 3), st.sampled_from([I64 - 1, I64, -I64, 2**70]),
    st.integers(0, 9).map(_Int), st.floats(allow_nan=False),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEMS, max_size=12), as_tuple=st.booleans())
def test_argument_scans_match_the_python_checks(items: list[Any], as_tuple: bool) -> None:
    """The C scans behind append_batch's argument checks find the same first bad item as the
    Python predicates they replace."""
    seq: Any = tuple(items) if as_tuple else items
    not_bytes = [i for i, v in enumerate(items) if not (v is None or v.__class__ is bytes)]
    not_int = [i for i, v in enumerate(items) if not (type(v) is int and 0 <= v < I64)]
    assert _ccodec.first_not_bytes(seq) == (not_bytes[0] if not_bytes else -1)
    assert _ccodec.first_not_int64(seq) == (not_int[0] if not_int else -1)
    out = np.full(len(items), -7, np.int64)
    stop = not_int[0] if not_int else len(items)
    assert _ccodec.first_not_int64(seq, out) == (not_int[0] if not_int else -1)
    assert out[:stop].tolist() == items[:stop] and (out[stop:] == -7).all()
    with pytest.raises(ValueError):
        _ccodec.first_not_int64(seq, np.empty(len(items) + 1, np.int64))
    with pytest.raises(TypeError):
        _ccodec.first_not_bytes(iter(items))
    from embedlog import _validate
    got = both(lambda: _validate.bytes_values(seq, "values"))
    assert got[0] == got[1]
    stamps = both(lambda: _validate.timestamps_ms(list(items), len(items)))
    assert stamps[0] == stamps[1]


def test_record_batch_columns_match_the_pure_code(tmp_path: Any) -> None:
    """RecordBatch.keys/values/records (C slices and records) equal the pure code's, with null
    keys and values, headers, and a slice that starts inside the batch."""
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        log.append_batch("t", [None if i % 5 == 0 else b"v%d" % i for i in range(40)],
                         keys=[None if i % 3 == 0 else b"k%d" % i for i in range(40)],
                         headers=[[("h", b"%d" % i)] if i % 2 else [] for i in range(40)])
        log.append_batch("t", [b"plain"] * 7)
        for batch in log.read_batches("t", 0, 3):
            for view in (batch, batch.slice(2, 6)):
                for fn in (view.keys, view.values, lambda v=view: list(v.records())):
                    got, want = both(fn)
                    assert got == want and len(got) == len(view)


# --------------------------------------------------------------------------- Arrow sink

_PREFIX = fmt.encode_batch([b"p", None], keys=[None, b"q"], timestamps=[3, 4])


def _sink_outcome(buf: bytes, fused: bool) -> Any:
    """A sink holding a prefix batch, then the batch ``buf``: appended in one pass (``fused``;
    None when the sink leaves it to the decoder) or from the decoder's columns; the sink's
    rows, counts and Arrow buffers, or the decoder's error."""
    sink = _prefixed_sink()
    try:
        header = fmt.parse_header(buf, 0)
        if fused:
            data, start, end = decode.records_section(buf, 0, header)
            got = sink.append(data, start, end, header.records_count, header.base_offset,
                              header.base_timestamp, header.max_timestamp,
                              header.last_offset_delta,
                              bool(header.attributes & fmt.TIMESTAMP_TYPE_MASK))
            if got < 0:
                return None, sink.rows, sink.item_bytes, sink.finish()
        else:
            r = fmt.decode_records(buf, 0, header)
            got = sink.extend(r.data, r.offsets, r.timestamps, r.key_pos, r.key_len,
                              r.value_pos, r.value_len)
    except embedlog.EmbedlogError as e:
        return "raised", type(e), str(e)
    return got, sink.rows, sink.item_bytes, sink.finish()


@given(batches(), st.integers(0, 5), st.integers(0, 10**6), st.binary(min_size=1, max_size=12),
       st.integers(-2, 3), st.integers(-1, 3))
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arrow_sink_appends_exactly_what_the_decoder_reads(
    args: dict[str, Any], how: int, at: int, blob: bytes, count_extra: int, lod_extra: int,
) -> None:
    """The sink's one pass over a stored batch (damaged or not, every codec, nulls, headers,
    control and compacted batches) appends the rows the decoder's columns give, byte for byte,
    or appends nothing and leaves the batch to the decoder -- always when the decoder refuses
    it, so its CorruptBatchError is the one raised. It takes every intact batch without
    headers."""
    buf = _damaged_batch(args, how, at, blob, count_extra, lod_extra)
    fused, decoded = _sink_outcome(buf, True), _sink_outcome(buf, False)
    if fused[0] == "raised":  # a compressed section that does not decompress
        assert fused == decoded
    elif fused[0] is None:  # left to the decoder: nothing appended after the prefix
        prefix = _prefixed_sink()
        assert fused[1:] == (prefix.rows, prefix.item_bytes, prefix.finish())
    else:
        assert fused == decoded
    headers = any(h for h in args["headers"] or ())
    if how == 5 and count_extra == 0 and lod_extra >= 0 and not headers:
        assert fused[0] is not None and fused[0] != "raised"


def _prefixed_sink() -> Any:
    """A sink holding the rows of ``_PREFIX`` (two records, a null key and a null value)."""
    sink = _ccodec.ArrowSink(True, True)
    pre = fmt.decode_records(_PREFIX, 0, fmt.parse_header(_PREFIX))
    sink.extend(pre.data, pre.offsets, pre.timestamps, pre.key_pos, pre.key_len, pre.value_pos,
                pre.value_len)
    return sink


def test_arrow_sink_checks_its_arguments() -> None:
    sink = _ccodec.ArrowSink(keys=False, values=True)
    with pytest.raises(ValueError):
        sink.append(b"abc", 2, 9, 1, 0, 0, 0, 0, False)
    one, two = np.zeros(1, np.int64), np.zeros(2, np.int32)
    with pytest.raises(ValueError):
        sink.extend(b"ab", one, one, one, two, one, two)
    with pytest.raises(ValueError):  # a position outside the data
        sink.extend(b"ab", one, one, one, np.ones(1, np.int32), one + 2, np.ones(1, np.int32))
    assert sink.rows == 0 and sink.finish()[0] == 0
    assert sink.append(b"\x00" * 7, 0, 7, 1, 0, 0, 0, 0, False) == -1  # records of zeros
    rows, _, _, key, value = sink.finish()
    assert rows == 0 and key is None and value[0] == bytearray(4)
