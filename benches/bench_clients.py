"""Producer and consumer throughput, side by side with SQLite in one run.

    python benches/bench_clients.py [--records 1000000] [--repeat 3] [--durable 2000]

Workloads (records of benches/compare.py: 8-16 B keys, 100 B values):
  send      producer.send() in a Python loop, partition given      >= 3x SQLite executemany
  send-key  the same, partition chosen by murmur2 over 4 partitions (informative)
  send-nokey  keyless records, sticky partitioner over 4 partitions (informative)
  poll      consumer.poll() loop over the records of "send"         >= 1.5x SQLite full scan
  iter      `for record in consumer` over the same records (informative)
  durable   producer durability="fsync", 1 thread vs 8 threads     8 threads >= 5x 1 thread
  wake      poll(timeout) wake-up after an append, median and p99 ms: writer in this process
            (within a few ms) and in another process, consumer on a read-only open (~50 ms)

Rates are records/s of wall time; ratios are taken within each repetition and the median is
printed. The machine is shared and noisy: trust the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedlog
from compare import Bench


class ClientBench(Bench):
    def send_loop(self, name: str, partitions: int, mode: str) -> float:
        path = self.fresh(name)
        with embedlog.open(path) as log:
            log.create_topic("t", partitions=partitions)
            producer = log.producer()
            send, keys, vals, ts = producer.send, self.keys, self.values, self.ts
            t0 = time.perf_counter()
            if mode == "partition":
                for i in range(self.n):
                    send("t", vals[i], key=keys[i], timestamp=ts[i], partition=0)
            elif mode == "key":
                for i in range(self.n):
                    send("t", vals[i], key=keys[i], timestamp=ts[i])
            else:
                for i in range(self.n):
                    send("t", vals[i], timestamp=ts[i])
            producer.flush()
            rate = self.n / (time.perf_counter() - t0)
            producer.close()
        return rate

    def poll_loop(self) -> float:
        with embedlog.open(os.path.join(self.workdir, "send"), read_only=True) as log:
            consumer = log.consumer("t")
            poll = consumer.poll
            t0 = time.perf_counter()
            count = 0
            while count < self.n:
                count += len(poll())
            rate = count / (time.perf_counter() - t0)
            consumer.close()
        return rate

    def iter_loop(self) -> float:
        with embedlog.open(os.path.join(self.workdir, "send"), read_only=True) as log:
            consumer = log.consumer("t")
            t0 = time.perf_counter()
            count = 0
            for _ in consumer:
                count += 1
                if count == self.n:
                    break
            rate = count / (time.perf_counter() - t0)
            consumer.close()
        return rate

    def durable(self, threads: int, per_thread: int) -> float:
        path = self.fresh(f"durable-{threads}")
        with embedlog.open(path) as log:
            log.create_topic("t")
            producer = log.producer(durability="fsync")
            rate = self.threaded(threads, per_thread, lambda i: producer.send(
                "t", self.values[i], key=self.keys[i], partition=0))
            producer.close()
        return rate


WAKE_WRITER = """
import struct, sys, time
sys.path.insert(0, {src!r})
import embedlog
with embedlog.open({path!r}) as log:
    for _ in range({n}):
        time.sleep(0.005)
        log.append("t", struct.pack(">d", time.monotonic()), key=b"k")
"""


def wake_latency(workdir: str, n: int, *, other_process: bool) -> tuple[float, float]:
    """(median, p99) ms from an append (value = its CLOCK_MONOTONIC time) to the return of
    the consumer's blocking poll."""
    path = os.path.join(workdir, f"wake-{other_process}")
    shutil.rmtree(path, ignore_errors=True)
    with embedlog.open(path) as log:
        log.create_topic("t")
    lat: list[float] = []

    def consume(log: embedlog.Log) -> None:
        consumer = log.consumer("t")
        while len(lat) < n:
            for r in consumer.poll(timeout=5):
                assert r.value is not None
                lat.append((time.monotonic() - struct.unpack(">d", r.value)[0]) * 1000)
        consumer.close()

    if other_process:
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        writer = subprocess.Popen([sys.executable, "-c",
                                   WAKE_WRITER.format(src=src, path=path, n=n)])
        with embedlog.open(path, read_only=True) as ro:
            consume(ro)
        writer.wait()
    else:
        with embedlog.open(path) as log:
            def write() -> None:
                for _ in range(n):
                    time.sleep(0.005)
                    log.append("t", struct.pack(">d", time.monotonic()), key=b"k")

            thread = threading.Thread(target=write)
            thread.start()
            consume(log)
            thread.join()
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--durable", type=int, default=2000, help="fsync'ed sends per run")
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="embedlog-clients-", dir=args.dir)
    b = ClientBench(args.records, workdir)
    rows: dict[str, list[float]] = {}

    def rec(name: str, fn: Callable[[], float]) -> float:
        value = fn()
        rows.setdefault(name, []).append(value)
        return value

    def ratio(name: str, value: float, base: float) -> None:
        rows.setdefault(name, []).append(value / base)

    try:
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            sql_w = rec("SQLite executemany", b.sqlite_write)
            sql_r = rec("SQLite full scan", b.sqlite_scan)
            ratio("send x SQLite executemany",
                  rec("producer.send, partition given", lambda: b.send_loop("send", 1,
                                                                          "partition")),
                  sql_w)
            rec("producer.send, murmur2 (4 partitions)", lambda: b.send_loop("send-key", 4,
                                                                             "key"))
            rec("producer.send, keyless sticky (4 p.)", lambda: b.send_loop("send-nokey", 4,
                                                                            "nokey"))
            ratio("poll x SQLite full scan", rec("consumer.poll loop", b.poll_loop), sql_r)
            rec("for record in consumer", b.iter_loop)
            one = rec("durable send, 1 thread", lambda: b.durable(1, args.durable))
            ratio("durable 8 threads / 1 thread",
                  rec("durable send, 8 threads", lambda: b.durable(8, args.durable // 2)), one)
            for other, where in ((False, "same process"), (True, "other process")):
                med, p99 = wake_latency(workdir, 200, other_process=other)
                rows.setdefault(f"wake ms median, {where}", []).append(med)
                rows.setdefault(f"wake ms p99, {where}", []).append(p99)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{args.records:,} records, median of {args.repeat}")
    for name, values in rows.items():
        value = statistics.median(values)
        unit = "x" if (" x " in name or "/" in name) else "ms" if " ms " in name else "rec/s"
        print(f"  {name:40s} {value:>14,.2f} {unit}")


if __name__ == "__main__":
    main()
