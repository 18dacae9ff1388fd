"""Reading log directories written by real Kafka brokers (shared/fixtures/kafka-real): Spark's
rows equal kafka-python's independent decoding, and totals equal SOURCES.md."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

pytestmark = pytest.mark.spark

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "fixtures",
                        "kafka-real")
if not os.path.isdir(FIXTURES):
    FIXTURES = "/work/shared/fixtures/kafka-real"

# Record totals from SOURCES.md.
TOTALS = {"kafka30-multipartition": 3126, "kafka27-compacted-multiseg": 16,
          "cp512-connect-lz4": 582}


def kafka_python_rows(root: str) -> list[dict[str, Any]]:
    """Every data record of every partition folder, decoded by kafka-python."""
    memory_records = pytest.importorskip("kafka.record.memory_records")
    rows: list[dict[str, Any]] = []
    for entry in sorted(os.listdir(root)):
        topic, _, number = entry.rpartition("-")
        folder = os.path.join(root, entry)
        if not number.isdigit() or not os.path.isdir(folder):
            continue
        for name in sorted(f for f in os.listdir(folder) if f.endswith(".log")):
            with open(os.path.join(folder, name), "rb") as f:
                records = memory_records.MemoryRecords(f.read())
            while records.has_next():
                batch = records.next_batch()
                if batch.is_control_batch:
                    continue
                for r in batch:
                    rows.append({
                        "key": r.key, "value": r.value, "topic": topic,
                        "partition": int(number), "offset": r.offset,
                        "timestamp": dt.datetime.fromtimestamp(r.timestamp / 1000,
                                                               tz=dt.timezone.utc),
                        "timestampType": batch.timestamp_type,
                        "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
                    })
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_broker_directory_equals_kafka_python(spark: Any, name: str) -> None:
    root = os.path.join(FIXTURES, name)
    if not os.path.isdir(root):
        pytest.skip(f"fixture {root} not present")
    df = (spark.read.format("embedlog").option("subscribePattern", ".*")
          .option("includeHeaders", "true").load(root))
    got = sorted(df.toArrow().to_pylist(),
                 key=lambda r: (r["topic"], r["partition"], r["offset"]))
    assert len(got) == TOTALS[name]
    assert got == kafka_python_rows(root)


def test_lz4_log_append_time_partition_with_min_partitions(spark: Any) -> None:
    root = os.path.join(FIXTURES, "cp512-connect-lz4")
    if not os.path.isdir(root):
        pytest.skip("fixture not present")
    topic = "_confluent-controlcenter-5-1-2-1-monitoring-trigger-event-rekey"
    df = (spark.read.format("embedlog").option("subscribe", topic).option("minPartitions", "4")
          .load(root))
    rows = df.select("offset", "timestampType").toArrow().to_pylist()
    assert sorted(r["offset"] for r in rows) == list(range(22))
    assert {r["timestampType"] for r in rows} == {1}  # LogAppendTime


def test_legacy_magic0_directory_is_a_clear_error(spark: Any) -> None:
    root = os.path.join(FIXTURES, "kafka08-legacy-magic0")
    if not os.path.isdir(root):
        pytest.skip("fixture not present")
    with pytest.raises(Exception, match=r"magic 0\) is not supported"):
        spark.read.format("embedlog").option("subscribePattern", ".*").load(root).count()
