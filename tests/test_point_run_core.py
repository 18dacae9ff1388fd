"""The compiled point read of a remembered run (``_ccodec.point_run``: the file's identity
checked, one ``pread``, the records built) against its pure twin
(:func:`embedlog.segment.point_read.point_run`, then :func:`run_records`): the same records,
the same refusals (a file of another identity, a short read) and the same errors, for runs cut
from every kind of batch, damaged or not, at any place in a file."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import embedlog
from embedlog.segment import _native, point_memo, point_read
from embedlog.segment import format as fmt
from embedlog.segment.crc_memo import identity
from embedlog.segment.run_records import run_records
from helpers import both_cores
from test_codec_core import _damage, batches, cut_run

_ccodec = pytest.importorskip("embedlog.segment._ccodec")


@pytest.fixture(scope="module")
def fd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One scratch file, rewritten by each example."""
    path = tmp_path_factory.mktemp("point-run") / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    yield fd
    os.close(fd)


def _point(fd: int, ident: Any, start: int, length: int, n: int,
           header: fmt.BatchHeader) -> Any:
    """What a point read makes of the run at ``start`` (as ``remembered_records`` does with
    either core): the records, or None (another file identity, a short read)."""
    core = _native.CORE
    if core is None:
        got = point_read.point_run(fd, ident, start, length)
    else:
        got = core.point_run(fd, ident, start, length, n, point_memo.header_fields(header),
                             embedlog.Record, "t", 3)
    if got is None or isinstance(got, list):
        return got
    return run_records(got, n, header, 1000, "t", 3)


