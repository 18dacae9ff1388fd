"""Arrow scan of a topic against SQLite's full scan and pyarrow's Parquet read, in one run.

    python benches/bench_arrow.py [--records 1000000] [--repeat 3] [--dir SCRATCH]

The same records (8-16 B random keys, 100 B random values, ms timestamps; one partition,
written with ``append_batch`` 1000 at a time) go into an embedlog topic, a SQLite table (WAL,
``offset INTEGER PRIMARY KEY``) and a Parquet file (pyarrow, snappy, the table
``read_table`` returns). Scans:

  A1  log.read_arrow(...) over every column but headers, batches consumed   >= 10x SQLite scan
  A1  the same                                                              >= 0.5x Parquet read
  A2  log.read_arrow(columns=["offset", "timestamp"]) (projection)          (reported)

SQLite returns the same four fields (offset, ts, key, value) row by row; the Parquet read is
``pq.read_table`` of all columns. Rates are records/s; ratios are taken within each repetition
and the median printed with its target and met/missed. The machine is shared: trust ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))

import embedlog
from compare import BATCH, make_records


def build(workdir: str, n: int) -> None:
    keys, values, ts = make_records(n)
    with embedlog.open(os.path.join(workdir, "el")) as log:
        log.create_topic("t")
        for i in range(0, n, BATCH):
            log.append_batch("t", values[i : i + BATCH], keys=keys[i : i + BATCH],
                             timestamps=ts[i : i + BATCH], partition=0)
        pq.write_table(log.read_table("t"), os.path.join(workdir, "t.parquet"))
    db = sqlite3.connect(os.path.join(workdir, "sqlite.db"))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, ts INTEGER, key BLOB, value BLOB)")
    with db:
        db.executemany("INSERT INTO log VALUES (?, ?, ?, ?)",
                       zip(range(n), ts, keys, values, strict=True))
    db.close()


def sqlite_scan(workdir: str) -> float:
    db = sqlite3.connect(os.path.join(workdir, "sqlite.db"))
    t0 = time.perf_counter()
    count = sum(1 for _ in db.execute("SELECT offset, ts, key, value FROM log ORDER BY offset"))
    rate = count / (time.perf_counter() - t0)
    db.close()
    return rate


def parquet_read(workdir: str) -> float:
    t0 = time.perf_counter()
    table = pq.read_table(os.path.join(workdir, "t.parquet"))
    return table.num_rows / (time.perf_counter() - t0)


def arrow_scan(workdir: str, columns: list[str] | None = None) -> float:
    with embedlog.open(os.path.join(workdir, "el"), read_only=True) as log:
        t0 = time.perf_counter()
        count = sum(batch.num_rows for batch in log.read_arrow("t", columns=columns))
        return count / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="embedlog-bench-arrow-", dir=args.dir)
    rows: dict[str, list[float]] = {}

    def rec(name: str, fn: Callable[[], float]) -> float:
        rows.setdefault(name, []).append(fn())
        return rows[name][-1]

    try:
        build(workdir, args.records)
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            sql = rec("SQLite full scan", lambda: sqlite_scan(workdir))
            par = rec("Parquet read (pyarrow)", lambda: parquet_read(workdir))
            a1 = rec("A1 read_arrow all columns", lambda: arrow_scan(workdir))
            rec("A2 read_arrow offset+timestamp",
                lambda: arrow_scan(workdir, ["offset", "timestamp"]))
            rows.setdefault("A1 x SQLite", []).append(a1 / sql)
            rows.setdefault("A1 x Parquet", []).append(a1 / par)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    targets = {"A1 x SQLite": 10.0, "A1 x Parquet": 0.5}
    print(f"\n{args.records:,} records, median of {args.repeat}")
    for name, values in rows.items():
        value = statistics.median(values)
        if name in targets:
            verdict = "met" if value >= targets[name] else "MISSED"
            print(f"  {name:34s} {value:>14,.2f}   target >= {targets[name]:<5} {verdict}")
        else:
            print(f"  {name:34s} {value:>14,.0f} rec/s")


if __name__ == "__main__":
    main()
