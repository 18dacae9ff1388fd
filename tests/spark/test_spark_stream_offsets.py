"""The stream reader's offset bookkeeping, driven directly (no Spark session needed)."""

from __future__ import annotations

import pkgutil
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

import embedlog
from embedlog.errors import InvalidConfigError, OffsetOutOfRangeError
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource
from embedlog.spark.stream import EmbedlogStreamReader


def stream_reader(path: str, **options: str) -> EmbedlogStreamReader:
    """A stream reader of every topic (``subscribePattern`` ``.*``) unless told otherwise."""
    if not {"subscribe", "subscribePattern", "assign"} & options.keys():
        options["subscribePattern"] = ".*"
    reader = EmbedlogDataSource({"path": path, **options}).streamReader(kafka_schema())
    assert isinstance(reader, EmbedlogStreamReader)
    return reader


@pytest.fixture
def logdir(tmp_path: Any) -> str:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("s", partitions=2)
        log.append_batch("s", [b"a"] * 60, partition=0)
        log.append_batch("s", [b"b"] * 40, partition=1)
    return path


def test_initial_offsets_follow_starting_options(logdir: str) -> None:
    assert stream_reader(logdir).initialOffset() == {"s": {"0": 60, "1": 40}}  # latest
    assert stream_reader(logdir, startingOffsets="earliest").initialOffset() == {
        "s": {"0": 0, "1": 0}}
    assert stream_reader(logdir, startingOffsets='{"s": {"0": 7, "1": -1}}').initialOffset() == {
        "s": {"0": 7, "1": 40}}
    with pytest.raises(InvalidConfigError, match="endingOffsets"):
        stream_reader(logdir, endingOffsets="latest")


def test_limits_and_available_now_target(logdir: str) -> None:
    r = stream_reader(logdir, startingOffsets="earliest", maxOffsetsPerTrigger="50")
    assert r.getDefaultReadLimit() == ReadMaxRows(50)
    start = r.initialOffset()
    assert r.latestOffset(start, ReadAllAvailable()) == {"s": {"0": 60, "1": 40}}
    first = r.latestOffset(start, ReadMaxRows(50))
    assert first == {"s": {"0": 30, "1": 20}}
    assert r.latestOffset(start, ReadMinRows(101)) == start  # not enough yet: wait
    r.prepareForTriggerAvailableNow()
    with embedlog.open(logdir) as log:  # arrives after the availableNow target was fixed
        log.append_batch("s", [b"late"] * 10, partition=1)
    second = r.latestOffset(first, ReadMaxRows(50))
    assert second == {"s": {"0": 60, "1": 40}}
    assert r.latestOffset(second, ReadMaxRows(50)) == second  # done: Spark stops here
    tasks = r.partitions(first, second)
    assert sorted((p, lo, hi) for t in tasks for _, p, lo, hi in t.ranges) == [
        (0, 30, 60), (1, 20, 40)]
    assert r.reportLatestOffset() == {"s": {"0": 60, "1": 50}}


def test_new_partitions_start_at_earliest_and_data_loss(logdir: str) -> None:
    r = stream_reader(logdir, subscribePattern="s|n.*")
    start = r.initialOffset()
    with embedlog.open(logdir) as log:
        log.create_topic("new", partitions=1)
        log.append_batch("new", [b"n"] * 5)
        log.delete_records("s", 0, 50)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"new": {"0": 5}, "s": {"0": 60, "1": 40}}
    assert flat(r.partitions(start, end)) == [("new", 0, 5)]
    stale = {"s": {"0": 10, "1": 40}}
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        r.partitions(stale, end)
    lenient = stream_reader(logdir, failOnDataLoss="false")
    assert flat(lenient.partitions(stale, end)) == [("new", 0, 5), ("s", 50, 60)]


def flat(tasks: list[Any]) -> list[tuple[str, int, int]]:
    """``(topic, start, end)`` of every planned range, in order."""
    return [(topic, lo, hi) for t in tasks for topic, _, lo, hi in t.ranges]


def test_spark_discovers_the_source_module() -> None:
    assert "pyspark_embedlog" in {m.name for m in pkgutil.iter_modules()}
    import pyspark_embedlog

    assert pyspark_embedlog.DefaultSource is EmbedlogDataSource
    assert EmbedlogDataSource.name() == "embedlog"


@pytest.mark.parametrize("limit", [ReadAllAvailable(), ReadMaxRows(10)])
def test_offsets_that_went_back_are_data_loss_not_a_silent_wait(
        logdir: str, limit: Any) -> None:
    """A checkpointed offset past the partition's end now (the topic deleted and created
    again) fails the next batch with failOnDataLoss=true -- the stream neither waits for the
    log to get back there nor then skips the records before it -- and with
    failOnDataLoss=false continues from the new end, as Kafka's source does."""
    checkpoint = {"s": {"0": 60, "1": 40}}
    with embedlog.open(logdir) as log:
        log.delete_topic("s")
        log.create_topic("s", partitions=2)
        log.append_batch("s", [b"new"] * 30, partition=0)
        log.append_batch("s", [b"new"] * 50, partition=1)
    strict = stream_reader(logdir, subscribe="s")
    end = strict.latestOffset(checkpoint, limit)
    assert end["s"]["0"] == 30
    with pytest.raises(OffsetOutOfRangeError, match="went back from 60 to 30"):
        strict.partitions(checkpoint, end)
    lenient = stream_reader(logdir, subscribe="s", failOnDataLoss="false")
    end = lenient.latestOffset(checkpoint, limit)
    assert end == {"s": {"0": 30, "1": 50}}
    assert [r for t in lenient.partitions(checkpoint, end) for r in t.ranges] == [
        ("s", 1, 40, 50)]
    with embedlog.open(logdir) as log:
        log.append_batch("s", [b"more"] * 5, partition=0)
    nxt = lenient.latestOffset(end, ReadAllAvailable())
    assert [r for t in lenient.partitions(end, nxt) for r in t.ranges] == [("s", 0, 30, 35)]
