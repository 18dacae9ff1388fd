"""Log directories written by real Kafka brokers read back through the public API, checked
against the counts in SOURCES.md and against kafka-python's independent decoder."""

from __future__ import annotations

import pathlib

import pytest

import embedlog

kafka_records = pytest.importorskip("kafka.record.memory_records")


def kafka_python_records(
    partition_dir: pathlib.Path,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every data record of a partition, decoded by kafka-python."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        records = kafka_records.MemoryRecords(seg.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            if batch.is_control_batch:
                continue
            for r in batch:
                out.append((r.offset, r.key, r.value))
    return out


@pytest.mark.parametrize(
    ("fixture", "expected_records"),
    [
        ("kafka30-multipartition", 3126),
        ("kafka27-compacted-multiseg", 16),
        ("cp512-connect-lz4", 582),
    ],
)
def test_real_fixture_matches_kafka_python(
    kafka_fixtures: pathlib.Path, fixture: str, expected_records: int
) -> None:
    root = kafka_fixtures / fixture
    total = 0
    with embedlog.open(root, read_only=True) as log:
        for topic in log.topics():
            for p in range(log.partition_count(topic)):
                ours = [(r.offset, r.key, r.value) for r in log.read(topic, p)]
                theirs = kafka_python_records(root / f"{topic}-{p}")
                assert ours == theirs, f"{topic}-{p}"
                total += len(ours)
    assert total == expected_records


def test_kafka30_topics_and_offsets(kafka_fixtures: pathlib.Path) -> None:
    with embedlog.open(kafka_fixtures / "kafka30-multipartition", read_only=True) as log:
        assert "my-first-topic" in log.topics()
        assert log.partition_count("my-first-topic") == 3
        assert log.partition_count("__consumer_offsets") == 50
        assert [log.end_offset("my-first-topic", p) for p in range(3)] == [11, 12, 7]
        assert log.end_offset("__consumer_offsets", 13) == 3093
        recs = list(log.read("__consumer_offsets", 13, 3000))
        assert [r.offset for r in recs] == list(range(3000, 3093))
        first = next(log.read("my-first-topic", 0))
        assert first.key is None and first.timestamp > 1_600_000_000_000
        ts = first.timestamp
        assert log.offsets_for_times("my-first-topic", 0, ts) == 0


def test_kafka27_compaction_gaps(kafka_fixtures: pathlib.Path) -> None:
    with embedlog.open(kafka_fixtures / "kafka27-compacted-multiseg", read_only=True) as log:
        assert [r.offset for r in log.read("__consumer_offsets", 39)] == [4, 16, 17, 18, 19]
        assert [r.offset for r in log.read("__consumer_offsets", 28)] == [1, 2]
        # Reading at an offset removed by compaction returns the next one that exists.
        assert next(log.read("__consumer_offsets", 39, 5)).offset == 16
        assert log.start_offset("myTopic", 0) == 38 and log.end_offset("myTopic", 0) == 38
        assert list(log.read("myTopic", 0)) == []


def test_cp512_log_append_time_and_lz4(kafka_fixtures: pathlib.Path) -> None:
    topic = "_confluent-controlcenter-5-1-2-1-actual-group-consumption-rekey"
    with embedlog.open(kafka_fixtures / "cp512-connect-lz4", read_only=True) as log:
        recs = list(log.read(topic, 0))
        assert len(recs) == 14
        assert all(r.timestamp_type == 1 for r in recs)
        assert len(list(log.read("_confluent-command", 0))) == 2


def test_legacy_magic0_is_refused_clearly(kafka_fixtures: pathlib.Path) -> None:
    with embedlog.open(kafka_fixtures / "kafka08-legacy-magic0", read_only=True) as log:
        assert log.topics() == ["hamlet-gzip", "hamlet-snappy"]
        with pytest.raises(embedlog.UnsupportedFormatError, match="magic"):
            list(log.read("hamlet-gzip", 0))
