"""Planning and reading past one machine, without a JVM: only the selected partitions are
read, small partitions share a task, empty plans read nothing, offsets are resolved once per
query, the stream's initial offsets and trigger delay, read_committed, the writer-lock wait."""

from __future__ import annotations

import os
import threading
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.datasource import EqualTo, GreaterThan, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows
from pyspark.sql.types import BinaryType, StructField, StructType

import embedlog
from embedlog.errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UsageError,
    WriterLockedError,
)
from embedlog.segment import format as fmt
from embedlog.spark.catalog import FolderView
from embedlog.spark.options import parse_read_options, parse_write_options
from embedlog.spark.planning import OPEN_COST_BYTES, OffsetRange, pack, plan_batch
from embedlog.spark.scan import ReadTask
from embedlog.spark.schema import kafka_schema
from embedlog.spark.source import EmbedlogDataSource
from embedlog.spark.stream import EmbedlogStreamReader, source_metrics
from embedlog.spark.writer import EmbedlogWriter


def rows(reader: Any, tasks: list[Any]) -> list[tuple[str, int, int]]:
    got = [(r["topic"], r["partition"], r["offset"])
           for t in tasks for b in reader.read(t) for r in b.to_pylist()]
    return sorted(got)


@pytest.fixture
def many(tmp_path: Any) -> str:
    """``small``: 40 partitions of 3 records; ``big``: one partition of 200 in 5 segments;
    ``broken``: one empty partition."""
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("small", partitions=40)
        log.create_topic("big", partitions=1, config={"segment.bytes": 4096})
        log.create_topic("broken", partitions=1)
        for p in range(40):
            log.append_batch("small", [b"x", b"y", b"z"], partition=p)
        for _i in range(20):
            log.append_batch("big", [b"v" * 100] * 10)
    return path


def test_planning_reads_only_the_selected_partitions(many: str) -> None:
    broken = os.path.join(many, "broken-0")  # a planted link: opening the whole folder fails
    os.rename(broken, broken + ".real")
    os.symlink(broken + ".real", broken)
    with pytest.raises(embedlog.errors.StorageError):
        embedlog.open(many, read_only=True)  # the whole folder: the planted link fails it
    reader = EmbedlogDataSource({"path": many, "subscribe": "small,big"}).reader(kafka_schema())
    tasks = reader.partitions()
    assert len(rows(reader, tasks)) == 40 * 3 + 200


def test_small_partitions_share_a_task_and_big_ones_split(many: str) -> None:
    opts = {"path": many, "subscribe": "small", "minPartitions": "2"}
    reader = EmbedlogDataSource(opts).reader(kafka_schema())
    tasks = reader.partitions()
    assert len(tasks) == 2 and sum(len(t.ranges) for t in tasks) == 40
    assert rows(reader, tasks) == [("small", p, o) for p in range(40) for o in range(3)]
    # ranges are packed in order and never cut: 2,000 tiny ranges make few tasks
    tiny = [OffsetRange("t", p, 0, 3, 100) for p in range(2000)]
    packed = pack(tiny, max_partition_bytes=128 << 20, parallelism=2)
    assert 2 <= len(packed) <= 20
    assert [r for task in packed for r in task] == tiny
    huge = [OffsetRange("t", 0, 0, 10, 10 * OPEN_COST_BYTES)] * 3
    assert len(pack(huge, max_partition_bytes=5 * OPEN_COST_BYTES)) == 3
    # maxRecordsPerPartition caps the offsets of one task
    capped = EmbedlogDataSource({"path": many, "subscribe": "big",
                                 "maxRecordsPerPartition": "30"}).reader(kafka_schema())
    tasks = capped.partitions()
    assert all(sum(hi - lo for _, _, lo, hi in t.ranges) <= 30 for t in tasks)
    assert len(rows(capped, tasks)) == 200


@pytest.mark.parametrize("options", [
    {"subscribe": "small", "startingOffsets": '{"small": {"%d": 3}}'},
    {"subscribe": "big", "startingOffsets": '{"big": {"0": 50}}',
     "endingOffsets": '{"big": {"0": 50}}'},
])
def test_an_empty_plan_reads_no_rows(many: str, options: dict[str, str]) -> None:
    if "%d" in options["startingOffsets"]:
        table = {"small": {str(p): 3 for p in range(40)}}
        options = {**options, "startingOffsets": __import__("json").dumps(table)}
    reader = EmbedlogDataSource({"path": many, **options}).reader(kafka_schema())
    assert reader.partitions() == []
    # Spark hands read() one InputPartition(None) for an empty plan
    assert list(reader.read(InputPartition(None))) == []


