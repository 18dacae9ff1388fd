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

4. Planning cost (``--plan-partitions``/``--plan-segments``, no JVM): a folder of N partitions
   of M segments each (the segments and the sealed-segment manifest copied from one small real
   partition), planned by the batch reader, by the batch reader passing the manifests over (one
   listing and one ``lstat`` per sealed segment, the way a Kafka folder is planned; the plan
   must be the same), and by one streaming trigger, against opening the whole folder
   read-only.

Each of the rows is printed with its target (issue "Past one machine"): full scan >= 1.0x
Parquet with 1,000- and 128-record batches, ``count(*)`` >= 1.0x, ``load()`` to the first row
within 2x Parquet's, planning 10,000 partitions / 100,000 segments in under a second
(:data:`PLAN_TARGET_S`; wall and CPU time, median of 3 fresh plans).

Machines are shared and noisy: compare within one run, look at the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import embedlog
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource

T0 = 1_700_000_000_000
PLAN_TARGET_S = 1.0
"""Planning a batch read of 10,000 partitions (x 10 segments) should take less than this."""
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


def build(workdir: str, records: int, partitions: int, value_size: int,
          chunk: int = 1000, parquet: bool = True) -> tuple[str, str]:
    """The embedlog directory (Kafka batches of ``chunk`` records) and the Parquet directory
    holding the same rows."""
    log_dir, pq_dir = os.path.join(workdir, f"log-{chunk}"), os.path.join(workdir, "parquet")
    rng = np.random.default_rng(7)
    per = records // partitions
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
    if not parquet:
        return log_dir, pq_dir
    # The Parquet copy is built from the log through the reader's own conversion.
    os.makedirs(pq_dir)
    reader = EmbedlogDataSource({"path": log_dir, "subscribe": TOPIC}).reader(kafka_schema())
    for i, task in enumerate(reader.partitions()):
        table = pa.Table.from_batches(list(reader.read(task)))
        pq.write_table(table, os.path.join(pq_dir, f"part-{i:05d}.parquet"),
                       compression="snappy")
    return log_dir, pq_dir


def session(cores: int, plain_daemon: bool = False) -> Any:
    """A local session set up as :func:`embedlog.spark.local_session` sets one up: executor
    workers forked from :mod:`embedlog.spark.daemon` (``plain_daemon``: pyspark's own)."""
    from embedlog.spark.jvm import jar_path
    from embedlog.spark.session import DAEMON_MODULE

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
        .config("spark.python.daemon.module", "pyspark.daemon" if plain_daemon else DAEMON_MODULE)
        .config("spark.jars", jar_path() or "")
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
    ap.add_argument("--batch-sizes", default="1000,128",
                    help="records per Kafka batch, one log each (128 is Kafka's default)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--plan-partitions", type=int, default=10_000)
    ap.add_argument("--plan-segments", type=int, default=10)
    ap.add_argument("--only", choices=("scan", "plan"), default=None)
    ap.add_argument("--plain-daemon", action="store_true",
                    help="fork Spark's Python workers from pyspark.daemon (not embedlog's)")
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="embedlog-bench-spark-")
    os.makedirs(workdir, exist_ok=True)
    try:
        if args.only != "scan":
            planning(workdir, args.plan_partitions, args.plan_segments)
        if args.only != "plan":
            scans(workdir, args)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f"load average {f.read().strip()} on {os.cpu_count()} CPUs"


