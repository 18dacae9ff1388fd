"""Cross-process wake-ups: how soon a consumer of a read-only open sees a record another process
appended, and what waiting costs the process and its event loop.

    python benches/bench_wake.py [--records 200] [--gap-ms 25] [--repeat 3] [--dir SCRATCH]

A writer process appends one record every ``gap`` ms (+-40 % jitter), each carrying the
``time.monotonic()`` of just before its ``append`` call (``CLOCK_MONOTONIC`` is one clock for
all processes of the machine). The reader, in this process, takes it and records how late:

  L0  the 1 ms ticker alone: the loop lag of the machine's noise (max / p99 ms)
  W1  Consumer.poll(timeout=5) loop                    wake-up latency p50 / p99 (ms)
  W2  AsyncConsumer.getone() loop                      wake-up latency p50 / p99 (ms), and the
                                                       lag of a 1 ms ticker on the same loop
  I1  sync consumer blocked in poll(timeout=2), nothing arrives: CPU ms used per second
  I3  as I1, reading a topic of 32 partitions
  I2  AsyncConsumer.getmany(timeout_ms=2000), nothing arrives: CPU ms per second; then
      once more with the ticker running: its lag (max / p99 ms)

Loop lag: a task sleeps 1 ms in a loop and records how much later than asked it woke. Figures
are medians over the repetitions. The machine is shared: lag and latency include other
processes' CPU use; report them with ``uptime``'s load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import embedlog
from bench_aio import Lag
from embedlog.aio import AsyncConsumer

WRITER = textwrap.dedent("""
    import random, struct, sys, time, embedlog
    path, topic, n, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with embedlog.open(path) as log:
        print("ready", flush=True)
        sys.stdin.readline()
        for _ in range(n):
            time.sleep(gap * random.uniform(0.6, 1.4))
            log.append(topic, struct.pack("<d", time.monotonic()), partition=0)
""")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] * 1000


def start_writer(path: str, topic: str, n: int, gap: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, topic, str(n), str(gap)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def latency(record: Any) -> float:
    (sent,) = struct.unpack("<d", record.value)
    return float(time.monotonic() - sent)


def sync_wakeups(path: str, topic: str, n: int, gap: float) -> list[float]:
    proc = start_writer(path, topic, n, gap)
    out: list[float] = []
    try:
        with embedlog.open(path, read_only=True) as log, log.consumer(topic) as consumer:
            consumer.poll(0)
            go(proc)
            while len(out) < n:
                records = consumer.poll(timeout=5)
                assert records, "the writer stopped"
                out += [latency(r) for r in records]
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
    return out


async def async_wakeups(path: str, topic: str, n: int, gap: float
                        ) -> tuple[list[float], tuple[float, float]]:
    proc = start_writer(path, topic, n, gap)
    out: list[float] = []
    try:
        with embedlog.open(path, read_only=True) as log:
            async with AsyncConsumer(log, topic) as consumer:
                await consumer.getmany(timeout_ms=0)
                async with Lag() as lag:
                    go(proc)
                    while len(out) < n:
                        out.append(latency(await consumer.getone()))
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
    return out, lag.summary()


def sync_idle(path: str, topic: str) -> float:
    with embedlog.open(path, read_only=True) as log, log.consumer(topic) as consumer:
        consumer.poll(0)
        c0, t0 = time.process_time(), time.monotonic()
        assert consumer.poll(timeout=2) == []
        return (time.process_time() - c0) / (time.monotonic() - t0) * 1000


async def async_idle(path: str, topic: str) -> tuple[float, float, float]:
    with embedlog.open(path, read_only=True) as log:
        async with AsyncConsumer(log, topic) as consumer:
            await consumer.getmany(timeout_ms=0)
            c0, t0 = time.process_time(), time.monotonic()
            assert await consumer.getmany(timeout_ms=2000) == {}
            cpu = (time.process_time() - c0) / (time.monotonic() - t0) * 1000
            async with Lag() as lag:
                assert await consumer.getmany(timeout_ms=2000) == {}
    return (cpu, *lag.summary())


async def idle_lag() -> tuple[float, float]:
    async with Lag() as lag:
        await asyncio.sleep(2)
    return lag.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=25.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = parser.parse_args()
    n, gap = args.records, args.gap_ms / 1000
    workdir = tempfile.mkdtemp(prefix="embedlog-bench-wake-", dir=args.dir)
    path = os.path.join(workdir, "log")
    rows: dict[str, list[float]] = {}

    def rec(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    try:
        with embedlog.open(path) as log:
            for rep in range(args.repeat):
                for t in ("sync", "async", "idle"):
                    log.create_topic(f"{t}{rep}")
                log.create_topic(f"wide{rep}", partitions=32)
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            mx, p99 = asyncio.run(idle_lag())
            rec("L0 idle loop lag max ms", mx)
            rec("L0 idle loop lag p99 ms", p99)
            lat = sync_wakeups(path, f"sync{rep}", n, gap)
            rec("W1 sync poll latency p50 ms", pct(lat, 0.5))
            rec("W1 sync poll latency p99 ms", pct(lat, 0.99))
            lat, (mx, p99) = asyncio.run(async_wakeups(path, f"async{rep}", n, gap))
            rec("W2 async getone latency p50 ms", pct(lat, 0.5))
            rec("W2 async getone latency p99 ms", pct(lat, 0.99))
            rec("W2 loop lag max ms", mx)
            rec("W2 loop lag p99 ms", p99)
            rec("I1 sync idle wait CPU ms/s", sync_idle(path, f"idle{rep}"))
            rec("I3 sync idle x32 parts CPU ms/s", sync_idle(path, f"wide{rep}"))
            cpu, mx, p99 = asyncio.run(async_idle(path, f"idle{rep}"))
            rec("I2 async idle wait CPU ms/s", cpu)
            rec("I2 loop lag max ms", mx)
            rec("I2 loop lag p99 ms", p99)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{n} records every {args.gap_ms:g} ms (+-40 %), median of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, values in rows.items():
        print(f"  {name:34s} {statistics.median(values):>10,.2f}")


if __name__ == "__main__":
    main()