def test_pushdown_matching_nothing_plans_nothing(many: str) -> None:
    reader = EmbedlogDataSource({"path": many, "pushFilters": "true",
                                 "subscribePattern": ".*"}).reader(kafka_schema())
    reader.pushFilters([EqualTo(("topic",), "big"), GreaterThan(("offset",), 10_000)])
    assert reader.partitions() == []


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory", "oversized", "bad json"])
def test_topic_metadata_is_read_as_the_log_reads_it(many: str, plant: str) -> None:
    """embedlog.json: a regular file of bounded size, else embedlog's own error (a FIFO must
    not block planning, a link must not be followed)."""
    meta = os.path.join(many, "embedlog.json")
    os.rename(meta, meta + ".real")
    if plant == "symlink":
        os.symlink(meta + ".real", meta)
    elif plant == "fifo":
        os.mkfifo(meta)
    elif plant == "directory":
        os.mkdir(meta)
    else:
        with open(meta, "wb") as f:
            f.write(b" " * (64 * 1024 * 1024 + 1) if plant == "oversized" else b"{nope")
    with pytest.raises(CorruptCheckpointError):
        FolderView(many).topics()


def test_a_kafka_folder_has_its_topics_from_the_partition_folders(many: str) -> None:
    os.unlink(os.path.join(many, "embedlog.json"))
    os.mkdir(os.path.join(many, "small-55.not-a-partition"))
    view = FolderView(many)
    assert view.topics() == ["big", "broken", "small"]
    assert [view.partition_count(t) for t in view.topics()] == [1, 1, 40]


def test_batch_offsets_are_resolved_once_per_query(many: str) -> None:
    class RetentionMeanwhile(FolderView):
        """Retention moves the log start right after planning first looks at it."""

        def _read_bounds(self, topic: str, partition: int) -> Any:
            bounds = super()._read_bounds(topic, partition)
            with embedlog.open(many) as log:
                log.delete_records(topic, partition, bounds.start + 10)
            return bounds

    opts = parse_read_options({"path": many, "subscribe": "big"}, streaming=False)
    planned = plan_batch(RetentionMeanwhile(many), opts)  # no "outside [...]" error
    assert planned[0][0].start == 0


def test_reads_leave_the_folder_untouched(many: str) -> None:
    def snapshot() -> dict[str, tuple[int, int]]:
        out = {}
        for d, _, files in os.walk(many):
            for f in files:
                st = os.stat(os.path.join(d, f))
                out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
        return out

    before = snapshot()
    reader = EmbedlogDataSource({"path": many, "subscribe": "small,big"}).reader(kafka_schema())
    rows(reader, reader.partitions())
    assert snapshot() == before


def test_options_are_checked_when_the_schema_is_asked(many: str) -> None:
    big = {"path": many, "subscribe": "big"}
    with pytest.raises(InvalidConfigError, match="startingOffsets"):
        EmbedlogDataSource({**big, "startingOffsets": "bogus"}).schema()
    with pytest.raises(InvalidConfigError, match="maxTriggerDelay"):
        EmbedlogDataSource({**big, "maxTriggerDelay": "soon"}).schema()
    with pytest.raises(InvalidConfigError, match=r"kafka\.isolation\.level"):
        EmbedlogDataSource({**big, "kafka.isolation.level": "x"}).schema()
    with pytest.raises(InvalidConfigError, match="subscribe, subscribePattern, assign"):
        EmbedlogDataSource({"path": many}).schema()
    # valid for one kind of query only: accepted here, checked by reader()/streamReader()
    EmbedlogDataSource({**big, "endingOffsets": "latest"}).schema()
    opts = parse_read_options({**big, "maxTriggerDelay": "2m",
                               "maxRecordsPerPartition": "5"}, streaming=True)
    assert (opts.max_trigger_delay_ms, opts.max_records_per_partition) == (120_000, 5)


# -- streaming ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stream(path: str, clock: Any = None, **options: str) -> EmbedlogStreamReader:
    opts = parse_read_options({"path": path, **options}, streaming=True)
    if clock is None:
        return EmbedlogStreamReader(opts, kafka_schema())
    return EmbedlogStreamReader(opts, kafka_schema(), clock=clock)


