"""The JVM reader (``embedlog.DefaultSource``, built by :mod:`embedlog.spark.jvm`): a scan it
reads returns exactly the rows of the Python reader, for every column subset, codec, batch kind
and range; ``count(*)`` comes from batch headers and equals the rows; ``read_committed`` leaves
out aborted transactions as the Python reader does; ``jvmReader=false`` keeps the Python reader;
tasks the JVM does not read (a ``file://`` log) go through the Python reader inside the same
columnar scan."""

from __future__ import annotations

import os
import time
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
from spark_util import BASE_TS, make_log, run_available_now, spark_rows

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import embedlog
from embedlog.spark import jvm

pytestmark = pytest.mark.spark

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def jvm_spark(spark: Any) -> Any:
    """The shared session, when it has the JVM reader (a ``javac`` to build it, and not
    ``EMBEDLOG_SPARK_JVM=0``)."""
    return _with_jvm(spark)


def _with_jvm(spark: Any) -> Any:
    jar = jvm.jar_path(build=False)
    if jar is None or jar not in spark.sparkContext.getConf().get("spark.jars", ""):
        pytest.skip("the session has no JVM reader (no javac, or EMBEDLOG_SPARK_JVM=0)")
    return spark


@pytest.fixture(params=[True, False], ids=["jvm", "python"])
def reader_spark(request: pytest.FixtureRequest, spark: Any) -> tuple[Any, bool]:
    """The shared session and which reader a test reads with (the JVM one only when the
    session has it; the Python one always)."""
    return (_with_jvm(spark) if request.param else spark), request.param


