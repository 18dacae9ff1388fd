"""Spark ``read_committed`` scans of a log written in transactions: the JVM reader against the
Python reader, and against Spark's Parquet scan of the committed rows.

The log holds ``--records`` records in ``--partitions`` partitions, written by a transactional
producer in transactions of ``--txn-records`` records each, every ``--abort-every``-th of them
aborted; the Parquet copy holds what a ``read_committed`` reader returns. Run::

    python benches/bench_spark_txn.py --records 1000000

Prints the median of ``--repeat`` interleaved runs per reader, with the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedlog
from bench_spark import ALL_COLUMNS_QUERY, TOPIC, interleaved, loadavg, session
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource

COMMITTED = {"kafka.isolation.level": "read_committed"}


def build(workdir: str, args: argparse.Namespace) -> tuple[str, str]:
    """The transactional log and the Parquet copy of its committed rows."""
    log_dir, pq_dir = os.path.join(workdir, "log"), os.path.join(workdir, "parquet")
    rng = random.Random(7)  # random values, as bench_spark.py's (Parquet cannot dictionary them)
    with embedlog.open(log_dir) as log:
        log.create_topic(TOPIC, partitions=args.partitions, config={"segment.bytes": 32 << 20})
        producer = log.producer(transactional_id="bench")
        producer.init_transactions()
        for txn, lo in enumerate(range(0, args.records, args.txn_records)):
            producer.begin_transaction()
            for i in range(lo, min(lo + args.txn_records, args.records)):
                producer.send(TOPIC, rng.randbytes(args.value_size), key=i.to_bytes(8, "big"),
                              partition=i % args.partitions)
            if txn % args.abort_every == args.abort_every - 1:
                producer.flush()  # the aborted records are in the log, as a reader meets them
                producer.abort_transaction()
            else:
                producer.commit_transaction()
        producer.close()
    os.makedirs(pq_dir)
    reader = EmbedlogDataSource({"path": log_dir, "subscribe": TOPIC, **COMMITTED}).reader(
        kafka_schema())
    for i, task in enumerate(reader.partitions()):
        pq.write_table(pa.Table.from_batches(list(reader.read(task))),
                       os.path.join(pq_dir, f"part-{i:05d}.parquet"), compression="snappy")
    return log_dir, pq_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--txn-records", type=int, default=1000)
    ap.add_argument("--abort-every", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="embedlog-bench-txn-") as workdir:
        log_dir, pq_dir = build(workdir, args)
        spark = session(args.cores)

        def embedlog_scan(jvm: bool) -> Callable[[], Any]:
            return lambda: (spark.read.format("embedlog").option("subscribe", TOPIC)
                            .options(**COMMITTED).option("jvmReader", str(jvm).lower())
                            .load(log_dir).selectExpr(*ALL_COLUMNS_QUERY).collect())

        group: dict[str, Callable[[], Any]] = {
            "parquet": lambda: spark.read.parquet(pq_dir).selectExpr(*ALL_COLUMNS_QUERY)
            .collect(),
            "embedlog": embedlog_scan(True),
            "embedlog-py": embedlog_scan(False),
        }
        reference = group["parquet"]()
        for name, query in group.items():  # warm-up, and all must agree
            assert query() == reference, name
        rows = reference[0]["n"]
        print(f"read_committed full scan, {rows:,} committed of {args.records:,} records "
              f"(transactions of {args.txn_records}, every {args.abort_every}th aborted), "
              f"median of {args.repeat}:")
        med = interleaved(group, args.repeat)
        for name, secs in med.items():
            shown = "" if name == "parquet" else f"  ratio {med['parquet'] / secs:.2f}x of Parquet"
            print(f"  {name:12s} {secs:6.2f} s{shown}")
        print(f"  {loadavg()}")
        spark.stop()


if __name__ == "__main__":
    main()
