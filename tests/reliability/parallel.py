"""Fan work out over forked worker processes (the suites are CPU-bound; CI has two cores)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

__all__ = ["first_failure", "pmap", "run_shards", "workers"]

T = TypeVar("T")
R = TypeVar("R")


def workers() -> int:
    """``EMBEDLOG_WORKERS`` if set, else the CPU count capped at 2."""
    env = os.environ.get("EMBEDLOG_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(2, os.cpu_count() or 1))


def pmap(fn: Callable[[T], R], items: Iterable[T], *, stop: Callable[[R], bool] | None = None
         ) -> Iterator[R]:
    """``fn`` over ``items`` in worker processes, results in completion order; once ``stop``
    returns true for a result, the remaining work is abandoned."""
    jobs = list(items)
    n = min(workers(), len(jobs)) or 1
    if n == 1:
        for job in jobs:
            res = fn(job)
            yield res
            if stop is not None and stop(res):
                return
        return
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(n) as pool:
        for res in pool.imap_unordered(fn, jobs):
            yield res
            if stop is not None and stop(res):
                pool.terminate()
                return


def first_failure(checked: Iterable[tuple[str, list[str]]]) -> tuple[int, list[str]]:
    """A worker's share of crash states, ``(where, problems)`` each: how many it checked
    before the first failure, and that failure (none: ``[]``)."""
    states = 0
    for where, found in checked:
        states += 1
        if found:
            return states, [f"{where}: {' | '.join(found)}"]
    return states, []


def run_shards(shard: Callable[[tuple[int, int]], tuple[int, list[str]]]) -> int:
    """``shard((index, count))`` over the worker processes (each checks every ``count``-th
    state from ``index``, giving how many it checked and its first failure); asserts that none
    failed and returns how many states were checked."""
    n = workers()
    states = 0
    for count, failures in pmap(shard, [(i, n) for i in range(n)], stop=lambda r: bool(r[1])):
        assert not failures, failures[0]
        states += count
    return states
