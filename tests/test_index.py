"""Tests of embedlog.index: OffsetIndex (.index) and TimeIndex (.timeindex).

The oracle, as in Kafka's OffsetIndexTest, is a plain sorted list searched with ``bisect``.
Real Kafka index files from /work/shared/fixtures/kafka-real are checked against their ``.log``.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import mmap
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles import Call, ScriptedFS
from embedlog import _io
from embedlog.errors import CorruptIndexError, ReadOnlyError, StorageError
from embedlog.index import OffsetIndex, TimeIndex

MiB = 1024 * 1024
FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "kafka-real"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="Kafka fixtures not present")

READ_MODES = [pytest.param(False, id="mmap"), pytest.param(True, id="copy")]


# ---------------------------------------------------------------- helpers


def offset_floor(entries: list[tuple[int, int]], base: int, target: int) -> tuple[int, int]:
    """Oracle: the last (offset, position) with offset <= target, else (base, 0)."""
    i = bisect.bisect_right([o for o, _ in entries], target)
    return entries[i - 1] if i else (base, 0)


def time_floor(entries: list[tuple[int, int]], base: int, target: int) -> int:
    """Oracle: offset of the last (timestamp, offset) with timestamp <= target, else base."""
    i = bisect.bisect_right([t for t, _ in entries], target)
    return entries[i - 1][1] if i else base


def write_offset_file(path: Path, rows: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in rows) + tail)


def write_time_file(path: Path, rows: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in rows) + tail)


def as_pairs(arr: np.ndarray) -> list[tuple[int, int]]:
    names = arr.dtype.names
    assert names is not None
    return [(int(row[names[0]]), int(row[names[1]])) for row in arr]


class Batch:
    """A v2 batch header located in a .log file."""

    def __init__(self, pos: int, base_offset: int, length: int, last_delta: int, max_ts: int):
        self.pos = pos
        self.base_offset = base_offset
        self.size = 12 + length
        self.last_offset = base_offset + last_delta
        self.max_ts = max_ts


def log_batches(log: Path) -> list[Batch]:
    """Walk a .log: baseOffset, batchLength at the batch start; next = pos + 12 + batchLength;
    lastOffsetDelta is the int32 at pos + 23, maxTimestamp the int64 at pos + 35."""
    data = log.read_bytes()
    out: list[Batch] = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        (max_ts,) = struct.unpack_from(">q", data, pos + 35)
        out.append(Batch(pos, base, length, last_delta, max_ts))
        pos += 12 + length
    assert pos == len(data), f"{log} does not end on a batch boundary"
    return out


@pytest.fixture
def recording() -> Iterator[ScriptedFS]:
    fs = ScriptedFS()
    with _io.use_backend(fs):
        yield fs


# ---------------------------------------------------------------- property tests (oracle)

offset_steps = st.lists(
    st.tuples(st.integers(1, 1000), st.integers(1, 100_000)), min_size=0, max_size=120
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.integers(0, 2**40), steps=offset_steps, data=st.data())
def test_offset_lookup_matches_bisect_oracle(
    base: int, steps: list[tuple[int, int]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.index")
        oracle: list[tuple[int, int]] = []
        off, pos = base, 0
        with OffsetIndex(path, base, writable=True, max_bytes=4096) as idx:
            for d_off, d_pos in steps:
                off, pos = off + d_off, pos + d_pos
                idx.append(off, pos)
                oracle.append((off, pos))
            last = off
            targets = {base - 1, base, last, last + 1, 2**70, -5}
            targets |= {o + k for o, _ in oracle for k in (-1, 0, 1)}
            targets |= set(data.draw(st.lists(st.integers(base - 10, last + 10), max_size=30)))
            assert len(idx) == len(oracle)
            assert idx.last_offset == (oracle[-1][0] if oracle else base)
            assert as_pairs(idx.entries()) == [(o - base, p) for o, p in oracle]
            for t in targets:
                assert idx.lookup(t) == offset_floor(oracle, base, t)
        # closed (trimmed): read back in both read-only modes
        assert os.path.getsize(path) == 8 * len(oracle)
        for copy in (False, True):
            with OffsetIndex(path, base, writable=False, copy=copy) as ro:
                assert len(ro) == len(oracle)
                ro.sanity_check(pos + 1)
                for t in targets:
                    assert ro.lookup(t) == offset_floor(oracle, base, t)


time_steps = st.lists(
    st.tuples(st.integers(-50, 1000), st.integers(0, 3)), min_size=0, max_size=120
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.integers(0, 2**40),
    start_ts=st.sampled_from([0, 1, 1_700_000_000_000]),
    steps=time_steps,
)
def test_time_lookup_matches_kafka_oracle(
    base: int, start_ts: int, steps: list[tuple[int, int]]
) -> None:
    """The oracle is Kafka's maybeAppend applied to a list (append iff ts > last ts)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.timeindex")
        kafka: list[tuple[int, int]] = []
        ts, off = start_ts, base
        with TimeIndex(path, base, writable=True, max_bytes=12 * 200) as idx:
            for d_ts, d_off in steps:
                ts, off = max(ts + d_ts, 0), off + d_off
                idx.maybe_append(ts, off)
                if ts > (kafka[-1][0] if kafka else -1):
                    kafka.append((ts, off))
                assert idx.last_entry() == (kafka[-1] if kafka else (-1, base))
            targets = {-1, 0, 2**70, -(2**70)} | {t + k for t, _ in kafka for k in (-1, 0, 1)}
            for t in targets:
                assert idx.lookup(t) == time_floor(kafka, base, t)
        for copy in (False, True):
            with TimeIndex(path, base, writable=False, copy=copy) as ro:
                ro.sanity_check(1)
                for t in targets:
                    assert ro.lookup(t) == time_floor(kafka, base, t)
                ts_col = ro.entries()["ts"]
                assert np.all(np.diff(ts_col.astype(np.int64)) > 0)


