"""``append_batch``'s common case checked by the compiled encoder, against the pure path.

With the compiled core, ``append_batch`` hands its values, keys and timestamps unchecked to the
encoder (``encode.STRICT``), which checks them as it reads them and gives way to the argument
checks and the general path for anything it does not take as is. Without the core every call
takes that general path. Hypothesis drives both over the same calls -- good and bad items of
every kind, lists and tuples, wrong lengths, every way of choosing a partition, compacted,
LogAppendTime and compressed topics -- and they must return the same metadata or raise the
same exception type with the same message, and leave byte-identical folders.
"""

from __future__ import annotations

import array
import os
import pathlib
import shutil
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles import ScriptedFS
from embedlog import _io
from embedlog.log import Log
from embedlog.segment import _native, encode
from embedlog.segment.encode import PLAIN, BatchAttributes
from helpers import both_cores, codec_core

try:
    from embedlog.segment import _ccodec
except ImportError:  # pragma: no cover - the pure-only install
    pytest.skip("the compiled codec core is not built", allow_module_level=True)

I64 = 2**63
CLOCK = 1_700_000_000_000


class _Bytes(bytes):
    pass


# Each item is built afresh for every run (a memoryview or bytearray must not be shared).
_FLAT = st.one_of(
    st.none(), st.binary(max_size=30),
    st.binary(max_size=8).map(lambda b: ("bytearray", b)),
    st.binary(max_size=8).map(lambda b: ("memoryview", b)),
)  # fmt: skip
"""What the encoders take: None, bytes, bytearray, one-dimensional views of single bytes."""
_GOOD = st.one_of(
    _FLAT,
    st.binary(max_size=8).map(lambda b: ("2d", b)),
    st.binary(max_size=8).map(lambda b: ("wide", b)),
)  # fmt: skip
"""What append_batch takes: also views of other shapes and item sizes (their bytes)."""
_BAD = st.sampled_from([("str", "s"), ("int", 3), ("sub", b"ab"), ("strided", b"abcdef"),
                        ("released", b"x"), ("list", [1])])
# A strided or released memoryview is refused by append_batch's checks
# (InvalidArgumentError); a memoryview of another shape or item size is taken as its bytes.
_BAD_ARGS = _BAD
_STAMP = st.one_of(st.integers(0, 2**45), st.sampled_from(
    [-1, I64 - 1, I64, True, np.int64(5), 1.0, "7", None]))


def _item(spec: Any) -> Any:
    if not isinstance(spec, tuple):
        return spec
    kind, raw = spec
    if kind == "bytearray":
        return bytearray(raw)
    if kind == "memoryview":
        return memoryview(raw)
    if kind == "2d":  # two rows of the same bytes
        return memoryview(raw + raw).cast("B", (2, len(raw))) if raw else memoryview(b"")
    if kind == "wide":  # 16-bit items: its length is not its size in bytes
        return memoryview(array.array("H", raw[: len(raw) // 2 * 2]))
    if kind == "sub":
        return _Bytes(raw)
    if kind == "strided":
        return memoryview(raw)[::2]
    if kind == "released":
        view = memoryview(raw)
        view.release()
        return view
    return raw


def _column(spec: tuple[str, list[Any]] | None) -> Any:
    if spec is None:
        return None
    shape, items = spec
    built = [_item(i) for i in items]
    return tuple(built) if shape == "tuple" else built


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 6))
    good = draw(st.booleans())

    def column() -> tuple[str, list[Any]]:
        items = st.one_of(_GOOD, _BAD_ARGS) if not good and draw(st.booleans()) else _GOOD
        size = n if good or draw(st.booleans()) else draw(st.integers(0, 7))
        return draw(st.sampled_from(["list", "tuple"])), draw(st.lists(items, min_size=size,
                                                                       max_size=size))

    stamps: Any = draw(st.one_of(
        st.none(), st.integers(0, 2**45),
        st.lists(st.integers(0, 2**45), min_size=n, max_size=n),
        *([] if good else [_STAMP, st.lists(_STAMP, min_size=n, max_size=n),
                           st.lists(st.integers(0, 9), max_size=7).map(tuple)]),
    ))  # fmt: skip
    return {
        "topic": draw(st.sampled_from(["t", "one", "c", "lat", "z"])),
        "values": column(),
        "keys": column() if draw(st.booleans()) else None,
        "timestamps": stamps,
        "partition": draw(st.sampled_from([None, 0, 1] if good
                                          else [None, 0, 1, 2, -1, True, "0", np.int64(0)])),
        "compression": draw(st.sampled_from([None] if good else [None, None, "gzip", "lz5"])),
        "headers": None if good or draw(st.booleans()) else [None] * n,
    }


def _open(path: pathlib.Path) -> Log:
    """The test's log at ``path``: its topics are made once, in a template copied for each
    example."""
    template = path.parent / "template"
    if not template.exists():
        with Log(template, clock=lambda: CLOCK, upkeep=False) as log:
            log.create_topic("t", partitions=2)
            log.create_topic("one")
            log.create_topic("c", config={"cleanup.policy": "compact"})
            log.create_topic("lat", config={"message.timestamp.type": "LogAppendTime"})
            log.create_topic("z", config={"compression.type": "gzip"})
    shutil.copytree(template, path)
    return Log(path, clock=lambda: CLOCK, upkeep=False)


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(root) for f in names}


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:
        return ("raised", type(e), str(e))


