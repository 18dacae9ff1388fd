"""Filter pushdown and driver-side planning on a real log (no Spark session needed)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)
from spark_util import BASE_TS, expected_rows, make_log

import embedlog
from embedlog.errors import CorruptCheckpointError
from embedlog.spark.pushdown import Constraints, push_filters
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource, EmbedlogPushdownReader, EmbedlogReader
from embedlog.spark.stream import offsets_from_json, offsets_to_json, rate_limit


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("pushdown") / "log")
    make_log(path, segment_bytes=1024)
    return path


def test_exact_filters_are_handled_and_others_returned() -> None:
    filters = [
        EqualTo(("topic",), "events"),
        In(("partition",), [0, 2]),
        GreaterThanOrEqual(("offset",), 10),
        LessThan(("offset",), 20),
        IsNotNull(("offset",)),
        GreaterThan(("timestamp",), dt.datetime(2023, 11, 14, 22, 13, 21, tzinfo=dt.timezone.utc)),
        LessThanOrEqual(("timestamp",), dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)),
        Not(EqualTo(("partition",), 1)),
        EqualTo(("value",), b"x"),
    ]
    c, rest = push_filters(filters)
    assert rest == filters[5:]  # the same objects, in order
    assert c.topics == frozenset({"events"}) and c.partitions == frozenset({0, 2})
    assert (c.offset_lo, c.offset_hi) == (10, 20)
    assert c.timestamp_lo_ms == 1_700_000_001_001  # > ...:21.000 s -> >= the next millisecond
    assert c.wants_topic("events") and not c.wants_topic("other")
    assert c.clip(0, 100) == (10, 20) and c.clip(15, 17) == (15, 17)


def test_contradictions_and_ranges() -> None:
    c, _ = push_filters([EqualTo(("offset",), 5), GreaterThan(("offset",), 5)])
    assert c.empty
    c, rest = push_filters([GreaterThan(("partition",), 0), LessThanOrEqual(("partition",), 1),
                            StringStartsWith(("topic",), "ev"), In(("offset",), [7, 3, 9])])
    assert [c.wants_partition(p) for p in range(3)] == [False, True, False]
    assert c.wants_topic("events") and not c.wants_topic("other")
    assert (c.offset_lo, c.offset_hi) == (3, 10) and len(rest) == 1  # IN left for Spark
    assert Constraints().clip(3, 8) == (3, 8)


def _read_all(reader: EmbedlogReader, tasks: list[Any]) -> list[dict[str, Any]]:
    rows = [row for t in tasks for b in reader.read(t) for row in b.to_pylist()]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_pushdown_reader_plans_only_matching_segments(logdir: str) -> None:
    ds = EmbedlogDataSource({"path": logdir, "pushFilters": "true", "subscribePattern": ".*"})
    reader = ds.reader(kafka_schema())
    assert isinstance(reader, EmbedlogPushdownReader)
    reader.pushFilters([EqualTo(("topic",), "events"), EqualTo(("partition",), 1),
                        GreaterThanOrEqual(("offset",), 60), LessThan(("offset",), 64)])
    tasks = reader.partitions()
    assert [t.ranges for t in tasks] == [(("events", 1, 60, 64),)]
    with embedlog.open(logdir, read_only=True) as log:
        seg_size = max(s.size for s in log.segments("events", 1))
        assert len(log.segments("events", 1)) > 3
    assert tasks[0].size_bytes <= seg_size  # one segment's worth, not the partition
    assert _read_all(reader, tasks) == expected_rows(logdir, ranges={("events", 1): (60, 64)})


@pytest.mark.parametrize("pushed", [
    [EqualTo(("partition",), 1)],
    [EqualTo(("topic",), "events"), GreaterThan(("partition",), 0), LessThan(("partition",), 2)],
])
def test_offset_json_naming_partitions_the_filters_leave_out(logdir: str, pushed: Any) -> None:
    """The JSON options name every subscribed partition (Kafka's rule); filters that leave some
    of them out narrow the read, and never turn the JSON into an error."""
    opts = {"path": logdir, "subscribe": "events,other",
            "startingOffsets": '{"events": {"0": 5, "1": 7, "2": -2}, "other": {"0": -2}}',
            "endingOffsetsByTimestamp": json.dumps(
                {"events": dict.fromkeys("012", BASE_TS + 1000), "other": {"0": 0}})}
    plain = EmbedlogDataSource(opts).reader(kafka_schema())
    wanted = [r for r in _read_all(plain, plain.partitions())
              if r["topic"] == "events" and r["partition"] == 1]
    reader = EmbedlogDataSource({**opts, "pushFilters": "true"}).reader(kafka_schema())
    reader.pushFilters(pushed)
    tasks = reader.partitions()
    # record i (timestamp BASE_TS + 10 i) is offset i // 3 of partition i % 3
    assert [r for t in tasks for r in t.ranges] == [("events", 1, 7, 33)]
    assert _read_all(reader, tasks) == wanted
    assert [r["offset"] for r in wanted] == list(range(7, 33))


def test_timestamp_lower_bound_uses_the_time_index(logdir: str) -> None:
    reader = EmbedlogDataSource({"path": logdir, "pushFilters": "true",
                                 "subscribe": "events"}).reader(kafka_schema())
    cutoff = dt.datetime.fromtimestamp((BASE_TS + 2500) / 1000, tz=dt.timezone.utc)
    rest = reader.pushFilters([GreaterThanOrEqual(("timestamp",), cutoff)])
    assert len(rest) == 1  # timestamps need not grow with offsets: Spark re-checks
    tasks = reader.partitions()
    # record i (timestamp BASE_TS + 10 i) is offset i // 3 of partition i % 3
    starts = sorted((p, lo) for t in tasks for _, p, lo, _ in t.ranges)
    assert starts == [(0, 84), (1, 83), (2, 83)]
    rows = _read_all(reader, tasks)
    assert len(rows) == 50


def test_default_reader_does_not_override_push_filters(logdir: str) -> None:
    reader = EmbedlogDataSource({"path": logdir, "subscribe": "events"}).reader(kafka_schema())
    assert type(reader) is EmbedlogReader
    assert "pushFilters" not in EmbedlogReader.__dict__


def test_rate_limit_is_proportional_and_never_starves() -> None:
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 600, ("t", 1): 500, ("t", 2): 6}
    assert rate_limit(begin, latest, 500) == {("t", 0): 299, ("t", 1): 299, ("t", 2): 6}
    assert rate_limit(begin, latest, 10_000) == latest
    # offsets that went back keep their latest offset: the batch then reports the data loss
    assert rate_limit({("t", 0): 60, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 100}, 10) == {
        ("t", 0): 30, ("t", 1): 10}


@pytest.mark.parametrize("doc", [
    5, None, ["t"], {"t": 5}, {"t": [0, 1]}, {5: {"0": 1}},
    {"t": {"x": 1}}, {"t": {"-1": 0}}, {"t": {"\u0663": 1}}, {"t": {"2147483648": 0}},
    {"t": {"0": -5}}, {"t": {"0": 1.7}}, {"t": {"0": None}}, {"t": {"0": True}},
    {"t": {"0": "12"}}, {"t": {"0": 1 << 63}}, {"t": {"0": "x" * 10_000}},
], ids=lambda doc: repr(doc)[:40])
def test_offsets_spark_kept_in_its_checkpoint_are_checked(doc: Any) -> None:
    """Spark hands back the offsets it stored in its checkpoint folder: anything
    offsets_to_json does not write is damage, never a ValueError or AttributeError (or a
    negative partition or offset planned as a range)."""
    with pytest.raises(CorruptCheckpointError, match="Spark offsets") as caught:
        offsets_from_json(doc)
    assert len(str(caught.value)) < 400


def test_offsets_round_trip_through_spark_json() -> None:
    offsets = {("a", 0): 0, ("a", 2_147_483_647): (1 << 63) - 1, ("b.c-d", 7): 42}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    assert offsets_from_json({}) == {}
