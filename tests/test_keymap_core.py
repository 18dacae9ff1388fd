"""The compiled key digests and key map against their numpy reference (digest.py,
offset_map.py): identical digests bit for bit, identical map contents and lookups, identical
errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedlog.compaction import _native
from embedlog.compaction.digest import Digester, padded
from embedlog.compaction.offset_map import OffsetMap

CORE = _native.CORE
T = TypeVar("T")
pytestmark = pytest.mark.skipif(CORE is None, reason="the compiled key map is not built")


def _layout(keys: list[bytes], gaps: list[int]) -> tuple[bytes, np.ndarray, np.ndarray]:
    data, pos = bytearray(), []
    for k, g in zip(keys, gaps, strict=True):
        data += bytes(g)
        pos.append(len(data))
        data += k
    return bytes(data), np.array(pos, np.int64), np.array([len(k) for k in keys], np.int64)


def _both(fn: Callable[[], T]) -> tuple[T, T]:
    """``fn()`` with the compiled key map, then with the numpy reference."""
    got = fn()
    saved = _native.CORE
    _native.CORE = None
    try:
        want = fn()
    finally:
        _native.CORE = saved
    return got, want


keys_st = st.lists(st.binary(max_size=40), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(keys=keys_st, seed=st.integers(0, 2**128 - 1), data=st.data())
def test_digests_equal_the_reference(keys: list[bytes], seed: int, data: st.DataObject) -> None:
    gaps = data.draw(st.lists(st.integers(0, 9), min_size=len(keys), max_size=len(keys)))
    buf, pos, lens = _layout(keys, gaps)
    d = Digester(seed)
    (g0, g1), (w0, w1) = _both(lambda: d.digests(padded(buf), pos, lens))
    assert g0.tolist() == w0.tolist() and g1.tolist() == w1.tolist()
    # equal keys give equal digests, in both
    firsts: dict[bytes, int] = {}
    for i, k in enumerate(keys):
        j = firsts.setdefault(k, i)
        assert (g0[i], g1[i]) == (g0[j], g1[j])


def test_a_key_past_the_buffer_is_the_same_error() -> None:
    d = Digester(7)
    buf = padded(b"abcdefgh")
    for pos, lens in (([4], [12]), ([0], [17]), ([9], [1])):
        errors = []
        for core in (CORE, None):
            _native.CORE = core
            try:
                with pytest.raises(ValueError) as exc:
                    d.digests(buf, np.array(pos, np.int64), np.array(lens, np.int64))
                errors.append(str(exc.value))
            finally:
                _native.CORE = CORE
        assert errors[0] == errors[1]


ops_st = st.lists(
    st.tuples(st.lists(st.integers(0, 300), min_size=0, max_size=80),
              st.lists(st.integers(0, 10**6), min_size=80, max_size=80)),
    min_size=1, max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops_st, budget=st.integers(16, 600), grow=st.booleans())
def test_the_map_holds_what_the_reference_holds(ops: list[tuple[list[int], list[int]]],
                                               budget: int, grow: bool) -> None:
    """Same puts (with duplicates within and across calls, growth, a full table refused) give
    the same size, the same offsets per key and the same latest_offsets."""
    def run() -> tuple[int, list[int], list[int], list[str]]:
        m = OffsetMap(24 * budget, initial_entries=4)
        errors = []
        for ids, offsets in ops:
            k = np.array(ids, np.uint64)
            lane0, lane1 = k * np.uint64(0x9E3779B97F4A7C15), k ^ np.uint64(12345)
            if grow:
                m.grow(m.size + len(ids))
            try:
                m.put(lane0, lane1, np.array(offsets[: len(ids)], np.int64))
            except ValueError as exc:
                errors.append(str(exc))
        probe = np.arange(0, 320, dtype=np.uint64)
        got = m.get(probe * np.uint64(0x9E3779B97F4A7C15), probe ^ np.uint64(12345))
        return m.size, got.tolist(), m.latest_offsets().tolist(), errors
    got, want = _both(run)
    assert got == want


def test_a_full_table_is_refused_by_the_core() -> None:
    m = OffsetMap(24 * 16)
    lane = np.arange(1, 20, dtype=np.uint64)
    assert CORE is not None
    with pytest.raises(ValueError, match="full"):
        CORE.put(m._lane0, m._lane1, m._value, lane, lane, lane.astype(np.int64))
    with pytest.raises(ValueError, match="wrong item size or length"):
        CORE.put(m._lane0, m._lane1, m._value, lane, lane[:3], lane.astype(np.int64))