def _append(log: Log, call: dict[str, Any]) -> Any:
    args = dict(call, values=_column(call["values"]), keys=_column(call["keys"]))
    return log.append_batch(args.pop("topic"), args.pop("values"), **args)


@given(st.lists(calls(), min_size=1, max_size=6))
@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_append_batch_same_results_errors_and_files(tmp_path: pathlib.Path,
                                                    script: list[dict[str, Any]]) -> None:
    roots = []
    outcomes = []
    for core in (_ccodec, None):
        root = tmp_path / f"run{len(os.listdir(tmp_path))}"
        got = []
        with _io.use_backend(ScriptedFS(sync=False)), codec_core(core), _open(root) as log:
            for call in script:
                got.append(_outcome(partial(_append, log, call)))
        roots.append(root)
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    assert _files(roots[0]) == _files(roots[1])


def test_plain_arguments_take_the_compiled_path(tmp_path: pathlib.Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The common case is never checked in Python: the encoder's checks are the only ones."""
    from embedlog import _validate

    def refuse(*args: Any) -> Any:
        raise AssertionError("checked in Python")

    with codec_core(_ccodec), _open(tmp_path / "log") as log:
        monkeypatch.setattr(_validate, "batch_args", refuse)
        monkeypatch.setattr(_validate, "timestamps_ms", refuse)
        out = log.append_batch("t", [b"a", bytearray(b"b"), None], keys=(b"k", None, b"m"),
                               timestamps=[5, 9, 7], partition=1)
        assert [(m.partition, m.offset, m.timestamp) for m in out] == [(1, 0, 9)]
        out = log.append_batch("one", [b"x"] * 3, keys=[b"k"] * 3)
        assert [(m.partition, m.offset, m.timestamp) for m in out] == [(0, 0, CLOCK)]
        with pytest.raises(AssertionError, match="checked in Python"):
            log.append_batch("t", [b"a", "b"], partition=0)  # not plain: the checks run
        assert [r.value for r in log.read("t", 1)] == [b"a", b"b", None]


# --------------------------------------------------------------------------- the encoder


_LISTED = st.lists(st.one_of(_GOOD, _BAD), max_size=8)


def _plain(v: Any) -> bool:
    """What append_batch's checks keep as it is (a bytes subclass they copy to bytes)."""
    if type(v) is memoryview:
        try:
            return v.c_contiguous and v.ndim == 1 and v.itemsize == 1
        except ValueError:  # released
            return False
    return v is None or type(v) is bytes or type(v) is bytearray


@given(values=_LISTED, keys=st.one_of(st.none(), _LISTED),
       stamps=st.one_of(_STAMP, st.lists(_STAMP, max_size=8)),
       append_time=st.one_of(st.none(), st.integers(0, 2**45)))
@settings(max_examples=300, deadline=None)
def test_strict_encoder_takes_exactly_the_plain_arguments(
        values: list[Any], keys: list[Any] | None, stamps: Any, append_time: int | None) -> None:
    """encode_for_append(STRICT) encodes exactly the arguments append_batch's checks take as
    they are, to the bytes of encode_batch; anything else gives None."""
    vals, ks = [_item(v) for v in values], None if keys is None else [_item(k) for k in keys]
    if ks is not None and len(ks) != len(vals):
        ks = None
    n = len(vals)
    plain_item = [_plain(v) for v in vals + (ks or [])]
    stamp_list = stamps if isinstance(stamps, list) else [stamps] * n
    plain = n > 0 and all(plain_item) and (type(stamps) is int or len(stamp_list) == n) and all(
        type(t) is int and 0 <= t < I64 for t in stamp_list)
    attrs = BatchAttributes(timestamp_type=0 if append_time is None else 1)
    with codec_core(_ccodec):
        got = encode.encode_for_append(vals, ks, None, stamps, attrs, append_time,
                                       encode.STRICT)
    if not plain:
        assert got is None
        return
    assert type(got) is bytearray
    for core in (_ccodec, None):
        with codec_core(core):
            assert got == encode.encode_batch(vals, keys=ks, timestamps=stamps, attrs=attrs,
                                              max_timestamp=append_time)
    with codec_core(None):
        assert encode.encode_for_append(vals, ks, None, stamps, attrs, append_time,
                                        encode.STRICT) is None


@given(values=st.lists(_FLAT, min_size=1, max_size=8),
       stamps=st.one_of(st.integers(-(2**62), 2**62),
                        st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=8),
                        st.lists(st.sampled_from([-I64, I64 - 1, 0, -1]), min_size=1,
                                 max_size=8)),
       horizon=st.one_of(st.none(), st.integers(-(2**62), 2**62)),
       max_ts=st.one_of(st.none(), st.integers(-(2**62), 2**62)),
       lod=st.one_of(st.none(), st.integers(0, 20)))
