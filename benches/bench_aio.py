"""asyncio clients against the sync API, in one run: send and consume rates, the overhead per
record, and how late the event loop runs while the clients work.

    python benches/bench_aio.py [--records 200000] [--repeat 3] [--dir SCRATCH]

Records are 8-16 B random keys and 100 B values to one partition.

  S1  Producer.send loop + flush                       (sync baseline)
  S2  await AsyncProducer.send loop + flush            overhead per record reported
  C1  Consumer.poll loop                               (sync baseline)
  C2  async for over an AsyncConsumer                  overhead per record reported
  L0  loop lag with nothing else running in the process (the machine's noise floor)
  L1  loop lag while a getmany waits with nothing to read        target < 5 ms (max)
  L2  loop lag while 64 tasks send_and_wait with durability=fsync target < 5 ms (max)
  L3  loop lag while async for consumes at full speed            (reported)

Loop lag: a task sleeps 1 ms in a loop and records how much later than asked it woke; the max
and p99 over the phase are printed. Rates are records/s, medians of the repetitions. The
machine is shared and noisy: lag figures include other processes' CPU use.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import embedlog
from compare import make_records
from embedlog.aio import AsyncConsumer, AsyncProducer


class Lag:
    """Measures event-loop lateness while it is running (``async with Lag() as lag``)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.samples.append(max(0.0, time.perf_counter() - t0 - 0.001))

    async def __aenter__(self) -> Lag:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def summary(self) -> tuple[float, float]:
        """(max, p99) in ms."""
        s = sorted(self.samples) or [0.0]
        return s[-1] * 1000, s[int(0.99 * (len(s) - 1))] * 1000


def sync_send(path: str, recs: Any) -> float:
    keys, values, ts = recs
    with embedlog.open(path) as log:
        log.create_topic("t")
        with log.producer() as producer:
            t0 = time.perf_counter()
            for k, v, t in zip(keys, values, ts, strict=True):
                producer.send("t", v, key=k, timestamp=t, partition=0)
            producer.flush()
            return len(keys) / (time.perf_counter() - t0)


async def async_send(path: str, recs: Any) -> float:
    keys, values, ts = recs
    with embedlog.open(path) as log:
        log.create_topic("t")
        async with AsyncProducer(log) as producer:
            t0 = time.perf_counter()
            for k, v, t in zip(keys, values, ts, strict=True):
                await producer.send("t", v, key=k, timestamp_ms=t, partition=0)
            await producer.flush()
            return len(keys) / (time.perf_counter() - t0)


def sync_consume(path: str, n: int) -> float:
    with embedlog.open(path, read_only=True) as log, log.consumer("t") as consumer:
        t0 = time.perf_counter()
        count = 0
        while count < n:
            count += len(consumer.poll(1.0))
        return count / (time.perf_counter() - t0)


async def async_consume(path: str, n: int, lag: Lag | None = None) -> float:
    with embedlog.open(path, read_only=True) as log:
        async with AsyncConsumer(log, "t") as consumer:
            t0 = time.perf_counter()
            count = 0
            async for _ in consumer:
                count += 1
                if count >= n:
                    break
            return count / (time.perf_counter() - t0)


async def lag_idle() -> tuple[float, float]:
    """The noise floor: the same ticker with nothing else running in this process."""
    async with Lag() as lag:
        await asyncio.sleep(2)
    return lag.summary()


async def lag_waiting(path: str) -> tuple[float, float]:
    with embedlog.open(path) as log:
        log.create_topic("idle")
        async with AsyncConsumer(log, "idle") as consumer, Lag() as lag:
            await consumer.getmany(timeout_ms=2000)
        return lag.summary()


async def lag_fsync_sends(path: str, recs: Any, n: int) -> tuple[float, float, float]:
    keys, values, _ = recs
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t")
        async with AsyncProducer(log) as producer:
            async def sender(k: int) -> None:
                for i in range(k, n, 64):
                    await producer.send_and_wait("t", values[i], key=keys[i], partition=0)
            async with Lag() as lag:
                t0 = time.perf_counter()
                await asyncio.gather(*(sender(k) for k in range(64)))
                await producer.flush()
                rate = n / (time.perf_counter() - t0)
        return (*lag.summary(), rate)


async def lag_consuming(path: str, n: int) -> tuple[float, float]:
    async with Lag() as lag:
        await async_consume(path, n)
    return lag.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = parser.parse_args()
    n = args.records
    recs = make_records(n)
    workdir = tempfile.mkdtemp(prefix="embedlog-bench-aio-", dir=args.dir)
    rows: dict[str, list[float]] = {}

    def rec(name: str, value: float) -> float:
        rows.setdefault(name, []).append(value)
        return value

    def arun(fn: Callable[..., Awaitable[Any]], *a: Any) -> Any:
        return asyncio.run(fn(*a))

    try:
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            fresh = os.path.join(workdir, f"r{rep}")
            s1 = rec("S1 sync send rec/s", sync_send(fresh + "-sync", recs))
            s2 = rec("S2 async send rec/s", arun(async_send, fresh + "-async", recs))
            rec("S2-S1 send overhead us/rec", (1 / s2 - 1 / s1) * 1e6)
            c1 = rec("C1 sync consume rec/s", sync_consume(fresh + "-sync", n))
            c2 = rec("C2 async consume rec/s", arun(async_consume, fresh + "-sync", n))
            rec("C2-C1 consume overhead us/rec", (1 / c2 - 1 / c1) * 1e6)
            mx, p99 = arun(lag_idle)
            rec("L0 lag idle loop max ms (noise floor)", mx)
            rec("L0 lag idle loop p99 ms", p99)
            mx, p99 = arun(lag_waiting, fresh + "-idle")
            rec("L1 lag waiting max ms", mx)
            rec("L1 lag waiting p99 ms", p99)
            mx, p99, rate = arun(lag_fsync_sends, fresh + "-fsync", recs, min(n, 20_000))
            rec("L2 lag fsync sends max ms", mx)
            rec("L2 lag fsync sends p99 ms", p99)
            rec("L2 fsync send_and_wait x64 rec/s", rate)
            mx, p99 = arun(lag_consuming, fresh + "-sync", n)
            rec("L3 lag consuming max ms", mx)
            rec("L3 lag consuming p99 ms", p99)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    targets = {"L1 lag waiting max ms": 5.0, "L2 lag fsync sends max ms": 5.0}
    print(f"\n{n:,} records, median of {args.repeat}")
    for name, values in rows.items():
        value = statistics.median(values)
        line = f"  {name:36s} {value:>14,.2f}"
        if name in targets:
            line += f"   target < {targets[name]} {'met' if value < targets[name] else 'MISSED'}"
        print(line)


if __name__ == "__main__":
    main()