def test_latest_start_is_resolved_once(many: str) -> None:
    r = stream(many, subscribe="big")
    first = r.initialOffset()
    with embedlog.open(many) as log:
        log.append_batch("big", [b"new"] * 7)
    assert r.initialOffset() == first == {"big": {"0": 200}}
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert end == {"big": {"0": 207}}
    assert rows(r, r.partitions(first, end)) == [("big", 0, o) for o in range(200, 207)]


def test_max_trigger_delay_lets_a_trickle_through(many: str) -> None:
    clock = Clock()
    r = stream(many, clock, subscribe="big", startingOffsets="earliest",
               minOffsetsPerTrigger="1000", maxTriggerDelay="30s")
    start = r.initialOffset()
    assert r.latestOffset(start, ReadMinRows(1000)) == start  # 200 < 1000: wait
    clock.now += 29
    assert r.latestOffset(start, ReadMinRows(1000)) == start
    clock.now += 2  # 31 s since the query started
    end = r.latestOffset(start, ReadMinRows(1000))
    assert end == {"big": {"0": 200}}
    with embedlog.open(many) as log:
        log.append_batch("big", [b"more"] * 5)
    assert r.latestOffset(end, ReadMinRows(1000)) == end  # the delay starts again


def test_source_metrics_from_progress() -> None:
    source = {"endOffset": '{"t": {"0": 10, "1": 4}}', "latestOffset": '{"t": {"0": 15, "1": 4}}'}
    assert source_metrics(source) == {"avgOffsetsBehindLatest": "2.5",
                                      "maxOffsetsBehindLatest": "5",
                                      "minOffsetsBehindLatest": "0"}
    assert source_metrics({"endOffset": None}) == {}


# -- read_committed ----------------------------------------------------------------------------


def _txn_log(path: str) -> None:
    txn = {"producer_epoch": 0, "is_transactional": True, "timestamps": 0}

    def batch(values: list[bytes], **kw: Any) -> None:
        log._append_encoded("t", 0, bytearray(fmt.encode_batch(values, **kw)))

    def marker(pid: int, kind: int) -> None:
        key, value = fmt.control_record(kind)
        batch([value], keys=[key], producer_id=pid, is_control=True, **txn)

    with embedlog.open(path) as log:
        log.create_topic("t")
        batch([b"plain-1"], timestamps=0)                           # 0
        batch([b"A1"], producer_id=1, base_sequence=0, **txn)       # 1
        batch([b"B1"], producer_id=2, base_sequence=0, **txn)       # 2
        marker(1, fmt.CONTROL_COMMIT)                               # 3
        marker(2, fmt.CONTROL_ABORT)                                # 4
        batch([b"plain-2"], timestamps=0)                           # 5
        batch([b"C1"], producer_id=3, base_sequence=0, **txn)       # 6, still open