def _write(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@given(batches(), st.integers(0, 6), st.integers(0, 10**6), st.binary(min_size=1, max_size=12),
       st.integers(0, 30), st.integers(0, 30), st.integers(-2, 2), st.integers(0, 300),
       st.integers(-3, 3), st.sampled_from([0, 0, 0, 1, 2, 3]))
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_point_run_identical(fd: int, args: dict[str, Any], how: int, at: int, blob: bytes,
                             lo: int, k: int, n_extra: int, lead: int, length_lie: int,
                             ident_lie: int) -> None:
    """Records ``[lo, lo + k)`` of a batch's records section, damaged unless ``how`` >= 5,
    behind ``lead`` bytes of a file, read back with a length off by ``length_lie`` (past the
    end: a short read), a count off by ``n_extra`` and an identity off in field
    ``ident_lie - 1`` (0: the file's own): both cores give the same outcome; an intact run
    of the file's identity gives the records of the whole batch's decode."""
    batch, header, lo, hi, run = cut_run(args, lo, k)
    run = run if how >= 5 else _damage(run, how, at, blob)
    assume(run)
    _write(fd, bytes(lead) + run + blob)
    length = max(1, len(run) + (length_lie if length_lie < 0 else length_lie * 1000))
    ident = list(identity(fd))
    if ident_lie:
        ident[ident_lie - 1] += 1
    n = max(0, hi - lo + n_extra)
    c, py = both_cores(_ccodec, lambda: _point(fd, tuple(ident), lead, length, n, header))
    assert c == py
    if how >= 5 and not ident_lie and length_lie == 0 and n_extra == 0:
        cut = fmt.decode_records(batch, 0, header).slice(lo, hi)
        assert c == cut.records("t", 3, header.timestamp_type)
    if ident_lie or length_lie > 0:
        assert c is None


def test_point_run_errors_match(tmp_path: pathlib.Path) -> None:
    """A closed descriptor: OSError from either core (``fstat`` refuses it first); arguments
    the compiled call cannot take raise there before any I/O."""
    path = tmp_path / "f"
    batch = fmt.encode_batch([b"v%d" % i for i in range(20)], timestamps=7)
    path.write_bytes(batch)
    header = fmt.parse_header(batch, 0)
    fd = os.open(path, os.O_RDONLY)
    ident = identity(fd)
    fields = point_memo.header_fields(header)
    records = _ccodec.point_run(fd, ident, fmt.HEADER_SIZE, len(batch) - fmt.HEADER_SIZE, 20,
                                fields, embedlog.Record, "t", 3)
    assert records == fmt.decode_records(batch, 0, header).records("t", 3, 0)
    for bad in ((fd, ident, -1, 5), (fd, ident, 0, 0), (-1, ident, 0, 5)):
        with pytest.raises(ValueError):
            _ccodec.point_run(*bad, 1, fields, embedlog.Record, "t", 3)
    with pytest.raises(TypeError):
        _ccodec.point_run(fd, ident, 0, 5, 1, fields[:5], embedlog.Record, "t", 3)
    with pytest.raises(TypeError):
        _ccodec.point_run(fd, ident, 0, 5, 1, fields, dict, "t", 3)  # not a Record type
    os.close(fd)
    c, py = both_cores(_ccodec, lambda: _point(fd, ident, 0, 5, 1, header))
    assert c[:2] == py[:2] == ("raised", OSError)


def _drain(make: Any) -> list[Any]:
    """Everything an iterator gives, each ``next()`` noted: an item, the exception it raised
    (type and message), or its end; two more ``next()`` after the first end or exception."""
    it, out, ended = make(), [], 0
    while ended < 3:
        try:
            out.append(("item", next(it)))
        except StopIteration:
            out.append(("end",))
            ended += 1
        except Exception as e:
            out.append(("raised", type(e), str(e)))
            ended += 1
    return out


@given(st.lists(st.integers(), max_size=5), st.integers(-1, 6), st.sampled_from(
    ["list", "generator", "not iterable", "fn raises"]))
@settings(max_examples=200, deadline=None)
def test_deferred_is_yield_from(items: list[int], fail_at: int, kind: str) -> None:
    """``_ccodec.deferred(fn, args)`` and its pure twin give what ``yield from fn(*args)``
    gives: the items, an exception of ``fn`` or of its iterator (which ends the iteration),
    nothing before the first ``next()``."""
    calls: list[tuple[Any, ...]] = []

    def fn(*args: Any) -> Any:
        calls.append(args)
        if kind == "fn raises":
            raise OSError(5, "fn failed")
        if kind == "not iterable":
            return 42
        if kind == "list":
            return list(items)
        return (x if i != fail_at else 1 // 0 for i, x in enumerate(items))

    def reference() -> Any:
        yield from fn(1, "a")

    want = _drain(reference)
    for make in (lambda: _ccodec.deferred(fn, (1, "a")),
                 lambda: point_read.deferred(fn, (1, "a"))):
        calls.clear()
        it = make()
        assert calls == [] and iter(it) is it
        del it
        assert calls == []
        assert _drain(make) == want
        assert calls == [(1, "a")]


def test_deferred_refuses_other_arguments_and_is_collected() -> None:
    with pytest.raises(TypeError):
        _ccodec.deferred(len, [1])  # args must be a tuple
    with pytest.raises(TypeError):
        _ccodec.deferred(42, ())
    import gc
    import weakref

    class Holder:
        pass

    holder = Holder()
    holder.it = _ccodec.deferred(lambda h: [h], (holder,))  # type: ignore[attr-defined]
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None  # the cycle through the iterator's arguments is collected


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), st.integers(-(2**63), 2**63 - 1))
@settings(max_examples=300, deadline=None)
def test_floor_index_is_bisect_right_minus_one(items: list[int], value: int) -> None:
    """The memo's search by offset: the compiled ``floor_index`` over an int64 array gives
    what its pure twin (``bisect_right - 1``) gives, for values inside, between and outside
    the items."""
    from array import array
    bases = array("q", sorted(items))
    for v in (value, *bases, *(b - 1 for b in bases if b > -(2**63))):
        assert _ccodec.floor_index(bases, v) == point_memo.floor_index(bases, v)


def test_floor_index_takes_only_int64() -> None:
    from array import array
    with pytest.raises(TypeError):
        _ccodec.floor_index(array("i", [1, 2]), 1)
    with pytest.raises(TypeError):
        _ccodec.floor_index([1, 2], 1)  # not a buffer
    with pytest.raises(OverflowError):
        _ccodec.floor_index(array("q", [1]), 2**63)
    assert _ccodec.floor_index(array("q"), 5) == -1
