"""Transactions per second and records per second of the transactional producer, durable.

    python benches/bench_txn.py [--seconds 3] [--partitions 1] [--only txn-1,plain-durable]

Workloads (100 B values, log durability "fsync"):
  txn-1, txn-10, txn-1000   transactions of 1, 10 and 1,000 records, each committed
                            (records written, partitions fsynced, prepare record, a marker
                            per partition, complete record)
  plain-durable             non-transactional durable sends: producer.send() + flush() per
                            record (one fsync per record), the baseline for txn-1
  plain-durable-batch       Log.append_batch() of 1,000 records to one partition (one batch,
                            one fsync), the baseline for txn-1000

Each workload runs for about ``--seconds``; rates are of wall time. The machine is shared and
noisy: compare rows of one run, not runs. ``fsyncs/step`` counts the file fsyncs and
``dirsyncs/step`` the directory fsyncs issued through ``embedlog._io`` per step (one
transaction, one flush or one batch), from a separate counted run of ``--count`` steps.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable

import embedlog
from embedlog import _io

VALUE = b"x" * 100


class _Counting(_io.FileSystem):
    """The production backend, counting file and directory fsyncs."""

    def __init__(self) -> None:
        self.fsyncs = self.dirsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.dirsyncs += 1
        super().fsync_dir(path)


_COUNT: list[int] = [0]
"""Steps of a counted run (set by ``--count``); 0 while timing."""
_COUNTED: dict[str, tuple[float, float]] = {}


def _timed(seconds: float, step: Callable[[], int]) -> tuple[int, int, float]:
    """Run ``step`` (returns records written) until ``seconds`` pass: (steps, records, s);
    in a counted run, ``_COUNT`` steps under a counting backend instead."""
    if _COUNT[0]:
        fs = _Counting()
        with _io.use_backend(fs):
            for _ in range(_COUNT[0]):
                step()
        _COUNTED["last"] = (fs.fsyncs / _COUNT[0], fs.dirsyncs / _COUNT[0])
        return _COUNT[0], 0, 1.0
    steps = records = 0
    t0 = time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        records += step()
        steps += 1
    return steps, records, elapsed


def txn(path: str, per_txn: int, partitions: int, seconds: float) -> tuple[int, int, float]:
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", partitions=partitions)
        p = log.producer(transactional_id="bench")
        p.init_transactions()

        def step() -> int:
            p.begin_transaction()
            for i in range(per_txn):
                p.send("t", VALUE, partition=i % partitions)
            p.commit_transaction()
            return per_txn

        return _timed(seconds, step)


def plain(path: str, per_flush: int, partitions: int, seconds: float
          ) -> tuple[int, int, float]:
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", partitions=partitions)
        p = log.producer()

        def step() -> int:
            for i in range(per_flush):
                p.send("t", VALUE, partition=i % partitions)
            p.flush()
            return per_flush

        try:
            return _timed(seconds, step)
        finally:
            p.close()


def plain_batch(path: str, per_batch: int, seconds: float) -> tuple[int, int, float]:
    with embedlog.open(path, durability="fsync") as log:
        log.create_topic("t", partitions=1)
        values = [VALUE] * per_batch

        def step() -> int:
            log.append_batch("t", values, partition=0)
            return per_batch

        return _timed(seconds, step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--count", type=int, default=20, help="steps of the fsync-counting run")
    ap.add_argument("--only", default="", help="comma-separated workloads to run (default all)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="embedlog-bench-txn-")
    runs: list[tuple[str, Callable[[str], tuple[int, int, float]]]] = [
        ("txn-1", lambda d: txn(d, 1, args.partitions, args.seconds)),
        ("txn-10", lambda d: txn(d, 10, args.partitions, args.seconds)),
        ("txn-1000", lambda d: txn(d, 1000, args.partitions, args.seconds)),
        ("plain-durable", lambda d: plain(d, 1, args.partitions, args.seconds)),
        ("plain-durable-batch", lambda d: plain_batch(d, 1000, args.seconds)),
    ]
    if args.only:
        runs = [r for r in runs if r[0] in args.only.split(",")]
    try:
        print(f"{'workload':<22}{'steps/s':>12}{'records/s':>14}{'fsyncs/step':>13}"
              f"{'dirsyncs/step':>15}")
        for name, fn in runs:
            steps, records, elapsed = fn(f"{root}/{name}")
            _COUNT[0] = args.count
            fn(f"{root}/{name}-counted")
            _COUNT[0] = 0
            fsyncs, dirsyncs = _COUNTED["last"]
            print(f"{name:<22}{steps / elapsed:>12.1f}{records / elapsed:>14.0f}"
                  f"{fsyncs:>13.1f}{dirsyncs:>15.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
