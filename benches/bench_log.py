"""pytest-benchmark benches of the log's append and read paths.

    pytest benches/bench_log.py --benchmark-only

Each bench works on 8-16 B random keys and 100 B random values; `compare.py` prints the same
paths side by side with SQLite and raw file writes.
"""

from __future__ import annotations

import itertools
import pathlib
import random
from collections.abc import Iterator

import pytest

import embedlog

N = 100_000


@pytest.fixture(scope="module")
def data() -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randint(8, 16)) for _ in range(N)]
    values = [rng.randbytes(100) for _ in range(N)]
    return keys, values


@pytest.fixture
def fresh(tmp_path: pathlib.Path) -> Iterator[embedlog.Log]:
    with embedlog.open(tmp_path / "log") as log:
        log.create_topic("t")
        yield log


@pytest.fixture(scope="module")
def filled(
    tmp_path_factory: pytest.TempPathFactory, data: tuple[list[bytes], list[bytes]]
) -> Iterator[embedlog.Log]:
    path = tmp_path_factory.mktemp("filled") / "log"
    keys, values = data
    with embedlog.open(path) as log:
        log.create_topic("t")
        for i in range(0, N, 1000):
            log.append_batch("t", values[i : i + 1000], keys=keys[i : i + 1000], partition=0)
    with embedlog.open(path, read_only=True) as ro:
        yield ro


def test_append_batch_1000(benchmark, fresh: embedlog.Log, data) -> None:  # type: ignore[no-untyped-def]
    keys, values = data
    benchmark(fresh.append_batch, "t", values[:1000], keys=keys[:1000], partition=0)


def test_append_one(benchmark, fresh: embedlog.Log, data) -> None:  # type: ignore[no-untyped-def]
    keys, values = data
    it = itertools.cycle(range(1000))

    def one() -> None:
        i = next(it)
        fresh.append("t", values[i], key=keys[i], partition=0)

    benchmark(one)


def test_full_scan_records(benchmark, filled: embedlog.Log) -> None:  # type: ignore[no-untyped-def]
    count = benchmark(lambda: sum(1 for _ in filled.read("t", 0)))
    assert count == N


def test_full_scan_columns(benchmark, filled: embedlog.Log) -> None:  # type: ignore[no-untyped-def]
    count = benchmark(lambda: sum(len(r) for r in filled.read_batches("t", 0)))
    assert count == N


def test_point_lookup(benchmark, filled: embedlog.Log) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(5)
    benchmark(lambda: next(filled.read("t", 0, rng.randrange(N), max_records=1)))


def test_offsets_for_times(benchmark, filled: embedlog.Log) -> None:  # type: ignore[no-untyped-def]
    first = next(filled.read("t", 0)).timestamp
    benchmark(filled.offsets_for_times, "t", 0, first)
