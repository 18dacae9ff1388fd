"""pytest-benchmark: floor lookups in a 1M-entry offset index (and a 1M-entry time index).

    pytest benches/bench_index.py --benchmark-only

The index files are built once per module with numpy (1,000,000 entries, relative offsets
3, 6, 9, ..., positions 1000, 2000, ...), then looked up at pseudo-random targets, cycling over
a fixed list so each round is one ``lookup`` call. Variants: read-only ``mmap``, read-only
``copy=True`` and writable (in-memory array), plus the cost of opening (reader-rule scan) the
1M-entry file.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embedlog.index import OffsetIndex, TimeIndex

N = 1_000_000
BASE = 5_000_000_000
STEP = 3


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("bench_index")
    i = np.arange(1, N + 1, dtype=np.int64)
    off = np.zeros(N, dtype=OffsetIndex.DTYPE)
    off["rel"] = i * STEP
    off["pos"] = i * 1000
    off.tofile(d / "00000000005000000000.index")
    tim = np.zeros(N, dtype=TimeIndex.DTYPE)
    tim["ts"] = 1_700_000_000_000 + i * 10
    tim["rel"] = i * STEP
    tim.tofile(d / "00000000005000000000.timeindex")
    return d / "00000000005000000000.index", d / "00000000005000000000.timeindex"


def _targets(lo: int, hi: int) -> Iterator[int]:
    rng = random.Random(1234)
    return itertools.cycle([rng.randrange(lo, hi) for _ in range(4096)])


@pytest.mark.parametrize("mode", ["mmap", "copy", "writable"], ids=["mmap", "copy", "writable"])
def test_offset_floor_lookup_1m(benchmark: Any, files: tuple[Path, Path], mode: str) -> None:
    path = files[0]
    if mode == "writable":
        # writable mode would pre-allocate: give it room for the existing 1M entries
        idx = OffsetIndex(path, BASE, writable=True, max_bytes=8 * (N + 1))
    else:
        idx = OffsetIndex(path, BASE, writable=False, copy=(mode == "copy"))
    try:
        assert len(idx) == N
        targets = _targets(BASE, BASE + STEP * N + 10)
        idx.lookup(BASE)  # build the native key cache outside the timed loop
        result = benchmark(lambda: idx.lookup(next(targets)))
        assert result[0] >= BASE
        assert idx.lookup(BASE + 3 * 500_000 + 1) == (BASE + 3 * 500_000, 500_000_000)
    finally:
        idx.close()  # a writer trims back to the 1M entries on close


def test_time_floor_lookup_1m(benchmark: Any, files: tuple[Path, Path]) -> None:
    with TimeIndex(files[1], BASE, writable=False) as idx:
        assert len(idx) == N
        targets = _targets(1_700_000_000_000, 1_700_000_000_000 + 10 * N + 100)
        idx.lookup(0)
        result = benchmark(lambda: idx.lookup(next(targets)))
        assert result >= BASE


def test_open_1m_entry_index(benchmark: Any, files: tuple[Path, Path]) -> None:
    """Opening applies the reader rule (vectorised scan) over all 1M entries."""

    def open_and_close() -> int:
        with OffsetIndex(files[0], BASE, writable=False) as idx:
            return len(idx)

    assert benchmark(open_and_close) == N
