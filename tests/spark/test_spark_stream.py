"""Structured Streaming: availableNow with maxOffsetsPerTrigger, checkpoint resume, data loss."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spark_util import run_available_now

import embedlog

pytestmark = pytest.mark.spark


def append(path: str, counts: dict[int, int]) -> None:
    """Append ``n`` records to each partition; a record's value is ``b"<partition>:<offset>"``."""
    with embedlog.open(path) as log:
        if "s" not in log.topics():
            log.create_topic("s", partitions=2, config={"segment.bytes": 4096})
        for partition, n in counts.items():
            end = log.end_offset("s", partition)
            log.append_batch("s", [f"{partition}:{end + i}".encode() for i in range(n)],
                             partition=partition)


def run(spark: Any, path: str, checkpoint: str, **options: str) -> list[dict[int, list[int]]]:
    """Run an availableNow query to completion; per micro-batch, the offsets read per partition."""
    batches: list[dict[int, list[int]]] = []

    def collect(df: Any, batch_id: int) -> None:
        seen: dict[int, list[int]] = {}
        for row in df.select("partition", "offset", "value").toArrow().to_pylist():
            assert row["value"] == f"{row['partition']}:{row['offset']}".encode()
            seen.setdefault(row["partition"], []).append(row["offset"])
        batches.append({p: sorted(o) for p, o in sorted(seen.items())})

    run_available_now(spark, path, checkpoint, collect, {"subscribe": "s", **options})
    return [b for b in batches if b]


def test_available_now_admission_control_and_resume(spark: Any, tmp_path: Any) -> None:
    path, ckpt = str(tmp_path / "log"), str(tmp_path / "ckpt")
    append(path, {0: 600, 1: 400})
    batches = run(spark, path, ckpt, maxOffsetsPerTrigger="500")
    # 500 offsets per trigger, split 3:2 by backlog as Kafka does
    assert batches == [
        {0: list(range(0, 300)), 1: list(range(0, 200))},
        {0: list(range(300, 600)), 1: list(range(200, 400))},
    ]
    with open(next((tmp_path / "ckpt" / "offsets").glob("1"))) as f:
        assert json.loads(f.read().splitlines()[-1]) == {"s": {"0": 600, "1": 400}}

    append(path, {0: 150, 1: 100})  # offsets 600..749 and 400..499
    assert run(spark, path, ckpt, maxOffsetsPerTrigger="500") == [
        {0: list(range(600, 750)), 1: list(range(400, 500))}
    ]
    assert run(spark, path, ckpt, maxOffsetsPerTrigger="500") == []  # nothing new


def test_retention_below_the_checkpoint(spark: Any, tmp_path: Any) -> None:
    path, ckpt = str(tmp_path / "log"), str(tmp_path / "ckpt")
    append(path, {0: 30, 1: 5})
    assert run(spark, path, ckpt) == [{0: list(range(30)), 1: list(range(5))}]
    append(path, {0: 20})  # offsets 30..49
    with embedlog.open(path) as log:
        log.delete_records("s", 0, 40)  # 30..39 vanish before the query read them
    with pytest.raises(Exception, match="failOnDataLoss"):
        run(spark, path, ckpt)
    assert run(spark, path, ckpt, failOnDataLoss="false") == [{0: list(range(40, 50))}]


def test_latest_by_default_in_a_running_query(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    append(path, {0: 10, 1: 10})
    seen: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.extend(r["offset"] for r in df.select("offset").toArrow().to_pylist())

    query = (spark.readStream.format("embedlog").option("subscribe", "s")
             .load(path)  # startingOffsets: latest
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        assert seen == []
        append(path, {0: 3})
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen) == [10, 11, 12]


def test_stream_from_one_topic_into_another(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    append(path, {0: 25, 1: 15})
    with embedlog.open(path) as log:
        log.create_topic("copy", partitions=1)
    query = (spark.readStream.format("embedlog").option("subscribe", "s")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25")
             .load(path).selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("embedlog").option("topic", "copy")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start(path))
    query.awaitTermination(120)
    with embedlog.open(path, read_only=True) as log:
        copied = sorted(r.value for r in log.read("copy", 0))
    assert copied == sorted(f"{p}:{o}".upper().encode() for p, n in ((0, 25), (1, 15))
                            for o in range(n))