@pytest.fixture(scope="module")
def richlog(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every codec, headers with null values, null keys/values, several segments, a
    LOG_APPEND_TIME topic, committed and aborted transactions, a compacted topic with offset
    gaps, and a log start inside a segment."""
    path = str(tmp_path_factory.mktemp("jvm") / "log")
    make_log(path)
    with embedlog.open(path) as log:
        for codec in CODECS:
            log.create_topic(f"c-{codec}", partitions=2,
                             config={"compression.type": codec, "segment.bytes": 4096})
            for p in range(2):
                log.append_batch(
                    f"c-{codec}", [f"{codec}-{p}-{i}".encode() * (i % 5) for i in range(400)],
                    keys=[None if i % 9 == 0 else b"k%d" % (i % 17) for i in range(400)],
                    partition=p, timestamps=[BASE_TS + i for i in range(400)])
        log.create_topic("appended", partitions=1,
                         config={"message.timestamp.type": "LogAppendTime"})
        log.append_batch("appended", [b"a%d" % i for i in range(50)])
        _transactions(log)
        _compacted(log)
        log.create_topic("trimmed", partitions=1, config={"segment.bytes": 1024})
        log.append_batch("trimmed", [b"t%d" % i for i in range(300)])
        log.delete_records("trimmed", 0, 137)
    return path


def _transactions(log: embedlog.Log) -> None:
    log.create_topic("tx", partitions=1)
    producer = log.producer(transactional_id="tx-id")
    producer.init_transactions()
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(30):
            producer.send("tx", f"{outcome}-{i}".encode(), partition=0)
        if outcome == "commit":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()


def _compacted(log: embedlog.Log) -> None:
    log.create_topic("compact", partitions=1,
                     config={"cleanup.policy": "compact", "segment.bytes": 2048})
    for round_ in range(6):
        log.append_batch("compact", [f"v{round_}-{i}".encode() for i in range(40)],
                         keys=[b"k%d" % (i % 10) for i in range(40)], partition=0)
    log.compact("compact")


def read(spark: Any, path: str, *, jvm_reader: bool = True, **options: Any) -> Any:
    reader = (spark.read.format("embedlog").option("subscribePattern", ".*")
              .option("includeHeaders", "true").option("jvmReader", str(jvm_reader).lower()))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_the_jar_holds_the_source_spark_finds(jvm_spark: Any) -> None:
    jar = jvm.jar_path(build=False)
    assert jar is not None
    with zipfile.ZipFile(jar) as z:
        assert "embedlog/DefaultSource.class" in z.namelist()
    assert jvm.jar_path() == jar  # built once: the same digest names the same jar


def test_every_row_equals_the_python_reader(jvm_spark: Any, richlog: str) -> None:
    df = read(jvm_spark, richlog)
    assert "JVM reader" in plan(df)
    python = read(jvm_spark, richlog, jvm_reader=False)
    assert "JVM reader" not in plan(python)
    got = spark_rows(df)
    assert got == spark_rows(python)
    topics = {r["topic"] for r in got}
    assert {f"c-{c}" for c in CODECS} | {"appended", "tx", "compact", "trimmed"} <= topics
    assert any(r["headers"] and r["headers"][1]["value"] is None for r in got)
    assert {r["timestampType"] for r in got if r["topic"] == "appended"} == {1}
    assert min(r["offset"] for r in got if r["topic"] == "trimmed") == 137
    # read_uncommitted: what Log.read returns (aborted records written too), never markers
    with embedlog.open(richlog, read_only=True) as log:
        tx = [r.value for r in log.read("tx", 0)]
    assert sorted(r["value"] for r in got if r["topic"] == "tx") == sorted(tx)


@pytest.mark.parametrize("columns", [
    ["value"], ["offset", "partition"], ["topic", "timestamp"], ["headers", "key"],
    ["timestampType", "value", "offset"],
])
def test_pruned_columns_equal_the_python_reader(jvm_spark: Any, richlog: str,
                                                columns: list[str]) -> None:
    df = read(jvm_spark, richlog).select(*columns)
    scan = plan(df)
    assert "JVM reader" in scan
    scanned = scan.split("BatchScan embedlog[")[1].split("]")[0]
    assert {attr.split("#")[0] for attr in scanned.split(", ")} == set(columns)  # pruned
    python = read(jvm_spark, richlog, jvm_reader=False).select(*columns)
    key = sorted(columns)
    assert sorted(map(repr, df.toArrow().select(key).to_pylist())) == \
        sorted(map(repr, python.toArrow().select(key).to_pylist()))


def test_count_comes_from_the_scan_and_equals_the_rows(jvm_spark: Any, richlog: str) -> None:
    df = read(jvm_spark, richlog)
    counted = df.groupBy().count()
    assert "count(*) from batch headers" in plan(counted)
    assert counted.collect()[0][0] == read(jvm_spark, richlog, jvm_reader=False).count()
    one = read(jvm_spark, richlog, startingOffsets='{"c-zstd": {"0": 7, "1": 0}}',
               endingOffsets='{"c-zstd": {"0": 333, "1": 1}}',
               subscribePattern="c-zstd")
    assert one.count() == (333 - 7) + 1


@pytest.mark.parametrize("options", [
    {"startingOffsets": '{"c-lz4": {"0": 13, "1": 250}}',
     "endingOffsets": '{"c-lz4": {"0": 371, "1": 251}}', "subscribePattern": "c-lz4"},
    {"minPartitions": "7"},
    {"maxRecordsPerPartition": "45"},
    {"maxRecordsPerBatch": "3"},
    {"startingOffsets": '{"compact": {"0": 5}}', "subscribePattern": "compact"},
])
def test_ranges_and_task_splits_equal_the_python_reader(jvm_spark: Any, richlog: str,
                                                        options: dict[str, str]) -> None:
    assert spark_rows(read(jvm_spark, richlog, **options)) == \
        spark_rows(read(jvm_spark, richlog, jvm_reader=False, **options))


def test_read_committed_is_read_by_the_jvm(jvm_spark: Any, richlog: str) -> None:
    rc = {"kafka.isolation.level": "read_committed"}
    df = read(jvm_spark, richlog, subscribePattern="tx|c-lz4", **rc)
    assert "JVM reader" in plan(df)
    rows = spark_rows(df)
    assert rows == spark_rows(read(jvm_spark, richlog, jvm_reader=False,
                                   subscribePattern="tx|c-lz4", **rc))
    assert sorted(r["value"] for r in rows if r["topic"] == "tx") == sorted(
        f"commit-{i}".encode() for i in range(30) for _ in range(2))
    assert df.groupBy().count().collect()[0][0] == len(rows) == 60 + 800
    one = read(jvm_spark, richlog, subscribePattern="tx", minPartitions="7", **rc)
    assert sorted(r["offset"] for r in spark_rows(one)) == sorted(
        r["offset"] for r in rows if r["topic"] == "tx")  # ranges cut inside transactions


def test_read_committed_stops_at_an_open_transaction(jvm_spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("o", partitions=1)
        log.append_batch("o", [b"before"])
        producer = log.producer(transactional_id="open-id")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("o", b"open", partition=0)
        producer.flush()
        log.append_batch("o", [b"after"])
        df = read(jvm_spark, path, **{"kafka.isolation.level": "read_committed"})
        assert [r["value"] for r in spark_rows(df)] == [b"before"]
        assert df.count() == 1
        producer.abort_transaction()
        producer.close()
    df = read(jvm_spark, path, **{"kafka.isolation.level": "read_committed"})
    assert [r["value"] for r in spark_rows(df)] == [b"before", b"after"]


def _stream(spark: Any, path: str, checkpoint: str, jvm_reader: bool = True,
            **options: str) -> tuple[list[list[tuple[int, int, bytes]]], str]:
    """An availableNow stream of ``path`` run to its end: each micro-batch's (partition, offset,
    value) rows, and the source's description in the last progress."""
    batches: list[list[tuple[int, int, bytes]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(sorted((r["partition"], r["offset"], r["value"])
                              for r in df.toArrow().to_pylist()))

    query = run_available_now(spark, path, checkpoint, collect,
                              {"jvmReader": str(jvm_reader).lower(), **options})
    progress = query.lastProgress or {"sources": [{"description": ""}]}
    return [b for b in batches if b], progress["sources"][0]["description"]


def test_streams_are_read_by_the_jvm(jvm_spark: Any, richlog: str, tmp_path: Any) -> None:
    got, source = _stream(jvm_spark, richlog, str(tmp_path / "a"), subscribe="c-zstd",
                          maxOffsetsPerTrigger="300")
    assert "JVM reader" in source
    assert [len(b) for b in got] == [300, 300, 200]  # admission control: the Python stream's
    want, source = _stream(jvm_spark, richlog, str(tmp_path / "b"), jvm_reader=False,
                           subscribe="c-zstd", maxOffsetsPerTrigger="300")
    assert "JVM reader" not in source and got == want
    committed, _ = _stream(jvm_spark, richlog, str(tmp_path / "c"), subscribe="tx",
                           **{"kafka.isolation.level": "read_committed"})
    assert sorted(v for b in committed for _, _, v in b) == sorted(
        f"commit-{i}".encode() for i in range(30) for _ in range(2))


def test_a_uri_log_goes_through_the_python_reader_in_a_columnar_scan(
        jvm_spark: Any, richlog: str) -> None:
    uri = "file://" + os.path.abspath(richlog)
    df = read(jvm_spark, uri, subscribePattern="c-gzip|appended")
    assert "JVM reader" in plan(df)
    assert spark_rows(df) == spark_rows(read(jvm_spark, richlog, jvm_reader=False,
                                             subscribePattern="c-gzip|appended"))
    assert df.groupBy().count().collect()[0][0] == 850


def test_an_empty_plan_reads_nothing(jvm_spark: Any, richlog: str) -> None:
    df = read(jvm_spark, richlog, subscribePattern="trimmed",
              startingOffsets='{"trimmed": {"0": 200}}', endingOffsets='{"trimmed": {"0": 200}}')
    assert df.count() == 0
    assert df.collect() == []


def test_a_bad_jvm_reader_option_fails_load(jvm_spark: Any, richlog: str) -> None:
    with pytest.raises(Exception, match="jvmReader"):
        read(jvm_spark, richlog, jvm_reader=True, jvmReader="maybe")


def test_no_javac_means_no_jar_and_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("EMBEDLOG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jvm, "_javac", lambda: None)
    assert jvm.jar_path() is None
    monkeypatch.setattr(jvm, "_javac", lambda: "/bin/false")
    with caplog.at_level("WARNING", logger="embedlog.spark.jvm"):
        assert jvm.jar_path() is None
    assert "not built" in caplog.text
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left


def test_a_build_removes_only_stale_jars_of_other_digests(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    monkeypatch.setenv("EMBEDLOG_CACHE_DIR", str(cache))
    monkeypatch.setattr(jvm, "_javac", lambda: "javac")
    monkeypatch.setattr(jvm, "_build", lambda _j, _s, _p, target: target.write_bytes(b"jar"))
    old = time.time() - jvm.STALE_AFTER_S - 60

    def jar(digit: str, suffix: str = "") -> Any:
        return cache / f"embedlog-spark-{digit * 16}.jar{suffix}"

    stale, recent, other, linked, folder = jar("a"), jar("b"), jar("c", ".tmp"), jar("d"), jar("e")
    target = outside / "keep.jar"
    for path in (stale, recent, other, target):
        path.write_bytes(b"old")
    linked.symlink_to(target)
    folder.mkdir()
    for path in (stale, other, target, folder):
        os.utime(path, (old, old))
    os.utime(linked, (old, old), follow_symlinks=False)
    built = jvm.jar_path()
    assert built is not None and os.path.isfile(built)
    left = sorted(p.name for p in cache.iterdir())
    assert stale.name not in left
    assert sorted([recent.name, other.name, linked.name, folder.name,
                   os.path.basename(built)]) == left
    assert target.read_bytes() == b"old"
    assert jvm.jar_path() == built  # found, not built again


@pytest.mark.parametrize(("value", "enabled"), [("0", False), ("off", False), ("1", True),
                                                ("", True)])
def test_the_environment_switch(monkeypatch: pytest.MonkeyPatch, value: str,
                                enabled: bool) -> None:
    monkeypatch.setenv(jvm.JVM_ENV, value)
    assert jvm.jvm_enabled() is enabled


def _planned(df: Any) -> Any:
    """The query's RDD: its tasks planned (the Python planner ran), none run yet."""
    return df._jdf.queryExecution().executedPlan().execute()


def _small_log(path: str, records: int = 200) -> None:
    with embedlog.open(path) as log:
        log.create_topic("d", partitions=1, config={"segment.bytes": 1024})
        log.append_batch("d", [b"x%d" % i for i in range(records)])


def _data_loss_after_planning(reader_spark: tuple[Any, bool], path: str,
                              change: Callable[[embedlog.Log], object], left: int,
                              **options: str) -> None:
    """Plan a read of ``path`` with failOnDataLoss true and false, ``change`` the log, then run
    both: the first fails naming failOnDataLoss, the second reads the ``left`` rows left."""
    spark, jvm_reader = reader_spark
    planned = {flag: _planned(read(spark, path, jvm_reader=jvm_reader,
                                   failOnDataLoss=flag, **options))
               for flag in ("true", "false")}
    with embedlog.open(path) as log:
        change(log)
    with pytest.raises(Exception, match="failOnDataLoss"):
        planned["true"].count()
    assert planned["false"].count() == left


def test_records_deleted_after_planning_are_data_loss(reader_spark: tuple[Any, bool],
        tmp_path: Any) -> None:
    """As the Python reader: a range whose start was deleted after planning fails the task
    naming failOnDataLoss, or with failOnDataLoss=false reads what is left."""
    path = str(tmp_path / "log")
    _small_log(path)
    _data_loss_after_planning(reader_spark, path, lambda log: log.delete_records("d", 0, 120),
                              80, subscribePattern="d")


def test_a_partition_shorter_than_planned_is_data_loss(reader_spark: tuple[Any, bool],
        tmp_path: Any) -> None:
    """The topic deleted and created again with fewer records after planning: the planned end
    is past the partition's end."""
    path = str(tmp_path / "log")
    _small_log(path)

    def recreate(log: embedlog.Log) -> None:
        log.delete_topic("d")
        log.create_topic("d", partitions=1)
        log.append_batch("d", [b"y%d" % i for i in range(10)])

    _data_loss_after_planning(reader_spark, path, recreate, 10, subscribePattern="d")


def test_a_task_the_jvm_leaves_half_way_is_finished_by_the_python_reader(
        jvm_spark: Any, tmp_path: Any) -> None:
    """Two small partitions share one task; the second shows a compaction swap in progress (a
    ``.swap`` copy of its segment), which the JVM leaves to the Python reader: its rows come
    from there, the first partition's rows once, from the JVM."""
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("s", partitions=2)
        for p in range(2):
            log.append_batch("s", [b"s%d-%d" % (p, i) for i in range(40)], partition=p)
    expected = spark_rows(read(jvm_spark, path, jvm_reader=False, subscribePattern="s"))
    segment = os.path.join(path, "s-1", "00000000000000000000.log")
    with open(segment, "rb") as f, open(segment + ".swap", "wb") as out:
        out.write(f.read())
    df = read(jvm_spark, path, subscribePattern="s", maxRecordsPerBatch="7", minPartitions="1")
    assert df.rdd.getNumPartitions() == 1
    assert spark_rows(df) == expected
    assert df.groupBy().count().collect()[0][0] == 80


def test_a_topic_deleted_after_planning_is_data_loss(reader_spark: tuple[Any, bool],
        tmp_path: Any) -> None:
    """As Spark's Kafka source: an error naming failOnDataLoss, or with failOnDataLoss=false
    the rows of what is left (here the other topic of the same task)."""
    path = str(tmp_path / "log")
    _small_log(path)
    with embedlog.open(path) as log:
        log.create_topic("e", partitions=1)
        log.append_batch("e", [b"e%d" % i for i in range(20)])
    _data_loss_after_planning(reader_spark, path, lambda log: log.delete_topic("d"), 20,
                              subscribePattern="d|e", minPartitions="1")


def test_planned_tasks_name_the_dense_topics_planning_read(richlog: str) -> None:
    """The JVM reader applies the dense-active-segment rule to the topics embedlog created:
    planning hands them on from the embedlog.json it read (no second read)."""
    from embedlog.spark.schema import kafka_schema
    from embedlog.spark.source import EmbedlogDataSource

    reader = EmbedlogDataSource({"path": richlog, "subscribePattern": "c-.*|appended"}).reader(
        kafka_schema())
    tasks = reader.partitions()
    assert tasks and all(set(t.dense) == {r[0] for r in t.ranges} for t in tasks)
    committed = EmbedlogDataSource({"path": richlog, "subscribePattern": "tx",
                                    "kafka.isolation.level": "read_committed"}).reader(
        kafka_schema()).partitions()
    assert committed and all(t.read_committed and t.dense == ("tx",) for t in committed)