@settings(max_examples=300, deadline=None)
def test_listed_timestamps_encode_as_the_column_path(
        values: list[Any], stamps: Any, horizon: int | None, max_ts: int | None,
        lod: int | None) -> None:
    """Timestamps as Python ints (negative, extreme, wrapping deltas, a delete horizon, a
    given max timestamp) give the bytes and errors of the numpy column path."""
    vals = [_item(v) for v in values]
    if isinstance(stamps, list):
        vals = (vals * len(stamps))[: len(stamps)]
    attrs = BatchAttributes(delete_horizon_ms=horizon)

    def run() -> bytes:
        return encode.encode_batch(vals, timestamps=stamps, attrs=attrs,
                                   last_offset_delta=lod, max_timestamp=max_ts)

    c, py = both_cores(_ccodec, run)
    assert c == py
    column = np.asarray(stamps, np.int64) if isinstance(stamps, list) else stamps
    with codec_core(_ccodec):
        assert _outcome(lambda: encode.encode_batch(
            vals, timestamps=column, attrs=attrs, last_offset_delta=lod,
            max_timestamp=max_ts)) == c


_EDGES = [0, 1, 2**30 - 1, 2**30, 2**30 + 1, 2**60 - 1, 2**60, 2**62, I64 - 1, CLOCK]


@pytest.mark.parametrize("stamps", [_EDGES, _EDGES[::-1], *_EDGES, [-1, *_EDGES], [-I64, I64 - 1]])
def test_timestamps_of_every_width_encode_as_the_column_path(stamps: Any) -> None:
    """Ints of zero to three 30-bit digits (the ones of at most two are read directly), either
    sign: the bytes of the numpy column path, listed or one for all."""
    n = len(stamps) if isinstance(stamps, list) else 3
    vals = [b"v%d" % i for i in range(n)]
    column = np.asarray(stamps, np.int64) if isinstance(stamps, list) else stamps
    with codec_core(_ccodec):
        listed = encode.encode_batch(vals, timestamps=stamps)
        assert listed == encode.encode_batch(vals, timestamps=column)
        strict = encode.encode_for_append(vals, None, None, stamps, PLAIN, None, encode.STRICT)
    with codec_core(None):
        assert listed == encode.encode_batch(vals, timestamps=stamps)
    plain = all(t >= 0 for t in (stamps if isinstance(stamps, list) else [stamps]))
    assert strict == (listed if plain else None)


def test_listed_encoder_gives_way() -> None:
    """encode_listed's None cases, for the general path to take (no exception raised)."""
    hdr = bytes(61)
    assert _ccodec.encode_listed([], None, None, 1, hdr, 0) is None
    assert _ccodec.encode_listed([b"a"], [b"k", b"l"], None, 1, hdr, 0) is None
    keys = iter([b"k"])  # nothing is consumed before giving way
    assert _ccodec.encode_listed([b"a"], keys, None, [1.5], hdr, 0) is None
    assert list(keys) == [b"k"]
    assert _ccodec.encode_listed(iter([b"a"]), None, None, 1, hdr, 0) is None
    assert _ccodec.encode_listed([b"a"], None, None, [1, 2], hdr, 0) is None
    assert _ccodec.encode_listed([b"a"], None, None, np.array([1]), hdr, 0) is None
    assert _ccodec.encode_listed([b"a"], None, None, [2**63], hdr, 0) is None
    assert _ccodec.encode_listed([b"a"], None, None, [-1], hdr, encode.STRICT) is None
    assert _ccodec.encode_listed(["a"], None, None, [1], hdr, encode.STRICT) is None
    assert _ccodec.encode_listed([b"a"], None, None, (True,), hdr, 0) is None
    with pytest.raises(TypeError, match="bytes-like or None, not str"):
        _ccodec.encode_listed(["a"], None, None, [1], hdr, 0)
    with pytest.raises(ValueError, match="61 bytes"):
        _ccodec.encode_listed([b"a"], None, None, [1], hdr[:60], 0)
    with codec_core(_ccodec):
        assert encode.encode_listed(_native.CORE, [b"a"], None, None, [1], PLAIN, 2**31, None,
                                    0) is None  # lastOffsetDelta beyond int32
        assert encode.encode_listed(_native.CORE, [b"a"], None, None, [1],
                                    BatchAttributes(producer_epoch=2**15), None, None,
                                    0) is None  # a header field out of range