def test_read_committed_drops_aborted_records(tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    _txn_log(path)

    def values(**options: str) -> list[bytes]:
        reader = EmbedlogDataSource({"path": path, "subscribe": "t", **options}).reader(
            kafka_schema())
        return [r["value"] for t in reader.partitions() for b in reader.read(t)
                for r in b.to_pylist()]

    assert values(endingOffsets='{"t": {"0": 6}}') == [b"plain-1", b"A1", b"B1", b"plain-2"]
    committed = {"kafka.isolation.level": "read_committed"}
    assert values(endingOffsets='{"t": {"0": 6}}', **committed) == [
        b"plain-1", b"A1", b"plain-2"]
    # "latest" is the last stable offset (6: C1 is still open), as for a read_committed consumer
    assert values(**committed) == [b"plain-1", b"A1", b"plain-2"]
    with pytest.raises(OffsetOutOfRangeError, match="last stable offset"):
        values(endingOffsets='{"t": {"0": 7}}', **committed)
    # a task planned past it (the transaction was open when it ran) fails rather than skip
    reader = EmbedlogDataSource({"path": path, "subscribe": "t", **committed}).reader(
        kafka_schema())
    task = ReadTask(path, (("t", 0, 5, 7),), read_committed=True)
    with pytest.raises(UsageError, match="transaction still open"):
        list(reader.read(task))


def test_read_committed_stream_waits_for_open_transactions(tmp_path: Any) -> None:
    """Each trigger of a read_committed stream ends at the last stable offset: a transaction
    open at a trigger is read by a later one, once decided -- no task fails, no record is read
    twice or skipped, aborted ones never."""
    path = str(tmp_path / "log")
    _txn_log(path)  # offsets 0-5 decided, C1 (producer 3) open at 6
    opts = {"path": path, "subscribe": "t", "startingOffsets": "earliest",
            "kafka.isolation.level": "read_committed"}
    reader = EmbedlogDataSource(opts).streamReader(kafka_schema())

    def trigger(start: Any) -> tuple[Any, list[tuple[int, bytes]]]:
        end = reader.latestOffset(start, ReadAllAvailable())
        got = [(r["offset"], r["value"]) for t in reader.partitions(start, end)
               for b in reader.read(t) for r in b.to_pylist()]
        return end, got

    start = reader.initialOffset()
    end, got = trigger(start)
    assert end == {"t": {"0": 6}}
    assert got == [(0, b"plain-1"), (1, b"A1"), (5, b"plain-2")]
    txn = {"producer_epoch": 0, "is_transactional": True, "timestamps": 0}
    with embedlog.open(path) as log:
        log.append("t", b"plain-3")                                              # 7
        log._append_encoded("t", 0, bytearray(fmt.encode_batch(                 # 8
            [b"D1"], producer_id=4, base_sequence=0, **txn)))
        key, value = fmt.control_record(fmt.CONTROL_COMMIT)
        log._append_encoded("t", 0, bytearray(fmt.encode_batch(                 # 9
            [value], keys=[key], producer_id=3, is_control=True, **txn)))
    end2, got = trigger(end)  # C1 committed; D1 (producer 4) now open at 8
    assert end2 == {"t": {"0": 8}}
    assert got == [(6, b"C1"), (7, b"plain-3")]
    with embedlog.open(path) as log:
        key, value = fmt.control_record(fmt.CONTROL_ABORT)
        log._append_encoded("t", 0, bytearray(fmt.encode_batch(                 # 10
            [value], keys=[key], producer_id=4, is_control=True, **txn)))
        log.append("t", b"plain-4")                                              # 11
    end3, got = trigger(end2)
    assert end3 == {"t": {"0": 12}} and got == [(11, b"plain-4")]


# -- writes ------------------------------------------------------------------------------------


def _staged_write(path: str, **options: str) -> EmbedlogWriter:
    schema = StructType([StructField("value", BinaryType())])
    writer = EmbedlogWriter(parse_write_options({"path": path, "topic": "t", **options}),
                            schema, False)
    return writer


def test_a_write_into_a_tiered_log_names_its_remote(tmp_path: Any) -> None:
    """A Spark write opens the log as its writer: into a tiered folder only with the remote
    named (``remoteUri``), never the one a file in the folder names alone."""
    remote = tmp_path / "remote"
    remote.mkdir()
    path = str(tmp_path / "log")
    with embedlog.open(path, remote_uri=remote.as_uri(), upkeep=False) as log:
        log.create_topic("t", config={"remote.storage.enable": True})
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    unnamed = _staged_write(path)
    with pytest.raises(embedlog.UsageError, match="remote_uri="):
        unnamed.commit([unnamed.write(iter([batch]))])
    named = _staged_write(path, remoteUri=remote.as_uri())
    named.commit([named.write(iter([batch]))])
    with embedlog.open(path, read_only=True) as log:
        assert [r.value for r in log.read("t", 0)] == [b"a", b"b"]
    with pytest.raises(InvalidConfigError, match="remoteUri"):
        parse_write_options({"path": path, "remoteUri": "no-scheme"})


def test_a_write_waits_for_the_writer_lock(tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    with embedlog.open(path) as log:
        log.create_topic("t")
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b"]})
    writer = _staged_write(path)
    staged = writer.write(iter([batch]))
    holder = embedlog.open(path)  # e.g. a running producer
    releaser = threading.Timer(0.2, holder.close)
    releaser.start()
    try:
        writer.commit([staged])  # waits instead of failing at once
    finally:
        releaser.join()
    with embedlog.open(path, read_only=True) as log:
        assert [r.value for r in log.read("t", 0)] == [b"a", b"b"]

    impatient = _staged_write(path, writerLockTimeoutMs="50")
    staged = impatient.write(iter([batch]))
    with embedlog.open(path), pytest.raises(WriterLockedError, match="writerLockTimeoutMs=50"):
        impatient.commit([staged])
    with pytest.raises(InvalidConfigError, match="writerLockTimeoutMs"):
        parse_write_options({"path": path, "writerLockTimeoutMs": "-1"})