@settings(max_examples=150, deadline=None)
@given(
    blob=st.binary(max_size=200)
    | st.lists(st.tuples(st.integers(-3, 40), st.integers(-3, 400)), max_size=12).map(
        lambda rows: b"".join(struct.pack(">ii", r, p) for r, p in rows)
    ),
    kind=st.sampled_from([OffsetIndex, TimeIndex]),
    log_size=st.integers(0, 500),
)
def test_arbitrary_bytes_give_valid_entries_or_corrupt_index_error(
    blob: bytes, kind: type[OffsetIndex] | type[TimeIndex], log_size: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x" + (".index" if kind is OffsetIndex else ".timeindex"))
        with open(path, "wb") as f:
            f.write(blob)
        results = []
        for writable, copy in ((False, False), (False, True), (True, False)):
            with kind(path, 0, writable=writable, copy=copy, max_bytes=256) as idx:
                e = idx.entries()
                cols = [e[name].astype(np.int64) for name in e.dtype.names or ()]
                if kind is OffsetIndex:
                    assert np.all(cols[0] >= 0) and np.all(cols[1] >= 0)
                    assert np.all(np.diff(cols[0]) > 0) and np.all(np.diff(cols[1]) > 0)
                else:
                    assert np.all(cols[1] >= 0)
                    assert np.all(np.diff(cols[0]) > 0) and np.all(np.diff(cols[1]) >= 0)
                assert len(e) == 0 or any(e.tobytes()[: idx.ENTRY_SIZE])  # entry 0 not padding
                assert np.all(e["rel"][1:] != 0)  # no padding-looking entry after it
                with contextlib.suppress(CorruptIndexError):
                    idx.sanity_check(log_size)
                results.append(e.tobytes())
                idx.lookup(17)
        assert results[0] == results[1] == results[2]


# ---------------------------------------------------------------- offset index unit tests


def test_empty_index(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 500, writable=True)
    assert len(idx) == 0
    assert idx.last_offset == 500
    assert idx.lookup(0) == (500, 0)
    assert idx.lookup(500) == (500, 0)
    assert idx.lookup(10**9) == (500, 0)
    assert idx.entries().shape == (0,)
    assert not idx.is_full
    idx.close()
    assert os.path.getsize(tmp_path / "a.index") == 0
    ro = OffsetIndex(tmp_path / "a.index", 500, writable=False)  # 0-byte file: no mmap
    assert len(ro) == 0 and ro.lookup(7) == (500, 0)
    ro.sanity_check(0)
    ro.close()


def test_entries_dtype_and_big_endian_bytes(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    with OffsetIndex(p, 1000, writable=True) as idx:
        idx.append(1003, 4200)
        idx.append(1010, 9000)
        e = idx.entries()
        assert e.dtype == np.dtype([("rel", ">i4"), ("pos", ">i4")])
        assert as_pairs(e) == [(3, 4200), (10, 9000)]
    assert p.read_bytes() == bytes.fromhex("00000003 00001068 0000000a 00002328")
    tp = tmp_path / "a.timeindex"
    with TimeIndex(tp, 1000, writable=True) as ti:
        ti.maybe_append(1685814551582, 1017)
        assert ti.entries().dtype == np.dtype([("ts", ">i8"), ("rel", ">i4")])
    assert tp.read_bytes() == struct.pack(">qi", 1685814551582, 17)


def test_preallocated_sizes_match_kafka(tmp_path: Path) -> None:
    oi = OffsetIndex(tmp_path / "0.index", 0, writable=True)
    ti = TimeIndex(tmp_path / "0.timeindex", 0, writable=True)
    assert os.path.getsize(tmp_path / "0.index") == 10_485_760
    assert os.path.getsize(tmp_path / "0.timeindex") == 10_485_756
    assert oi.max_entries == 1_310_720
    assert ti.max_entries == 873_813
    oi.close()
    ti.close()
    # close trims, as Kafka's close does
    assert os.path.getsize(tmp_path / "0.index") == 0
    assert os.path.getsize(tmp_path / "0.timeindex") == 0


def test_full_index(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 0, writable=True, max_bytes=8 * 4 + 5)
    assert os.path.getsize(tmp_path / "a.index") == 32
    for i in range(1, 5):
        assert not idx.is_full
        idx.append(i, i * 100)
    assert idx.is_full
    with pytest.raises(ValueError, match="full"):
        idx.append(10, 1000)
    assert len(idx) == 4
    assert idx.lookup(100) == (4, 400)
    idx.close()


def test_out_of_order_append_raises(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "a.index", 100, writable=True)
    idx.append(110, 5000)
    for offset, position in [(110, 6000), (105, 6000), (120, 5000), (120, 4000)]:
        with pytest.raises(ValueError):
            idx.append(offset, position)
    with pytest.raises(ValueError):
        idx.append(99, 6000)  # below the base offset
    with pytest.raises(ValueError):
        idx.append(100 + 2**31, 6000)  # relative offset does not fit int32
    with pytest.raises(ValueError):
        idx.append(120, 2**31)  # position does not fit int32
    idx.append(100 + 2**31 - 1, 2**31 - 1)  # the largest representable entry
    assert idx.lookup(10**12) == (100 + 2**31 - 1, 2**31 - 1)
    assert len(idx) == 2
    idx.close()


def test_base_entry_is_implicit(tmp_path: Path) -> None:
    """(base, 0) would be an all-zero entry, which readers take for padding: not stored."""
    p = tmp_path / "a.index"
    with OffsetIndex(p, 7, writable=True) as idx:
        idx.append(7, 0)
        assert len(idx) == 0 and idx.lookup(7) == (7, 0)
        idx.append(9, 100)
        assert len(idx) == 1
    with OffsetIndex(p, 7, writable=False) as ro:
        assert as_pairs(ro.entries()) == [(2, 100)]


def test_truncate_to(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    idx = OffsetIndex(p, 1000, writable=True)
    rows = [(1000 + 10 * i, 4096 * i) for i in range(1, 21)]
    for o, pos in rows:
        idx.append(o, pos)
    idx.truncate_to(1105)  # keeps offsets < 1105
    assert idx.last_offset == 1100 and len(idx) == 10
    assert idx.lookup(1200) == (1100, 40960)
    idx.truncate_to(1100)  # drops the entry equal to the offset
    assert idx.last_offset == 1090 and len(idx) == 9
    idx.truncate_to(10**6)  # no-op
    assert len(idx) == 9
    # dropped entries are zeroed on disk, the file is not shrunk
    data = p.read_bytes()
    assert len(data) == 10 * MiB
    assert not any(data[9 * 8 :])
    idx.append(1095, 39000)  # appending continues after the truncation point
    assert idx.lookup(1099) == (1095, 39000)
    idx.truncate_to(0)
    assert len(idx) == 0 and idx.last_offset == 1000
    idx.flush()
    idx.close()


def test_reset(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    idx = OffsetIndex(p, 0, writable=True)
    for i in range(1, 50):
        idx.append(i, i * 10)
    idx.trim()
    idx.reset()
    assert len(idx) == 0 and idx.lookup(30) == (0, 0)
    assert not idx.is_full
    assert os.path.getsize(p) == 10 * MiB  # grown back like Kafka's reset()
    assert not any(p.read_bytes())
    idx.append(5, 50)
    idx.close()
    with OffsetIndex(p, 0, writable=False) as ro:
        assert as_pairs(ro.entries()) == [(5, 50)]


def test_trim_then_reopen_read_only_equals(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    idx = OffsetIndex(p, 42, writable=True)
    for i in range(1, 301):
        idx.append(42 + 3 * i, 97 * i)
    before = idx.entries()
    idx.trim()
    assert os.path.getsize(p) == 300 * 8
    assert idx.is_full  # Kafka: a trimmed index takes no more entries until resized
    with pytest.raises(ValueError, match="full"):
        idx.append(10**6, 10**6)
    for copy in (False, True):
        with OffsetIndex(p, 42, writable=False, copy=copy) as ro:
            assert np.array_equal(ro.entries(), before)
            for t in range(30, 1000, 7):
                assert ro.lookup(t) == idx.lookup(t)
    idx.resize(10 * MiB)
    assert os.path.getsize(p) == 10 * MiB and not idx.is_full
    idx.append(10**6, 10**6)
    idx.close()
    assert os.path.getsize(p) == 301 * 8


def test_reopen_writable_after_crash_recovers_entries(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    crash = tmp_path / "crash.index"
    idx = OffsetIndex(p, 0, writable=True)
    rows = [(5 * i, 1000 * i) for i in range(1, 101)]
    for o, pos in rows:
        idx.append(o, pos)
    idx.flush()
    shutil.copyfile(p, crash)  # the file as a crash leaves it: entries, then zeros
    idx.close()
    assert os.path.getsize(crash) == 10 * MiB
    re = OffsetIndex(crash, 0, writable=True)
    assert os.path.getsize(crash) == 10 * MiB
    assert len(re) == 100
    assert as_pairs(re.entries()) == rows
    re.sanity_check(101 * 1000)
    re.append(505, 101_000)
    assert re.lookup(600) == (505, 101_000)
    re.close()
    # a trimmed file reopened writable is pre-allocated again (Kafka's resizeIndexes)
    re2 = OffsetIndex(crash, 0, writable=True)
    assert os.path.getsize(crash) == 10 * MiB and len(re2) == 101
    re2.close()


@pytest.mark.parametrize("copy", READ_MODES)
def test_zero_padded_tail_tolerated(tmp_path: Path, copy: bool) -> None:
    p = tmp_path / "a.index"
    rows = [(3, 100), (8, 4300), (20, 9000)]
    write_offset_file(p, rows, tail=bytes(8 * 1000))
    with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
        assert as_pairs(ro.entries()) == rows
        ro.sanity_check(9001)
        assert ro.lookup(10) == (8, 4300)
    with OffsetIndex(p, 0, writable=True, max_bytes=8 * 2000) as rw:
        assert as_pairs(rw.entries()) == rows
        rw.sanity_check(9001)


@pytest.mark.parametrize("copy", READ_MODES)
def test_non_multiple_length_rounded_down(tmp_path: Path, copy: bool) -> None:
    p = tmp_path / "a.index"
    rows = [(3, 100), (8, 4300)]
    write_offset_file(p, rows, tail=b"\x00\x00\x01")
    with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
        assert as_pairs(ro.entries()) == rows
        with pytest.raises(CorruptIndexError) as info:
            ro.sanity_check(10**6)  # strict, like Kafka's sanityCheck
        assert info.value.path == str(p) and info.value.position == 16
    tp = tmp_path / "a.timeindex"
    write_time_file(tp, [(10, 1), (20, 5)], tail=b"\x07" * 11)
    with TimeIndex(tp, 0, writable=False, copy=copy) as ti:
        assert as_pairs(ti.entries()) == [(10, 1), (20, 5)]
        with pytest.raises(CorruptIndexError):
            ti.sanity_check(100)


def test_writable_open_cleans_stale_bytes(tmp_path: Path) -> None:
    """Stale bytes after the valid entries are zeroed at once, so a later append cannot
    resurrect them; sanity_check reports the damage until reset()."""
    p = tmp_path / "a.index"
    rows = [(3, 100), (8, 4300)]
    write_offset_file(p, [*rows, (0, 0), (50, 90_000)], tail=b"\x01\x02")
    idx = OffsetIndex(p, 0, writable=True, max_bytes=8 * 100)
    assert as_pairs(idx.entries()) == rows
    assert os.path.getsize(p) == 800
    assert not any(p.read_bytes()[16:])
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(10**6)
    idx.append(9, 5000)
    idx.append(10, 6000)
    idx.close()
    with OffsetIndex(p, 0, writable=False) as ro:
        assert as_pairs(ro.entries()) == [*rows, (9, 5000), (10, 6000)]
        ro.sanity_check(10**6)


def test_writable_open_cleans_stale_bytes_past_a_hole(tmp_path: Path) -> None:
    """A sparse pre-allocated file with stray data far into its zero tail."""
    p = tmp_path / "a.timeindex"
    rows = [(1000, 1), (2000, 4)]
    write_time_file(p, rows)
    with open(p, "r+b") as f:
        f.seek(5 * MiB + 4)
        f.write(struct.pack(">qi", 9999, 77))
        f.truncate(10_485_756)
    with TimeIndex(p, 0, writable=False) as ro, pytest.raises(CorruptIndexError) as info:
        assert as_pairs(ro.entries()) == rows
        ro.sanity_check(100)
    assert info.value.position == 5 * MiB + 4 + 6  # first non-zero byte of the stray entry
    with TimeIndex(p, 0, writable=True) as rw:
        assert as_pairs(rw.entries()) == rows
        assert os.path.getsize(p) == 10_485_756 and not any(p.read_bytes()[24:])
        with pytest.raises(CorruptIndexError):
            rw.sanity_check(100)


def test_writable_open_of_large_file(tmp_path: Path) -> None:
    """More valid entries than the first 64 KiB read."""
    p = tmp_path / "a.index"
    n = 20_000
    arr = np.zeros(n + 100, dtype=OffsetIndex.DTYPE)
    arr["rel"][:n] = np.arange(1, n + 1) * 2
    arr["pos"][:n] = np.arange(1, n + 1) * 50
    arr.tofile(p)
    with OffsetIndex(p, 10, writable=True) as idx:
        assert len(idx) == n and idx.last_offset == 10 + 2 * n
        assert idx.lookup(10 + 2 * 12_345 + 1) == (10 + 2 * 12_345, 50 * 12_345)
        idx.sanity_check(50 * n + 1)
        idx.append(10 + 2 * n + 1, 50 * n + 1)
    assert os.path.getsize(p) == 8 * (n + 1)


@pytest.mark.parametrize("copy", READ_MODES)
def test_sanity_check(tmp_path: Path, copy: bool) -> None:
    p = tmp_path / "a.index"
    write_offset_file(p, [(1, 100), (5, 200), (9, 300)])
    with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
        ro.sanity_check(301)
        with pytest.raises(CorruptIndexError) as info:
            ro.sanity_check(300)  # position 300 is not inside a 300-byte log
        assert info.value.position == 16 and "beyond the log size" in str(info.value)
        with pytest.raises(CorruptIndexError):
            ro.sanity_check(0)
    # a decreasing entry: the reader stops before it, sanity_check reports it
    for bad in ([(1, 100), (5, 200), (3, 300), (9, 400)], [(1, 100), (5, 200), (6, 150)]):
        write_offset_file(p, bad)
        with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
            assert len(ro) == 2
            with pytest.raises(CorruptIndexError) as info:
                ro.sanity_check(10**6)
            assert info.value.position == 16
    # a negative relative offset in entry 0
    write_offset_file(p, [(-1, 100), (5, 200)])
    with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
        assert len(ro) == 0
        with pytest.raises(CorruptIndexError):
            ro.sanity_check(10**6)
    # data after the zero padding
    write_offset_file(p, [(1, 100), (0, 0), (7, 700)])
    with OffsetIndex(p, 0, writable=False, copy=copy) as ro:
        assert len(ro) == 1
        with pytest.raises(CorruptIndexError):
            ro.sanity_check(10**6)


def test_writable_sanity_check_and_reset(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    write_offset_file(p, [(1, 100), (5, 200), (3, 300)])
    idx = OffsetIndex(p, 0, writable=True, max_bytes=800)
    assert len(idx) == 2
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(10**6)
    idx.reset()  # the rebuild path
    idx.sanity_check(10**6)
    idx.append(2, 150)
    idx.sanity_check(151)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(150)
    idx.close()


@pytest.mark.parametrize("size,cls", [(10_485_760, OffsetIndex), (10_485_756, TimeIndex)])
def test_all_zero_preallocated_file_has_no_entries(
    tmp_path: Path, size: int, cls: type[OffsetIndex] | type[TimeIndex]
) -> None:
    """Kafka's active-segment index files of a live broker: 10 MiB of zeros."""
    p = tmp_path / ("0" + (".index" if cls is OffsetIndex else ".timeindex"))
    with open(p, "wb") as f:
        f.truncate(size)
    for copy in (False, True):
        with cls(p, 0, writable=False, copy=copy) as ro:
            assert len(ro) == 0
            ro.sanity_check(0)
    with cls(p, 0, writable=True) as rw:
        assert len(rw) == 0 and os.path.getsize(p) == size


def test_copy_mode_equals_mmap_mode_and_survives_shrink(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    writer = OffsetIndex(p, 0, writable=True)
    rows = [(7 * i, 333 * i) for i in range(1, 2001)]
    for o, pos in rows:
        writer.append(o, pos)
    with OffsetIndex(p, 0, writable=False, copy=False) as mm:
        copied = OffsetIndex(p, 0, writable=False, copy=True)
        assert np.array_equal(mm.entries(), copied.entries())
        for t in range(-3, 14_100, 13):
            assert mm.lookup(t) == copied.lookup(t)
    writer.close()  # trims: a mapping of the old 10 MiB would now be beyond EOF
    writer = OffsetIndex(p, 0, writable=True)
    writer.truncate_to(0)
    writer.trim()  # shrink to 0 bytes under the copy=True reader
    assert os.path.getsize(p) == 0
    assert len(copied) == 2000 and copied.lookup(700) == (700, 33_300)
    copied.close()
    writer.close()


def test_read_only_rejects_mutation(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    write_offset_file(p, [(1, 10)])
    with OffsetIndex(p, 0, writable=False) as ro:
        calls: list[Callable[[], object]] = [
            lambda: ro.append(5, 50),
            lambda: ro.truncate_to(0),
            ro.reset,
            ro.trim,
            lambda: ro.resize(100),
        ]
        for call in calls:
            with pytest.raises(ReadOnlyError):
                call()
        ro.flush()  # nothing to flush: a no-op
    tp = tmp_path / "a.timeindex"
    write_time_file(tp, [(5, 1)])
    with TimeIndex(tp, 0, writable=False) as ti, pytest.raises(ReadOnlyError):
        ti.maybe_append(10, 2)


def test_close_is_idempotent_and_releases_mmap(tmp_path: Path) -> None:
    p = tmp_path / "a.index"
    write_offset_file(p, [(i, 10 * i) for i in range(1, 100)])
    ro = OffsetIndex(p, 0, writable=False)
    assert ro._mmap is not None
    held = ro.entries()  # a copy: must not pin the mapping
    ro.lookup(50)
    ro.sanity_check(10**6)
    ro.close()
    assert ro._mmap is None and ro.closed
    ro.close()
    assert int(held["pos"][-1]) == 990
    with pytest.raises(ValueError, match="closed"):
        ro.lookup(5)
    with pytest.raises(ValueError, match="closed"):
        ro.entries()
    rw = OffsetIndex(tmp_path / "b.index", 0, writable=True)
    rw.close()
    rw.close()
    with pytest.raises(ValueError, match="closed"):
        rw.append(1, 1)


def test_writer_never_maps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_mmap(*args: object, **kwargs: object) -> None:
        raise AssertionError("a writable index must not mmap its file")

    monkeypatch.setattr(mmap, "mmap", no_mmap)
    p = tmp_path / "a.index"
    write_offset_file(p, [(1, 10), (2, 20)], tail=bytes(80))
    with OffsetIndex(p, 0, writable=True) as idx:
        idx.append(3, 30)
        assert idx.lookup(3) == (3, 30)
        idx.truncate_to(2)
        idx.trim()
        idx.resize(4096)
    with TimeIndex(tmp_path / "a.timeindex", 0, writable=True) as ti:
        ti.maybe_append(5, 1)


def test_mutations_go_through_io_layer(tmp_path: Path, recording: ScriptedFS) -> None:
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, 100, writable=True)
    idx.append(105, 4200)
    idx.append(110, 8400)
    idx.flush()
    idx.truncate_to(110)
    idx.close()
    path = str(p)
    assert recording.calls == [
        Call("open", path, flags=os.O_RDWR | os.O_CREAT),
        Call("truncate", path, size=10_485_760),
        Call("pwrite", path, offset=0, data=struct.pack(">ii", 5, 4200)),
        Call("pwrite", path, offset=8, data=struct.pack(">ii", 10, 8400)),
        Call("fsync", path),
        Call("pwrite", path, offset=8, data=bytes(8)),
        Call("truncate", path, size=8),
        Call("close", path),
    ]
    recording.calls.clear()
    for copy in (False, True):
        with OffsetIndex(p, 100, writable=False, copy=copy) as ro:
            assert ro.lookup(107) == (105, 4200)
            ro.sanity_check(10_000)
    assert recording.calls == []  # readers never even open through the door


def test_errors_and_validation(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as info:
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert info.value.errno == errno.ENOENT
    fs = ScriptedFS()
    fs.fail("truncate", code=errno.ENOSPC, persistent=True)
    with _io.use_backend(fs), pytest.raises(StorageError) as failed:
        OffsetIndex(tmp_path / "a.index", 0, writable=True)
    assert failed.value.errno == errno.ENOSPC
    assert [c.op for c in fs.calls] == ["open", "truncate", "close"]  # the fd is not leaked
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "b.index", -1, writable=True)
    with pytest.raises(ValueError):
        TimeIndex(tmp_path / "b.timeindex", 0, writable=True, max_bytes=-1)
    with OffsetIndex(tmp_path / "c.index", 3, writable=True, max_bytes=64) as idx:
        assert repr(idx).endswith("base_offset=3, writable, 0 entries)")
        assert idx.file_size == 64
        with pytest.raises(ValueError):
            idx.resize(-8)
        with pytest.raises(ValueError):
            idx.sanity_check(-1)
    assert "closed" in repr(idx)
    ti = TimeIndex(tmp_path / "c.timeindex", 3, writable=True)
    for i in range(1, 6):
        ti.maybe_append(10 * i, 3 + i)
    ti.truncate_to(2**40)  # beyond the relative range: keeps everything
    assert len(ti) == 5
    ti.truncate_to(3)
    assert len(ti) == 0 and ti.last_entry() == (-1, 3)
    ti.close()
    with pytest.raises(ValueError, match="closed"):
        ti.lookup(5)


# ---------------------------------------------------------------- time index unit tests


def test_time_index_basics(tmp_path: Path) -> None:
    p = tmp_path / "a.timeindex"
    ti = TimeIndex(p, 50, writable=True)
    assert ti.last_entry() == (-1, 50)
    assert ti.lookup(10**15) == 50
    ti.maybe_append(1000, 55)
    ti.maybe_append(1000, 60)  # not newer: ignored
    ti.maybe_append(900, 61)  # older: ignored
    ti.maybe_append(2000, 61)
    ti.maybe_append(3000, 61)  # same offset, newer timestamp: appended (offsets non-decreasing)
    assert ti.last_entry() == (3000, 61)
    assert as_pairs(ti.entries()) == [(1000, 5), (2000, 11), (3000, 11)]
    with pytest.raises(ValueError):
        ti.maybe_append(4000, 60)  # offset going backwards
    with pytest.raises(ValueError):
        ti.maybe_append(500, 60)  # even when the timestamp would be ignored (Kafka checks first)
    with pytest.raises(ValueError):
        ti.maybe_append(2**63, 70)
    with pytest.raises(ValueError):
        ti.maybe_append(5000, 50 + 2**31)
    assert ti.lookup(999) == 50
    assert ti.lookup(1000) == 55
    assert ti.lookup(2500) == 61
    ti.truncate_to(61)
    assert ti.last_entry() == (1000, 55)
    ti.close()
    assert p.read_bytes() == struct.pack(">qi", 1000, 5)


def test_time_index_full_keeps_one_reserved_slot(tmp_path: Path) -> None:
    p = tmp_path / "a.timeindex"
    ti = TimeIndex(p, 0, writable=True, max_bytes=12 * 4 + 11)
    assert os.path.getsize(p) == 48 and ti.max_entries == 4
    for i in range(1, 4):
        assert not ti.is_full
        ti.maybe_append(100 * i, i)
    assert ti.is_full and len(ti) == 3
    with pytest.raises(ValueError, match="full"):
        ti.maybe_append(400, 4)
    ti.maybe_append(400, 4, skip_full_check=True)  # the final entry on roll
    assert len(ti) == 4
    with pytest.raises(ValueError):
        ti.maybe_append(500, 5, skip_full_check=True)
    ti.close()
    with TimeIndex(p, 0, writable=False) as ro:
        assert as_pairs(ro.entries()) == [(100, 1), (200, 2), (300, 3), (400, 4)]


def test_time_index_relative_offset_zero_entries(tmp_path: Path) -> None:
    """Only entry 0 may have relative offset 0 (a later one reads as padding)."""
    p = tmp_path / "a.timeindex"
    ti = TimeIndex(p, 9, writable=True)
    ti.maybe_append(0, 9)  # all-zero bytes: not stored, remembered in memory
    assert len(ti) == 0 and ti.last_entry() == (0, 9)
    ti.maybe_append(0, 12)  # not newer than the remembered entry
    assert len(ti) == 0
    ti.maybe_append(70, 9)
    ti.maybe_append(80, 9)  # replaces entry 0: same lookups as Kafka's two entries
    assert as_pairs(ti.entries()) == [(80, 0)] and ti.last_entry() == (80, 9)
    ti.maybe_append(90, 10)
    for t in (-1, 0, 70, 75, 80, 85, 90, 100):
        assert ti.lookup(t) == time_floor([(0, 9), (70, 9), (80, 9), (90, 10)], 9, t)
    ti.close()
    with TimeIndex(p, 9, writable=False) as ro:
        assert as_pairs(ro.entries()) == [(80, 0), (90, 1)]


def test_time_index_reader_rule(tmp_path: Path) -> None:
    p = tmp_path / "a.timeindex"
    # entry 0 with relative offset 0 and a real timestamp is an entry, not padding
    write_time_file(p, [(1670071252901, 0)], tail=bytes(12 * 10))
    with TimeIndex(p, 0, writable=False) as ro:
        assert as_pairs(ro.entries()) == [(1670071252901, 0)]
        ro.sanity_check(100)
        with pytest.raises(CorruptIndexError):
            ro.sanity_check(0)  # entries for an empty log
    # timestamps must strictly increase, offsets must not decrease
    for bad in ([(10, 1), (10, 2)], [(10, 2), (20, 1)], [(10, 1), (5, 3)]):
        write_time_file(p, [(1, 0), *bad])
        with TimeIndex(p, 0, writable=False, copy=True) as ro:
            assert len(ro) == 2
            with pytest.raises(CorruptIndexError) as info:
                ro.sanity_check(100)
            assert info.value.position == 24
    write_time_file(p, [(10, 1), (20, 1), (30, 4)])  # equal offsets are fine
    with TimeIndex(p, 0, writable=False) as ro:
        assert len(ro) == 3
        ro.sanity_check(100)


def test_time_index_reset_trim_resize(tmp_path: Path) -> None:
    p = tmp_path / "a.timeindex"
    ti = TimeIndex(p, 0, writable=True)
    for i in range(1, 11):
        ti.maybe_append(1000 * i, i)
    ti.trim()
    assert os.path.getsize(p) == 120 and ti.is_full
    ti.resize(10 * MiB)
    assert os.path.getsize(p) == 10_485_756 and not ti.is_full
    ti.reset()
    assert len(ti) == 0 and ti.last_entry() == (-1, 0)
    assert not any(p.read_bytes())
    ti.close()


# ---------------------------------------------------------------- real Kafka files


def check_offset_index_against_log(idx: OffsetIndex, batches: list[Batch]) -> None:
    """Every entry points at a batch start whose last offset is the entry's offset."""
    by_pos = {b.pos: b for b in batches}
    for rel, pos in as_pairs(idx.entries()):
        assert pos in by_pos, f"position {pos} is not a batch start"
        assert by_pos[pos].last_offset == idx.base_offset + rel


def check_time_index_against_log(idx: TimeIndex, batches: list[Batch]) -> None:
    """Every entry's offset is the last offset of a batch, and its timestamp is the largest
    batch max timestamp up to and including that batch (Kafka's maxTimestampSoFar)."""
    running = -1
    max_so_far: dict[int, int] = {}
    for b in batches:
        running = max(running, b.max_ts)
        max_so_far[b.last_offset] = running
    for ts, rel in as_pairs(idx.entries()):
        offset = idx.base_offset + rel
        assert offset in max_so_far, f"offset {offset} is not a batch's last offset"
        assert ts == max_so_far[offset]


def fixture_index_files() -> list[Path]:
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".index", ".timeindex"))


@needs_fixtures
@pytest.mark.parametrize("path", fixture_index_files(), ids=lambda p: str(p.relative_to(FIXTURES)))
@pytest.mark.parametrize("copy", READ_MODES)
def test_real_kafka_index_files(path: Path, copy: bool) -> None:
    base = int(path.stem)
    log = path.with_suffix(".log")
    batches = log_batches(log)
    log_size = log.stat().st_size
    if path.suffix == ".index":
        with OffsetIndex(path, base, writable=False, copy=copy) as oi:
            assert len(oi) == path.stat().st_size // 8
            oi.sanity_check(log_size)
            check_offset_index_against_log(oi, batches)
    else:
        with TimeIndex(path, base, writable=False, copy=copy) as ti:
            assert len(ti) == path.stat().st_size // 12
            ti.sanity_check(log_size)
            check_time_index_against_log(ti, batches)


@needs_fixtures
def test_real_kafka27_compacted_timeindex() -> None:
    d = FIXTURES / "kafka27-compacted-multiseg" / "__consumer_offsets-39"
    with TimeIndex(d / "00000000000000000000.timeindex", 0, writable=False) as ti:
        assert as_pairs(ti.entries()) == [(1685814551582, 17)]
        assert ti.last_entry() == (1685814551582, 17)
        assert ti.lookup(1685814551581) == 0
        assert ti.lookup(1685814551582) == 17
    with OffsetIndex(d / "00000000000000000000.index", 0, writable=False) as oi:
        assert len(oi) == 0 and oi.lookup(17) == (0, 0)  # 0-byte rolled-segment index


@needs_fixtures
def test_rebuild_index_of_real_kafka30_log(tmp_path: Path) -> None:
    """Index the real 298 KB __consumer_offsets-13 segment the way Kafka's recovery does
    (an entry when more than index.interval.bytes = 4096 were appended since the last one),
    then check every entry against the log and every offset's lookup."""
    log = FIXTURES / "kafka30-multipartition" / "__consumer_offsets-13" / "00000000000000000000.log"
    batches = log_batches(log)
    assert len(batches) == 1339
    oi = OffsetIndex(tmp_path / "0.index", 0, writable=True)
    ti = TimeIndex(tmp_path / "0.timeindex", 0, writable=True)
    valid_bytes = last_entry_pos = 0
    max_ts, offset_of_max = -1, -1
    for b in batches:
        if b.max_ts > max_ts:
            max_ts, offset_of_max = b.max_ts, b.last_offset
        if valid_bytes - last_entry_pos > 4096:
            oi.append(b.last_offset, valid_bytes)
            ti.maybe_append(max_ts, offset_of_max)
            last_entry_pos = valid_bytes
        valid_bytes += b.size
    ti.maybe_append(max_ts, offset_of_max, skip_full_check=True)  # roll / close
    oi.close()
    ti.close()
    assert 60 <= os.path.getsize(tmp_path / "0.index") // 8 <= 73
    with (
        OffsetIndex(tmp_path / "0.index", 0, writable=False) as ro,
        TimeIndex(tmp_path / "0.timeindex", 0, writable=False) as rt,
    ):
        ro.sanity_check(log.stat().st_size)
        rt.sanity_check(log.stat().st_size)
        check_offset_index_against_log(ro, batches)
        check_time_index_against_log(rt, batches)
        assert rt.last_entry()[0] == max(b.max_ts for b in batches)
        starts = [b.pos for b in batches]
        for b in batches:
            for offset in (b.base_offset, b.last_offset):
                found, pos = ro.lookup(offset)
                assert found <= offset and pos <= b.pos and pos in starts
                # the scan from pos reaches the batch holding `offset` (floor property)
                scan = next(x for x in batches if x.pos >= pos and x.last_offset >= offset)
                assert scan is b
        for b in batches:
            # the first batch whose max timestamp >= target is at or after the lookup's offset
            start = rt.lookup(b.max_ts)
            hit = next(x for x in batches if x.max_ts >= b.max_ts)
            assert start <= hit.last_offset


@needs_fixtures
def test_live_broker_directory_active_indexes(tmp_path: Path) -> None:
    """Recreate a live broker's active segment: the real .log plus all-zero 10 MiB indexes."""
    src = FIXTURES / "kafka27-compacted-multiseg" / "__consumer_offsets-39"
    log = tmp_path / "00000000000000000018.log"
    shutil.copyfile(src / log.name, log)
    for suffix, size in ((".index", 10_485_760), (".timeindex", 10_485_756)):
        with open(log.with_suffix(suffix), "wb") as f:
            f.truncate(size)
    with OffsetIndex(log.with_suffix(".index"), 18, writable=False) as oi:
        assert len(oi) == 0 and oi.lookup(19) == (18, 0)
        oi.sanity_check(log.stat().st_size)
    with TimeIndex(log.with_suffix(".timeindex"), 18, writable=False, copy=True) as ti:
        assert len(ti) == 0 and ti.lookup(10**13) == 18
        ti.sanity_check(log.stat().st_size)
