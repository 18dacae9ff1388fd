"""Batch reads through Spark equal the Python API's reads, for every column and option."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spark_util import BASE_TS, expected_rows, make_log, project, spark_rows

import embedlog

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("spark-read") / "log")
    make_log(path)
    return path


def read(spark: Any, path: str, **options: Any) -> Any:
    """A batch read of every topic (``subscribePattern`` ``.*``) unless told otherwise."""
    if not {"subscribe", "subscribePattern", "assign"} & options.keys():
        options["subscribePattern"] = ".*"
    reader = spark.read.format("embedlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_schema_is_kafkas(spark: Any, logdir: str) -> None:
    df = read(spark, logdir)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
    ]
    headers = read(spark, logdir, includeHeaders="true").schema["headers"]
    assert headers.dataType.simpleString() == "array<struct<key:string,value:binary>>"


def test_full_read_with_headers_equals_python_api(spark: Any, logdir: str) -> None:
    got = spark_rows(read(spark, logdir, includeHeaders="true"))
    assert got == expected_rows(logdir, headers=True)
    assert len(got) == 320


def test_explicit_register_and_subscribe(spark: Any, logdir: str) -> None:
    import embedlog.spark

    embedlog.spark.register(spark)  # a no-op when Spark discovered the source
    got = spark_rows(read(spark, logdir, subscribe="other"))
    assert got == expected_rows(logdir, ["other"])


def test_pattern_and_assign(spark: Any, logdir: str) -> None:
    assert spark_rows(read(spark, logdir, subscribePattern="ev.*")) == expected_rows(
        logdir, ["events"])
    got = spark_rows(read(spark, logdir, assign=json.dumps({"events": [2], "other": [0]})))
    with embedlog.open(logdir, read_only=True) as log:
        ends = {("events", 2): log.end_offset("events", 2), ("other", 0): 20}
    assert got == expected_rows(logdir, ranges={tp: (0, e) for tp, e in ends.items()})


def test_json_offsets_and_min_partitions(spark: Any, logdir: str) -> None:
    start = {"events": {"0": 5, "1": -2, "2": 40}}
    end = {"events": {"0": 50, "1": 7, "2": -1}}
    df = read(spark, logdir, subscribe="events", startingOffsets=json.dumps(start),
              endingOffsets=json.dumps(end), minPartitions="9")
    assert df.rdd.getNumPartitions() >= 9
    with embedlog.open(logdir, read_only=True) as log:
        end2 = log.end_offset("events", 2)
    ranges = {("events", 0): (5, 50), ("events", 1): (0, 7), ("events", 2): (40, end2)}
    assert spark_rows(df) == expected_rows(logdir, ranges=ranges)


def test_timestamp_options(spark: Any, logdir: str) -> None:
    # events record i has timestamp BASE_TS + 10 i and lives in partition i % 3
    df = read(spark, logdir, subscribe="events", startingTimestamp=str(BASE_TS + 1000),
              endingOffsetsByTimestamp=json.dumps(
                  {"events": {"0": BASE_TS + 2000, "1": BASE_TS + 2000, "2": BASE_TS + 10**9}}))
    got = spark_rows(df.select("topic", "partition", "offset", "timestamp"))
    stamps = sorted(int(r["timestamp"].timestamp() * 1000) - BASE_TS for r in got)
    assert stamps == [10 * i for i in range(100, 300) if i % 3 == 2 or 10 * i < 2000]


def test_user_subset_schema_skips_columns(spark: Any, logdir: str) -> None:
    df = (spark.read.format("embedlog").schema("partition INT, offset BIGINT, timestamp TIMESTAMP")
          .option("subscribe", "events").load(logdir))
    assert df.columns == ["partition", "offset", "timestamp"]
    got = sorted(df.toArrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    want = project(expected_rows(logdir, ["events"]), ["partition", "offset", "timestamp"])
    assert got == want


def test_pushdown_reader_narrows_ranges(spark: Any, logdir: str) -> None:
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = read(spark, logdir, pushFilters="true").where(
            "topic = 'events' AND partition = 1 AND offset >= 10 AND offset < 20")
        assert spark_rows(df) == expected_rows(logdir, ranges={("events", 1): (10, 20)})
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "Filter (" not in plan and "+- Filter" not in plan  # all handled by the source
        # events record i has timestamp BASE_TS + 10 i: the last ten records qualify
        ts_df = read(spark, logdir, pushFilters="true", subscribe="events").where(
            f"timestamp >= timestamp_millis({BASE_TS + 2900})")
        got = spark_rows(ts_df.select("topic", "partition", "offset"))
        want = [r for r in expected_rows(logdir, ["events"])
                if r["timestamp"].timestamp() * 1000 >= BASE_TS + 2900]
        assert got == project(want, ["topic", "partition", "offset"]) and len(got) == 10
        # a literal in another session time zone still prunes to the same instant
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        local = read(spark, logdir, pushFilters="true", subscribe="events").where(
            "timestamp >= TIMESTAMP '2023-11-14 17:13:22.900'")  # BASE_TS + 2900 ms in UTC-5
        assert local.count() == 10
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def test_pushdown_option_without_the_conf_names_the_conf(spark: Any, logdir: str) -> None:
    with pytest.raises(Exception, match="filterPushdown"):
        read(spark, logdir, pushFilters="true").where("offset < 3").count()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": "{bad json"}, "endingOffsets"),
        ({"subscribe": "nope"}, "subscribe: topic"),
        ({"minPartitions": "-3"}, "minPartitions"),
        ({"startingOffsets": json.dumps({"events": {"0": 1}})}, "every selected partition"),
        ({"subscribe": "other", "startingOffsets": json.dumps({"other": {"0": 500}})},
         "failOnDataLoss"),
    ],
)
def test_bad_options_fail_with_a_clear_message(spark: Any, logdir: str,
                                               options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, logdir, **options).count()


def test_missing_directory_is_a_clear_error(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(Exception, match="no log directory"):
        read(spark, str(tmp_path / "absent")).count()


def test_plans_with_no_task_return_no_rows(spark: Any, logdir: str) -> None:
    with embedlog.open(logdir) as log:
        if "empty" not in log.topics():
            log.create_topic("empty", partitions=2)
    assert read(spark, logdir, subscribe="empty").count() == 0
    same = json.dumps({"other": {"0": 5}})
    assert read(spark, logdir, subscribe="other", startingOffsets=same,
                endingOffsets=same).count() == 0
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = read(spark, logdir, subscribe="other", pushFilters="true")
        assert df.where("offset > 1000").count() == 0
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def test_a_bad_option_fails_load_itself(spark: Any, logdir: str) -> None:
    from pyspark.errors import PySparkException

    for reader in (spark.read, spark.readStream):
        with pytest.raises(PySparkException, match="startingOffsets: not valid JSON"):
            (reader.format("embedlog").option("subscribe", "events")
             .option("startingOffsets", "bogus").load(logdir))


def test_load_needs_exactly_one_topic_selection_as_kafka(spark: Any, logdir: str) -> None:
    from pyspark.errors import PySparkException

    for reader in (spark.read, spark.readStream):
        with pytest.raises(PySparkException, match="one of the options subscribe, "
                           "subscribePattern, assign must be given"):
            reader.format("embedlog").load(logdir)
        with pytest.raises(PySparkException, match="only one of the options subscribe, "
                           "subscribePattern, assign can be given, got subscribe, assign"):
            (reader.format("embedlog").option("subscribe", "events")
             .option("assign", '{"events": [0]}').load(logdir))