def scans(workdir: str, args: argparse.Namespace) -> None:
    """Full scans per Kafka batch size, count(*), and load() to the first row, vs Parquet."""
    logs: dict[int, str] = {}
    pq_dir = ""
    for i, chunk in enumerate(int(c) for c in args.batch_sizes.split(",")):
        t, (logs[chunk], pq) = timed(lambda chunk=chunk, i=i: build(
            workdir, args.records, args.partitions, args.value_size, chunk, parquet=i == 0))
        pq_dir = pq_dir or pq
        log_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logs[chunk])
                        for f in fs if f.endswith(".log"))
        print(f"data: {args.records:,} records in {args.partitions} partitions, batches of "
              f"{chunk}: {log_bytes / 2**20:.0f} MiB of segments (built in {t:.1f} s)")
    spark = session(args.cores, args.plain_daemon)
    queries: dict[str, Callable[[], Any]] = {
        "parquet": lambda: spark.read.parquet(pq_dir).selectExpr(*ALL_COLUMNS_QUERY).collect(),
    }
    for chunk, path in logs.items():
        for jvm in (True, False):
            queries[f"embedlog{'' if jvm else '-py'}/{chunk}"] = (
                lambda path=path, jvm=jvm: embedlog_df(spark, path, jvm).selectExpr(
                    *ALL_COLUMNS_QUERY).collect())
    first_log = next(iter(logs.values()))
    for jvm in (True, False):  # kafka.isolation.level=read_committed (no transaction in it)
        queries[f"rc{'' if jvm else '-py'}/{next(iter(logs))}"] = (
            lambda jvm=jvm: embedlog_df(spark, first_log, jvm, committed=True).selectExpr(
                *ALL_COLUMNS_QUERY).collect())
    counts: dict[str, Callable[[], Any]] = {
        "parquet": lambda: spark.read.parquet(pq_dir).count(),
        "embedlog": lambda: embedlog_df(spark, first_log).count(),
        "embedlog-py": lambda: embedlog_df(spark, first_log, False).count(),
    }
    firsts: dict[str, Callable[[], Any]] = {
        "parquet": lambda: spark.read.parquet(pq_dir).limit(1).collect(),
        "embedlog": lambda: embedlog_df(spark, next(iter(logs.values()))).limit(1).collect(),
    }
    reference = queries["parquet"]()
    for name, q in queries.items():  # warm-up, and all must agree
        assert q() == reference, name
    daemon = "pyspark.daemon" if args.plain_daemon else "embedlog.spark.daemon"
    print(f"\nSpark, local[{args.cores}], workers forked by {daemon}, median of {args.repeat} "
          "(interleaved):")
    for title, group, target in (("full scan, all columns", queries, 1.0),
                                 ("count(*)", counts, 1.0),
                                 ("load() to the first row", firsts, 0.5)):
        med = interleaved(group, args.repeat)
        print(f"  {title}:")
        for name, secs in med.items():
            ratio = med["parquet"] / secs
            shown = "" if name == "parquet" else (
                f"  ratio {ratio:.2f}x of Parquet (target >= {target:.1f}x)")
            print(f"    {name:14s} {secs:6.2f} s{shown}")
    print(f"  {loadavg()}")
    streams(spark, first_log, pq_dir, workdir, args.repeat)
    restricted(spark, next(iter(logs.values())), args)
    spark.stop()


def streams(spark: Any, log_dir: str, pq_dir: str, workdir: str, repeat: int) -> None:
    """An availableNow stream of every record into the same aggregate, per micro-batch: embedlog
    (JVM reader, Python reader) against Spark's file source on the Parquet copy."""
    runs = itertools.count()

    def run(reader: Any) -> Any:
        out: list[Any] = []
        checkpoint = os.path.join(workdir, f"ckpt-{next(runs)}")
        query = (reader.writeStream.trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint)
                 .foreachBatch(lambda df, _: out.extend(df.selectExpr(
                     *ALL_COLUMNS_QUERY).collect())).start())
        query.awaitTermination()
        shutil.rmtree(checkpoint, ignore_errors=True)
        return out

    schema = spark.read.parquet(pq_dir).schema
    group: dict[str, Callable[[], Any]] = {
        "parquet": lambda: run(spark.readStream.schema(schema).parquet(pq_dir)),
    }
    for jvm in (True, False):
        group[f"embedlog{'' if jvm else '-py'}"] = lambda jvm=jvm: run(
            spark.readStream.format("embedlog").option("subscribe", TOPIC)
            .option("startingOffsets", "earliest").option("jvmReader", str(jvm).lower())
            .load(log_dir))
    med = interleaved(group, repeat)
    print("  stream (availableNow), all columns:")
    for name, secs in med.items():
        shown = "" if name == "parquet" else f"  ratio {med['parquet'] / secs:.2f}x of Parquet"
        print(f"    {name:14s} {secs:6.2f} s{shown}")
    print(f"  {loadavg()}")


def embedlog_df(spark: Any, path: str, jvm: bool = True, committed: bool = False) -> Any:
    """Every record of the bench topic (``jvm``: through the JVM reader when the session has
    it; else the Python reader; ``committed``: as ``read_committed``)."""
    level = "read_committed" if committed else "read_uncommitted"
    return (spark.read.format("embedlog").option("subscribe", TOPIC)
            .option("kafka.isolation.level", level)
            .option("jvmReader", str(jvm).lower()).load(path))


def interleaved(group: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in group}
    for _ in range(repeat):
        for name, q in group.items():
            times[name].append(timed(q)[0])
    return {name: statistics.median(v) for name, v in times.items()}


