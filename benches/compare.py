"""Side-by-side benchmark: embedlog vs SQLite vs raw file writes, in one run.

    python benches/compare.py [--records 1000000] [--repeat 3] [--only W1,R1,...] [--json out.json]
                              [--pure]

Every workload writes or reads the same records (8-16 B random keys, 100 B random values, int64
ms timestamps) through embedlog and, where a baseline makes sense, through SQLite (WAL,
synchronous=NORMAL, executemany, 10k rows per transaction) and plain buffered file writes of the
same bytes. W3 (durable writes from 8 threads against 1) has two baselines of its own: a bare
group commit in Python threads over ``pwrite`` + ``fsync`` (what the threading pattern reaches
on the machine, with no log behind it) and SQLite committing every insert
(``synchronous=FULL``). Rates are records/s; ratios are taken within each repetition and the
median is printed. The machine is shared and noisy: trust ratios, not the third digit.

The summary ends with every row's target (:data:`TARGETS`, from the project's performance
notes) and whether this run met it, with the codec core that ran (``--pure`` re-runs the whole
benchmark in a child with ``EMBEDLOG_PURE=1``, the pure-Python codec). S1 (Spark) is measured by
``benches/bench_spark.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import embedlog

BATCH = 1000

TARGETS: dict[str, tuple[str, float, bool]] = {
    # row: (what, bound, higher is better)
    "W1 x SQLite": ("append_batch 1,000/call x SQLite executemany", 20.0, True),
    "W2 x SQLite": ("append() loop x SQLite executemany (no target)", 0.0, True),
    "W2p x SQLite": ("producer.send loop x SQLite executemany", 3.0, True),
    "W3 8 threads / 1 thread": ("durable append(), 8 threads / 1", 5.0, True),
    "W3p 8 threads / 1 thread": ("durable producer.send, 8 threads / 1", 5.0, True),
    "W3 raw 8 threads / 1 thread": ("bare group commit in Python (no target)", 0.0, True),
    "W3 SQLite 8 threads / 1 thread": ("SQLite FULL commits, 8 threads / 1 (no target)", 0.0,
                                       True),
    "R1 x SQLite": ("full scan into Records x SQLite full scan", 2.5, True),
    "R2 x SQLite": ("columnar scan x SQLite full scan", 10.0, True),
    "L1 SQLite/embedlog p50": ("point read p50: SQLite p50 / embedlog p50", 1.0, True),
    "C1 compaction rec/s": ("compaction input records/s, 100,000 keys", 3_000_000.0, True),
    "O1 open 1000 segments s": ("open a clean log with 1,000 segments, s", 0.5, False),
}


def make_records(n: int, seed: int = 1) -> tuple[list[bytes], list[bytes], list[int]]:
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(8, 16)) for _ in range(n)]
    vals = [rng.randbytes(100) for _ in range(n)]
    ts = [1_700_000_000_000 + i for i in range(n)]
    return keys, vals, ts


class Bench:
    def __init__(self, n: int, workdir: str):
        self.n = n
        self.workdir = workdir
        self.keys, self.values, self.ts = make_records(n)
        self.payload = sum(len(k) + len(v) for k, v in zip(self.keys, self.values, strict=True))

    def fresh(self, name: str) -> str:
        """A path in the scratch folder with nothing at it (file or folder)."""
        path = os.path.join(self.workdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        for leftover in (path, path + "-wal", path + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        return path

    # -------------------------------------------------------------- baselines

    def raw_write(self) -> float:
        path = self.fresh("raw.bin")
        t0 = time.perf_counter()
        with open(path, "wb", buffering=1 << 20) as f:
            for i in range(0, self.n, BATCH):
                f.write(b"".join(self.keys[i : i + BATCH]) + b"".join(self.values[i : i + BATCH]))
        return self.n / (time.perf_counter() - t0)

    def sqlite_db(self) -> sqlite3.Connection:
        path = self.fresh("sqlite.db")
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE log (offset INTEGER PRIMARY KEY, ts INTEGER, key BLOB, value BLOB)"
        )
        return db

    def sqlite_write(self) -> float:
        db = self.sqlite_db()
        t0 = time.perf_counter()
        for i in range(0, self.n, 10_000):
            rows = zip(range(i, i + 10_000), self.ts[i : i + 10_000],
                       self.keys[i : i + 10_000], self.values[i : i + 10_000], strict=False)
            with db:
                db.executemany("INSERT INTO log VALUES (?, ?, ?, ?)", rows)
        rate = self.n / (time.perf_counter() - t0)
        db.close()
        return rate

    def sqlite_scan(self) -> float:
        db = sqlite3.connect(os.path.join(self.workdir, "sqlite.db"))
        t0 = time.perf_counter()
        count = 0
        for _ in db.execute("SELECT offset, ts, key, value FROM log ORDER BY offset"):
            count += 1
        rate = count / (time.perf_counter() - t0)
        db.close()
        return rate

    def threaded(self, threads: int, per_thread: int, call: Callable[[int], object]) -> float:
        """Records/s of ``threads`` threads each making ``per_thread`` calls ``call(i)``."""
        def work() -> None:
            for i in range(per_thread):
                call(i)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return threads * per_thread / (time.perf_counter() - t0)

    def raw_group_commit(self, threads: int, per_thread: int) -> float:
        """W3's floor on this machine: a bare group commit in Python threads. A caller with no
        round in flight leads: one ``pwrite`` of its record and every parked caller's, one
        ``fsync``, then it wakes them (each parked on a lock of its own) and hands the lead to
        the first caller that arrived meanwhile. No log, no index, no encoding."""
        fd = os.open(self.fresh("raw-gc.bin"), os.O_WRONLY | os.O_CREAT, 0o644)
        mutex, parked, state = threading.Lock(), [], {"leading": False, "end": 0}

        def append(i: int) -> None:
            record = self.keys[i] + self.values[i]
            with mutex:
                entry = None
                if state["leading"]:
                    entry = [threading.Lock(), False, record]
                    entry[0].acquire()
                    parked.append(entry)
                state["leading"] = True
            if entry is not None:
                entry[0].acquire()  # woken: covered, or to lead
                if entry[1]:
                    return
            with mutex:
                taken = parked[:]
                del parked[:]
            data = b"".join([record, *(e[2] for e in taken)])
            os.pwrite(fd, data, state["end"])
            state["end"] += len(data)
            os.fsync(fd)
            with mutex:
                nxt = parked.pop(0) if parked else None
                state["leading"] = nxt is not None
            for e in taken:
                e[1] = True
                e[0].release()
            if nxt is not None:
                nxt[0].release()

        try:
            return self.threaded(threads, per_thread, append)
        finally:
            os.close(fd)

    def sqlite_durable(self, threads: int, per_thread: int) -> float:
        """SQLite committing every insert (WAL, ``synchronous=FULL``), one connection shared
        under a lock (SQLite has one writer at a time)."""
        db = sqlite3.connect(self.fresh("sqlite-durable.db"), check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE log (ts INTEGER, key BLOB, value BLOB)")
        lock = threading.Lock()

        def insert(i: int) -> None:
            with lock, db:
                db.execute("INSERT INTO log VALUES (?, ?, ?)",
                           (self.ts[i], self.keys[i], self.values[i]))

        try:
            return self.threaded(threads, per_thread, insert)
        finally:
            db.close()

    def sqlite_lookup_p50_us(self, probes: int = 20_000) -> float:
        db = sqlite3.connect(os.path.join(self.workdir, "sqlite.db"))
        rng = random.Random(7)
        lat = []
        for _ in range(probes):
            o = rng.randrange(self.n)
            t0 = time.perf_counter_ns()
            db.execute("SELECT offset, ts, key, value FROM log WHERE offset=?", (o,)).fetchone()
            lat.append(time.perf_counter_ns() - t0)
        db.close()
        return statistics.median(lat) / 1000

    # -------------------------------------------------------------- embedlog

    def el_batch_append(self) -> float:
        path = self.fresh("el-batch")
        with embedlog.open(path) as log:
            log.create_topic("t")
            t0 = time.perf_counter()
            for i in range(0, self.n, BATCH):
                log.append_batch("t", self.values[i : i + BATCH], keys=self.keys[i : i + BATCH],
                                 timestamps=self.ts[i : i + BATCH], partition=0)
            rate = self.n / (time.perf_counter() - t0)
        return rate

    def el_append_loop(self) -> float:
        path = self.fresh("el-loop")
        n = min(self.n, 200_000)
        with embedlog.open(path) as log:
            log.create_topic("t")
            append, keys, vals, ts = log.append, self.keys, self.values, self.ts
            t0 = time.perf_counter()
            for i in range(n):
                append("t", vals[i], key=keys[i], timestamp=ts[i], partition=0)
            return n / (time.perf_counter() - t0)

    def el_producer_loop(self) -> float:
        path = self.fresh("el-prod")
        with embedlog.open(path) as log:
            log.create_topic("t")
            producer = log.producer()
            send, keys, vals, ts = producer.send, self.keys, self.values, self.ts
            t0 = time.perf_counter()
            for i in range(self.n):
                send("t", vals[i], key=keys[i], timestamp=ts[i], partition=0)
            producer.flush()
            rate = self.n / (time.perf_counter() - t0)
            producer.close()
        return rate

    def el_scan_records(self) -> float:
        with embedlog.open(os.path.join(self.workdir, "el-batch"), read_only=True) as log:
            t0 = time.perf_counter()
            count = 0
            for _ in log.read("t", 0):
                count += 1
            return count / (time.perf_counter() - t0)

    def el_scan_columns(self) -> float:
        with embedlog.open(os.path.join(self.workdir, "el-batch"), read_only=True) as log:
            t0 = time.perf_counter()
            count = 0
            for records in log.read_batches("t", 0):
                count += len(records.values())
            return count / (time.perf_counter() - t0)

    def el_lookup_p50_us(self, probes: int = 20_000) -> float:
        with embedlog.open(os.path.join(self.workdir, "el-batch"), read_only=True) as log:
            rng = random.Random(7)
            lat = []
            for _ in range(probes):
                o = rng.randrange(self.n)
                t0 = time.perf_counter_ns()
                next(log.read("t", 0, o, max_records=1))
                lat.append(time.perf_counter_ns() - t0)
        return statistics.median(lat) / 1000

    def el_durable(self, threads: int, per_thread: int) -> float:
        path = self.fresh(f"el-durable-{threads}")
        with embedlog.open(path, durability="fsync") as log:
            log.create_topic("t")
            return self.threaded(threads, per_thread, lambda i: log.append(
                "t", self.values[i], key=self.keys[i], partition=0))

    def el_durable_producer(self, threads: int, per_thread: int) -> float:
        path = self.fresh(f"el-durable-p{threads}")
        with embedlog.open(path, durability="fsync") as log:
            log.create_topic("t")
            producer = log.producer()
            rate = self.threaded(threads, per_thread, lambda i: producer.send(
                "t", self.values[i], key=self.keys[i], partition=0))
            producer.close()
            return rate

    def el_compact(self, keys: int = 100_000) -> float:
        path = self.fresh("el-compact")
        rng = random.Random(3)
        with embedlog.open(path) as log:
            log.create_topic("t", config={"cleanup.policy": "compact"})
            for i in range(0, self.n, BATCH):
                chunk = self.values[i : i + BATCH]
                log.append_batch("t", chunk, keys=[b"key-%07d" % rng.randrange(keys)
                                                   for _ in chunk], partition=0)
            log.roll("t", 0)
            t0 = time.perf_counter()
            stats = log.compact("t")
            return stats.records_read / (time.perf_counter() - t0)

    def el_open_1000_segments(self) -> float:
        path = self.fresh("el-open")
        with embedlog.open(path) as log:
            log.create_topic("t", config={"segment.bytes": 1024 * 1024})
            for _ in range(1000):
                log.append_batch("t", self.values[:100], partition=0)
                log.roll("t", 0)
        t0 = time.perf_counter()
        with embedlog.open(path) as log:
            elapsed = time.perf_counter() - t0
            assert len(log.segments("t", 0)) >= 1000
        return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="embedlog-bench-", dir=args.dir)
    only = set(args.only.split(",")) if args.only else None
    b = Bench(args.records, workdir)
    rows: dict[str, list[float]] = {}

    def rec(name: str, fn: Callable[[], float]) -> float:
        value = fn()
        rows.setdefault(name, []).append(value)
        return value

    def want(tag: str) -> bool:
        return only is None or tag in only

    def ratio(name: str, value: float, base: float) -> None:
        rows.setdefault(name, []).append(value / base)

    try:
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            raw = rec("raw file write", b.raw_write)
            sql_w = rec("SQLite executemany", b.sqlite_write)
            sql_r = rec("SQLite full scan", b.sqlite_scan)
            w1 = rec("W1 append_batch", b.el_batch_append)
            ratio("W1 x SQLite", w1, sql_w)
            ratio("W1 x raw", w1, raw)
            if want("W2"):
                ratio("W2 x SQLite", rec("W2 append loop", b.el_append_loop), sql_w)
            if want("W2p") and hasattr(embedlog.Log, "producer"):
                ratio("W2p x SQLite", rec("W2p producer.send", b.el_producer_loop), sql_w)
            if want("R1"):
                ratio("R1 x SQLite", rec("R1 scan Records", b.el_scan_records), sql_r)
            if want("R2"):
                ratio("R2 x SQLite", rec("R2 scan columns", b.el_scan_columns), sql_r)
            if want("L1"):
                sql_l = rec("SQLite lookup p50 us", b.sqlite_lookup_p50_us)
                ratio("L1 SQLite/embedlog p50", sql_l, rec("L1 lookup p50 us", b.el_lookup_p50_us))
            if want("W3"):
                one = rec("W3 durable 1 thread", lambda: b.el_durable(1, 2000))
                ratio("W3 8 threads / 1 thread",
                      rec("W3 durable 8 threads", lambda: b.el_durable(8, 1000)), one)
                one = rec("W3 raw 1 thread", lambda: b.raw_group_commit(1, 2000))
                ratio("W3 raw 8 threads / 1 thread",
                      rec("W3 raw 8 threads", lambda: b.raw_group_commit(8, 1000)), one)
                one = rec("W3 SQLite 1 thread", lambda: b.sqlite_durable(1, 2000))
                ratio("W3 SQLite 8 threads / 1 thread",
                      rec("W3 SQLite 8 threads", lambda: b.sqlite_durable(8, 1000)), one)
            if want("W3p") and hasattr(embedlog.Log, "producer"):
                one = rec("W3p durable send 1 thread", lambda: b.el_durable_producer(1, 2000))
                ratio("W3p 8 threads / 1 thread", rec(
                    "W3p durable send 8 threads", lambda: b.el_durable_producer(8, 1000)), one)
            if want("C1"):
                rec("C1 compaction rec/s", b.el_compact)
            if want("O1"):
                rec("O1 open 1000 segments s", b.el_open_1000_segments)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {name: statistics.median(v) for name, v in rows.items()}
    core = embedlog.codec_implementation()
    print(f"\n{args.records:,} records, median of {args.repeat}, codec core: {core}")
    for name, value in summary.items():
        unit = "" if (" x " in name or "/" in name or " s" in name or " us" in name) else " rec/s"
        print(f"  {name:32s} {value:>14,.2f}{unit}")
    print_targets(summary)
    return summary


def print_targets(summary: dict[str, float]) -> None:
    """Every target row with this run's figure and whether it is met (a row without a target,
    bound 0, is a baseline for the rows around it)."""
    print("\ntargets")
    for name, (what, bound, higher) in TARGETS.items():
        value = summary.get(name)
        shown = "-" if value is None else f"{value:,.2f}"
        if value is None:
            verdict = "not run"
        elif not bound:
            verdict = "-"
        else:
            verdict = "met" if (value >= bound if higher else value < bound) else "MISSED"
        target = f"{'>=' if higher else '<'} {bound:,.1f}" if bound else "none"
        print(f"  {name:30s} {shown:>14s}  target {target:>11s}  {verdict:7s}  {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    parser.add_argument("--json", default=None, help="write the medians here")
    parser.add_argument("--pure", action="store_true",
                        help="run with EMBEDLOG_PURE=1 (the pure-Python codec) in a child")
    args = parser.parse_args()
    if args.pure and os.environ.get("EMBEDLOG_PURE", "") in ("", "0"):
        argv = [sys.executable, *sys.argv]
        os.execve(sys.executable, argv, {**os.environ, "EMBEDLOG_PURE": "1"})
    summary = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
