"""Spark scan of an embedlog directory vs Spark's Parquet reader on the same rows (target S1 in
design/performance.md: >= 0.5x Parquet, all columns, 2,000,000 records).

    python benches/bench_spark.py --records 2000000

1. Writes ``--records`` records (8 B keys, 100 B random values, increasing ms timestamps) to an
   embedlog topic of ``--partitions`` partitions, and the same rows (all Kafka-source columns)
   as one snappy Parquet file per partition with pyarrow.
2. Full scan, all columns: an aggregate touching every column, run ``--repeat`` times per
   source, interleaved, after one warm-up each; prints the median rows/s and the ratio.
3. Restricted queries: ``startingOffsets``/``endingOffsets`` (one partition, 1% of it), the
   pushdown reader with an ``offset`` filter, and ``startingTimestamp`` (last 10% of time). For
   each, the Spark time and the bytes the reader actually read from segment files (``rchar``
   of /proc/self/io, measured by running the same planned tasks in this process) against a
   full scan's.

Machines are shared and noisy: compare within one run, look at the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import embedlog
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource

T0 = 1_700_000_000_000
TOPIC = "bench"
ALL_COLUMNS_QUERY = [
    "count(*) AS n",
    "sum(length(key)) AS key_bytes",
    "sum(length(value)) AS value_bytes",
    "count(DISTINCT topic) AS topics",
    "sum(partition) AS partitions",
    "sum(offset) AS offsets",
    "max(timestamp) AS last",
    "sum(timestampType) AS types",
]


def build(workdir: str, records: int, partitions: int, value_size: int) -> tuple[str, str]:
    """The embedlog directory and the Parquet directory holding the same rows."""
    log_dir, pq_dir = os.path.join(workdir, "log"), os.path.join(workdir, "parquet")
    os.makedirs(pq_dir)
    rng = np.random.default_rng(7)
    per = records // partitions
    chunk = 4000  # ~450 KB per batch: under max.message.bytes
    with embedlog.open(log_dir) as log:
        log.create_topic(TOPIC, partitions=partitions, config={"segment.bytes": 32 << 20})
        for p in range(partitions):
            for lo in range(0, per, chunk):
                n = min(chunk, per - lo)
                blob = rng.integers(0, 256, size=(n, value_size), dtype=np.uint8).tobytes()
                values = [blob[i * value_size:(i + 1) * value_size] for i in range(n)]
                keys = [(p * per + lo + i).to_bytes(8, "big") for i in range(n)]
                stamps = list(range(T0 + lo, T0 + lo + n))
                log.append_batch(TOPIC, values, keys=keys, timestamps=stamps, partition=p)
    # The Parquet copy is built from the log through the reader's own conversion.
    reader = EmbedlogDataSource({"path": log_dir}).reader(kafka_schema())
    for task in reader.partitions():
        table = pa.Table.from_batches(list(reader.read(task)))
        pq.write_table(table, os.path.join(pq_dir, f"part-{task.partition}-{task.start}.parquet"),
                       compression="snappy")
    return log_dir, pq_dir


def session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = run()
    return time.perf_counter() - t, out


def rchar() -> int:
    """Bytes this process has read through read()/pread() so far (Linux)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def bytes_read(options: dict[str, str], filters: list[Any] | None = None) -> tuple[int, int, int]:
    """(bytes read from segments, tasks, rows) when the planned tasks run in this process."""
    ds = EmbedlogDataSource(options)
    schema = kafka_schema()
    reader = ds.reader(schema)
    if filters is not None:
        reader.pushFilters(filters)
    tasks = reader.partitions()
    rows = 0
    before = rchar()
    for task in tasks:
        for batch in reader.read(task):
            rows += batch.num_rows
    return rchar() - before, len(tasks), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="embedlog-bench-spark-")
    os.makedirs(workdir, exist_ok=True)
    try:
        t, (log_dir, pq_dir) = timed(lambda: build(workdir, args.records, args.partitions,
                                                   args.value_size))
        log_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(log_dir)
                        for f in fs if f.endswith(".log"))
        pq_bytes = sum(os.path.getsize(os.path.join(pq_dir, f)) for f in os.listdir(pq_dir))
        print(f"data: {args.records:,} records in {args.partitions} partitions, "
              f"{log_bytes / 2**20:.0f} MiB of segments, {pq_bytes / 2**20:.0f} MiB of Parquet "
              f"(built in {t:.1f} s)")
        spark = session(args.cores)

        def scan_embedlog() -> Any:
            return spark.read.format("embedlog").load(log_dir).selectExpr(
                *ALL_COLUMNS_QUERY).collect()

        def scan_parquet() -> Any:
            return spark.read.parquet(pq_dir).selectExpr(*ALL_COLUMNS_QUERY).collect()

        a, b = scan_embedlog(), scan_parquet()  # warm-up, and both must agree
        assert a == b, (a, b)
        assert a[0]["n"] == args.records // args.partitions * args.partitions
        times: dict[str, list[float]] = {"embedlog": [], "parquet": []}
        for _ in range(args.repeat):
            times["embedlog"].append(timed(scan_embedlog)[0])
            times["parquet"].append(timed(scan_parquet)[0])
        n = a[0]["n"]
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"\nfull scan, all columns, local[{args.cores}], median of {args.repeat}:")
        for k in ("embedlog", "parquet"):
            runs = ", ".join(f"{x:.2f}" for x in times[k])
            print(f"  {k:9s} {med[k]:6.2f} s  {n / med[k] / 1e6:6.2f} M rows/s   ({runs})")
        print(f"  ratio embedlog/parquet: {med['parquet'] / med['embedlog']:.2f}x "
              "(target >= 0.5x)")
        print("  load average (1/5/15 min): {:.1f} {:.1f} {:.1f} on {} CPUs".format(
            *os.getloadavg(), os.cpu_count()))

        restricted(spark, log_dir, args)
        spark.stop()
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def restricted(spark: Any, log_dir: str, args: argparse.Namespace) -> None:
    """Queries that need a small part of the log read only the segments holding it."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    per = args.records // args.partitions
    lo, hi = per // 2, per // 2 + per // 100
    offsets = {
        "assign": json.dumps({TOPIC: [0]}),
        "startingOffsets": json.dumps({TOPIC: {"0": lo}}),
        "endingOffsets": json.dumps({TOPIC: {"0": hi}}),
    }
    pushdown_filter = f"partition = 0 AND offset >= {lo} AND offset < {hi}"
    ts_start = T0 + per * 9 // 10
    cases: list[tuple[str, dict[str, str], Callable[[Any], Any], list[Any] | None]] = [
        ("full scan", {}, lambda df: df, None),
        ("offsets 1% of p0", offsets, lambda df: df, None),
        ("pushdown offset filter", {"pushFilters": "true"},
         lambda df: df.where(pushdown_filter),
         [GreaterThanOrEqual(("offset",), lo), LessThan(("offset",), hi)]),
        ("startingTimestamp last 10%", {"startingTimestamp": str(ts_start)}, lambda df: df, None),
    ]
    print("\nrestricted queries (bytes = what the reader read from segment files):")
    full = None
    for name, options, shape, filters in cases:
        def query(options: dict[str, str] = options, shape: Callable[[Any], Any] = shape) -> Any:
            reader = spark.read.format("embedlog")
            for k, v in options.items():
                reader = reader.option(k, v)
            return shape(reader.load(log_dir)).selectExpr("count(*) AS n").collect()[0]["n"]

        query()
        seconds = statistics.median(timed(query)[0] for _ in range(3))
        plan_options = {"path": log_dir, **options}
        if filters is not None:  # the partition filter folds into the same constraints
            from pyspark.sql.datasource import EqualTo

            filters = [*filters, EqualTo(("partition",), 0)]
        read, tasks, rows = bytes_read(plan_options, filters)
        full = full or read
        print(f"  {name:28s} {rows:>10,} rows  {tasks:3d} tasks  {read / 2**20:8.1f} MiB "
              f"({100 * read / full:5.1f}% of a full scan)  spark {seconds:5.2f} s")

if __name__ == "__main__":
    main()