def planning(workdir: str, partitions: int, segments: int) -> None:
    """Plan a folder of ``partitions`` x ``segments``: batch, one streaming trigger, and the
    whole-folder read-only open the planner used to start with."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from embedlog.spark.options import parse_read_options
    from embedlog.spark.stream import EmbedlogStreamReader

    path = os.path.join(workdir, f"plan-{partitions}x{segments}")
    t, _ = timed(lambda: build_many(path, partitions, segments))
    print(f"planning: {partitions:,} partitions x {segments} segments (built in {t:.1f} s)")
    def plan() -> Any:
        reader = EmbedlogDataSource({"path": path, "subscribe": TOPIC}).reader(kafka_schema())
        return reader.partitions()

    from embedlog.spark import layout

    def cold() -> Any:
        layout.forget()  # as the first query of a process
        return plan()

    t_cold, t_cold_cpu, tasks = median_plan(cold)
    t_batch, t_cpu, warm = median_plan(plan)
    with listing_only():
        t_listed, t_listed_cpu, listed = median_plan(plan)
    assert listed == tasks == warm, "the manifest changed the plan"
    stream = EmbedlogStreamReader(parse_read_options({"path": path, "subscribe": TOPIC,
                                                      "startingOffsets": "earliest"},
                                                     streaming=True),
                                  kafka_schema())
    start = stream.initialOffset()

    def trigger() -> Any:
        end = stream.latestOffset(start, ReadAllAvailable())
        return stream.partitions(start, end)

    t_trigger, _ = timed(trigger)
    t_again, _ = timed(trigger)
    met = "met" if t_cold < PLAN_TARGET_S else "NOT met"
    print(f"  batch plan      {t_cold:6.2f} s  (cpu {t_cold_cpu:.2f} s, median of 3 first queries "
          f"of a process; {len(tasks)} tasks; target < {PLAN_TARGET_S:.0f} s: {met})")
    print(f"  batch plan      {t_batch:6.2f} s  (cpu {t_cpu:.2f} s, median of 3 later queries: "
          "the segments the manifests vouched for are remembered)")
    print(f"  batch plan, segment manifests passed over (listing + lstat, as for a Kafka "
          f"folder): {t_listed:6.2f} s (cpu {t_listed_cpu:.2f} s)")
    print(f"  stream trigger  {t_trigger:6.2f} s  first, {t_again:6.2f} s next")
    try:
        t_open, _ = timed(lambda: embedlog.open(path, read_only=True).close())
        before = f"{t_open:6.2f} s"
    except embedlog.errors.StorageError as exc:  # one descriptor per segment
        before = f"fails: {exc}"
    print(f"  (whole-folder read-only open, as planning did before: {before})")
    print(f"  {loadavg()}\n")


def median_plan(plan: Callable[[], Any]) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of 3 fresh plans (nothing is kept between queries), and the
    last plan."""
    walls, cpus = [], []
    for _ in range(3):
        cpu = time.process_time()
        t, tasks = timed(plan)
        walls.append(t)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), tasks


@contextlib.contextmanager
def listing_only() -> Iterator[None]:
    """Planning as if no partition had a sealed-segment manifest."""
    from embedlog.spark import layout

    read_sealed, stamp = layout.read_sealed, layout.stamp
    layout.read_sealed = lambda folder: None
    layout.stamp = lambda folder: None  # nothing remembered either
    try:
        yield
    finally:
        layout.read_sealed, layout.stamp = read_sealed, stamp


def build_many(path: str, partitions: int, segments: int) -> None:
    """One real partition of ``segments`` segments, copied ``partitions`` times (the topic
    metadata is then edited to list them all: creating 10,000 partitions one by one is slow)."""
    with embedlog.open(path) as log:
        log.create_topic(TOPIC, partitions=1)
        for s in range(segments):
            log.append_batch(TOPIC, [b"r" * 50] * 10, partition=0)
            if s < segments - 1:
                log.roll(TOPIC, 0)
    first = os.path.join(path, f"{TOPIC}-0")
    names = os.listdir(first)
    blobs = {}
    for n in names:
        with open(os.path.join(first, n), "rb") as f:
            blobs[n] = f.read()
    for p in range(1, partitions):
        folder = os.path.join(path, f"{TOPIC}-{p}")
        os.mkdir(folder)
        for n, blob in blobs.items():
            with open(os.path.join(folder, n), "wb") as f:
                f.write(blob)
    meta_path = os.path.join(path, "embedlog.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["topics"][TOPIC]["partitions"] = partitions
    with open(meta_path, "w") as f:
        json.dump(meta, f)


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
    topic = {"subscribe": TOPIC}
    cases: list[tuple[str, dict[str, str], Callable[[Any], Any], list[Any] | None]] = [
        ("full scan", topic, lambda df: df, None),
        ("offsets 1% of p0", offsets, lambda df: df, None),
        ("pushdown offset filter", {**topic, "pushFilters": "true"},
         lambda df: df.where(pushdown_filter),
         [GreaterThanOrEqual(("offset",), lo), LessThan(("offset",), hi)]),
        ("startingTimestamp last 10%", {**topic, "startingTimestamp": str(ts_start)},
         lambda df: df, None),
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
