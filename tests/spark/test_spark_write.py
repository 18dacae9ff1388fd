"""df.write.format("embedlog"): round trips, routing, and all-or-nothing failures."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import pytest

import embedlog
from embedlog.partitioner import partition_for_key

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
SCHEMA = ("key STRING, value BINARY, partition INT, timestamp TIMESTAMP, "
          "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")


def new_log(path: str, **topics: int) -> None:
    with embedlog.open(path) as log:
        for name, partitions in topics.items():
            log.create_topic(name, partitions=partitions)


def records(path: str, topic: str) -> list[tuple[Any, ...]]:
    with embedlog.open(path, read_only=True) as log:
        return [(r.partition, r.offset, r.key, r.value, r.timestamp, r.headers)
                for p in range(log.partition_count(topic)) for r in log.read(topic, p)]


def staging_left(path: str) -> bool:
    """Whether staged rows are left behind (an aborted job's marker files hold none)."""
    root = os.path.join(path, ".spark-staging")
    return os.path.isdir(root) and any(
        not name.endswith(".aborted") for name in os.listdir(root))


def test_round_trip_all_columns(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    new_log(path, w=2)
    ts = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    rows = [(f"k{i}", None if i == 3 else f"v{i}".encode(), i % 2,
             ts + dt.timedelta(seconds=i), [("h", b"x"), ("n", None)] if i % 4 == 0 else None)
            for i in range(40)]
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    df.write.format("embedlog").option("topic", "w").mode("append").save(path)
    got = records(path, "w")
    assert len(got) == 40 and not staging_left(path)
    by_key = {r[2]: r for r in got}
    for k, v, p, t, h in rows:
        rec = by_key[k.encode()]
        assert (rec[0], rec[3], rec[4]) == (p, v, int(t.timestamp() * 1000))
        assert rec[5] == (tuple(h) if h else ())
    # and back through the reader
    back = (spark.read.format("embedlog").option("subscribe", "w")
            .option("includeHeaders", "true").load(path))
    assert back.count() == 40
    assert sorted(r["offset"] for r in back.where("partition = 0").collect()) == list(range(20))


def test_topic_column_and_key_partitioner(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    new_log(path, a=3, b=1)
    rows = [("a" if i % 2 else "b", f"key{i}".encode(), f"val{i}") for i in range(30)]
    spark.createDataFrame(rows, "topic STRING, key BINARY, value STRING").write.format(
        "embedlog").mode("append").save(path)
    got_a = records(path, "a")
    assert len(got_a) == 15 and len(records(path, "b")) == 15
    for partition, _, key, value, _, _ in got_a:
        assert partition == partition_for_key(key, 3)  # Kafka's murmur2 partitioner
        assert value == b"val" + key[3:]


@pytest.mark.parametrize(
    ("ddl", "rows", "options", "message"),
    [
        ("value STRING", [("x",)], {"topic": "t", "mode": "overwrite"}, "append"),
        ("key STRING", [("x",)], {"topic": "t"}, "value"),
        ("value STRING", [("x",)], {}, "topic"),
        ("value STRING", [("x",)], {"topic": "missing"}, "missing"),
        ("value INT", [(1,)], {"topic": "t"}, "value"),
        ("value STRING, partition INT", [("x", 0), ("y", 5)], {"topic": "t"}, "partition"),
        ("value STRING, topic STRING", [("x", "t"), ("y", "nope")], {}, "nope"),
    ],
)
def test_bad_writes_leave_the_log_untouched(spark: Any, tmp_path: Any, ddl: str,
                                            rows: list[tuple[Any, ...]],
                                            options: dict[str, str], message: str) -> None:
    path = str(tmp_path / "log")
    new_log(path, t=2)
    writer = spark.createDataFrame(rows, ddl).write.format("embedlog")
    mode = options.pop("mode", "append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=message):
        writer.mode(mode).save(path)
    assert records(path, "t") == [] and not staging_left(path)


def test_failed_task_aborts_everything(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    new_log(path, t=1)
    df = spark.range(0, 100, numPartitions=4).selectExpr(
        "CAST(id AS STRING) AS value",
        "IF(id = 90, raise_error('boom'), id) AS x",
    )
    with pytest.raises(Exception, match="boom"):
        df.write.format("embedlog").option("topic", "t").mode("append").save(path)
    assert records(path, "t") == []
    deadline = time.monotonic() + 20  # tasks still running when the job failed clean up last
    while staging_left(path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not staging_left(path)


def test_commit_while_another_writer_holds_the_log(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    new_log(path, t=1)
    df = spark.createDataFrame([("x",)], "value STRING")
    with embedlog.open(path), pytest.raises(Exception, match="writerLockTimeoutMs=100"):
        df.write.format("embedlog").option("topic", "t").option(
            "writerLockTimeoutMs", "100").mode("append").save(path)
    assert records(path, "t") == [] and not staging_left(path)
