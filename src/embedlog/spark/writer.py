"""``df.write.format("embedlog").mode("append").save(path)``: append rows as records.

Columns, as Spark's Kafka sink expects them: ``value`` (binary or string, required; null =
tombstone), ``key`` (binary or string), ``topic`` (string; the ``topic`` option overrides it),
``partition`` (int; else Kafka's key-hash partitioner), ``headers``
(``array<struct<key: string, value: binary>>``) and ``timestamp`` (timestamp; else append time).
Other columns are ignored, as Kafka's sink does.

Only the process holding the log's writer lock may append, so executors never touch the log:

1. each task writes its rows to an Arrow IPC file under ``<log>/.spark-staging/<job>/`` and
   returns the file name in its commit message;
2. the driver's :meth:`EmbedlogWriter.commit` first checks every staged row (topic exists,
   partition in range, timestamp not before 1970, no null header or header key), then appends
   them through one writer in task order -- each partition gets its rows in row order, rows
   with and without a ``partition`` interleaved as they come -- and removes the staging
   folder;
3. :meth:`EmbedlogWriter.abort` only removes the staging folder (and leaves a marker so that
   tasks still running drop their files).

So a failed job, or a bad row anywhere, leaves the log untouched. (A crash of the driver in the
middle of step 2 can leave a prefix of the job appended, as a crashed Kafka producer can.)
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from ..errors import CorruptionError, InvalidConfigError, UnknownTopicError, WriterLockedError
from ..log import Log
from ..log import open as open_log
from ..naming import SPARK_STAGING_DIR
from . import staging
from .options import WriteOptions
from .scan import planning_log
from .schema import HEADERS_TYPE

__all__ = ["EmbedlogStreamWriter", "EmbedlogWriter", "StagedFile"]

APPEND_BYTES = 512 * 1024
"""Target key+value bytes per ``append_batch`` call: well under ``max.message.bytes``."""

_STRINGY = (BinaryType(), StringType())


@dataclass(frozen=True)
class StagedFile(WriterCommitMessage):  # type: ignore[misc]
    """What one write task staged: an Arrow IPC file of its rows."""

    path: str
    rows: int
    task: int


class EmbedlogWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Stages rows on executors and appends them on the driver at commit."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidConfigError(
                "mode: the embedlog sink only appends; use .mode('append')"
            )
        self.options = options
        self.columns = _check_schema(schema, options.topic is not None)
        if not os.path.isdir(options.path):
            raise InvalidConfigError(f"path: no log directory at {options.path}")
        if options.topic is not None and not _topic_exists(options.path, options.topic):
            raise UnknownTopicError(
                f"topic: {options.topic!r} does not exist in {options.path}; create it first "
                "(embedlog.open(path).create_topic(...))"
            )
        self.staging = os.path.join(options.path, SPARK_STAGING_DIR, uuid.uuid4().hex)

    # -- executors ---------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        if staging.is_aborted(self.staging):
            return StagedFile("", 0, task)
        renamed = (
            pa.RecordBatch.from_arrays(
                batch.select([orig for orig, _ in self.columns]).columns,
                names=[name for _, name in self.columns],
            )
            for batch in iterator
        )
        path, rows = staging.stage(self.staging, task, renamed)
        if rows and staging.is_aborted(self.staging):  # the job failed while this task ran
            staging.remove_file(path)
            return StagedFile("", 0, task)
        return StagedFile(path, rows, task)

    # -- driver ------------------------------------------------------------------------------

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        staged = sorted(
            (m for m in messages if isinstance(m, StagedFile) and m.rows),
            key=lambda m: (m.task, m.path),
        )
        try:
            if staged:
                with _open_for_write(self.options) as log:
                    for m in staged:  # every row is checked before the first append
                        keys = ("topic", "partition", "timestamp", "headers")
                        self._validate(log, staging.read_staged(self.staging, m.path, keys))
                    for m in staged:
                        self._append(log, staging.read_staged(self.staging, m.path))
        finally:
            self._cleanup(staged)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # Tasks of a failed job may still be running: the marker tells them to drop their file.
        jobs = self._jobs(m for m in messages if isinstance(m, StagedFile) and m.rows)
        for job in jobs:
            staging.mark_aborted(job)
            staging.cleanup(job)

    def _cleanup(self, staged: Iterable[StagedFile]) -> None:
        for job in self._jobs(staged):
            staging.cleanup(job)

    def _jobs(self, staged: Iterable[StagedFile]) -> list[str]:
        """This writer's job folder and those the messages name (a streaming query's tasks
        stage under the job folder of their own copy of the writer)."""
        jobs = {self.staging}
        for m in staged:
            with contextlib.suppress(CorruptionError):
                jobs.add(staging.job_of(self.staging, m.path))
        return sorted(jobs)

    def _by_topic(self, table: pa.Table) -> Iterator[tuple[str | None, pa.Table]]:
        """The rows of each target topic (the ``topic`` option wins over the column)."""
        if self.options.topic is not None:
            yield self.options.topic, table
            return
        topics = table.column("topic")
        for name in pc.unique(topics).to_pylist():
            mask = pc.is_null(topics) if name is None else pc.fill_null(
                pc.equal(topics, name), False)
            yield name, table.filter(mask)

    def _validate(self, log: Log, table: pa.Table) -> None:
        """Raise before anything is appended if a row cannot be written: besides topic and
        partition, what the log itself would refuse mid-commit (a timestamp before 1970, a
        null header or header key), so that a bad row anywhere appends nothing."""
        _check_rows(table)
        known = set(log.topics())
        for topic, rows in self._by_topic(table):
            if topic is None:
                raise InvalidConfigError(
                    "topic: a row has a null topic column and no 'topic' option is set"
                )
            if topic not in known:
                raise UnknownTopicError(f"topic {topic!r} does not exist in {self.options.path}")
            if "partition" in rows.column_names and rows.column("partition").null_count < len(
                rows
            ):
                col = rows.column("partition")
                lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
                count = log.partition_count(topic)
                if lo < 0 or hi >= count:
                    raise InvalidConfigError(
                        f"partition: values {lo}..{hi} for topic {topic!r} are outside "
                        f"0..{count - 1}"
                    )

    def _append(self, log: Log, table: pa.Table) -> None:
        """Append in row order per (topic, partition); no partition column = Kafka's key
        partitioner (``append_batch`` without ``partition``)."""
        for topic, rows in self._by_topic(table.combine_chunks()):
            assert topic is not None  # checked by _validate
            if "partition" not in rows.column_names:
                groups: list[tuple[int | None, pa.Table]] = [(None, rows)]
            else:
                groups = [group for lo, hi in _null_runs(rows.column("partition"))
                          for group in _by_partition(rows.slice(lo, hi - lo))]
            for partition, sub in groups:
                for lo, hi in _chunks(sub):
                    _append_rows(log, topic, partition, sub.slice(lo, hi - lo))


class EmbedlogStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """``writeStream.format("embedlog")``: each micro-batch is staged and committed exactly
    like a batch write. Delivery is at least once, as with Spark's Kafka sink: a batch replayed
    after a driver crash between the append and Spark's commit log is appended again."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self._writer = EmbedlogWriter(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        return self._writer.write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        self._writer.commit(messages)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        self._writer.abort(messages)


def _by_partition(rows: pa.Table) -> list[tuple[int | None, pa.Table]]:
    """The rows of each ``partition`` value, in row order within each."""
    pcol = rows.column("partition")
    return [(p, rows.filter(pc.is_null(pcol) if p is None
                            else pc.fill_null(pc.equal(pcol, p), False)))
            for p in pc.unique(pcol).to_pylist()]


def _null_runs(col: pa.ChunkedArray) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` where ``col`` is null throughout or set throughout. Rows with
    no partition go where the key partitioner puts them, possibly into a partition other
    rows name: appending run by run keeps every partition's records in row order."""
    nulls = pc.is_null(col).to_numpy(zero_copy_only=False)
    cuts = [0, *(np.flatnonzero(nulls[1:] != nulls[:-1]) + 1).tolist(), len(nulls)]
    return [(lo, hi) for lo, hi in itertools.pairwise(cuts) if hi > lo]


def _check_rows(table: pa.Table) -> None:
    """Timestamps and headers the log accepts (Kafka's producer refuses the same)."""
    if "timestamp" in table.column_names:
        micros = table.column("timestamp").cast(pa.int64())
        low = pc.min(micros).as_py()
        if low is not None and low < 0:
            raise InvalidConfigError(
                "timestamp: a row's timestamp is before 1970-01-01 (epoch milliseconds "
                "must be >= 0)")
    if "headers" in table.column_names:
        flat = pc.list_flatten(table.column("headers"))
        if flat.null_count or pc.struct_field(flat, [0]).null_count:
            raise InvalidConfigError("headers: a header, or a header's key, is null")


def _open_for_write(options: WriteOptions) -> Log:
    """Open the log as its writer, waiting up to ``writerLockTimeoutMs`` for the writer lock
    (a producer or another writer may hold it for a while)."""
    path, timeout_ms = options.path, options.lock_timeout_ms
    deadline = time.monotonic() + timeout_ms / 1000
    pause = 0.01
    while True:
        try:
            return open_log(path, remote_uri=options.remote_uri)
        except WriterLockedError:
            if time.monotonic() >= deadline:
                raise WriterLockedError(
                    f"{path}: another process or handle kept the log's writer lock for "
                    f"writerLockTimeoutMs={timeout_ms}; every Spark write is appended by the "
                    "driver as the log's one writer, so close the other writer (or raise "
                    "writerLockTimeoutMs) and retry. Nothing of this write was appended"
                ) from None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)


def _topic_exists(path: str, topic: str) -> bool:
    with planning_log(path) as log:
        return topic in log.topics()


def _append_rows(log: Log, topic: str, partition: int | None, rows: pa.Table) -> None:
    values = _binary_list(rows.column("value"))
    keys = _binary_list(rows.column("key")) if "key" in rows.column_names else None
    headers = None
    if "headers" in rows.column_names:
        headers = [
            None if h is None else [(e["key"], e["value"]) for e in h]
            for h in rows.column("headers").to_pylist()
        ]
    timestamps: int | list[int] | None = None
    if "timestamp" in rows.column_names:
        micros = rows.column("timestamp").cast(pa.int64())
        if micros.null_count:
            micros = pc.fill_null(micros, time.time_ns() // 1000)
        timestamps = (micros.to_numpy() // 1000).tolist()
    log.append_batch(topic, values, keys=keys, headers=headers, timestamps=timestamps,
                     partition=partition)


def _binary_list(col: pa.ChunkedArray) -> list[bytes | None]:
    if col.type == pa.string():
        col = col.cast(pa.binary())
    out: list[bytes | None] = col.to_pylist()
    return out


def _chunks(table: pa.Table) -> Iterator[tuple[int, int]]:
    """Row ranges of about :data:`APPEND_BYTES` key+value bytes each."""
    n = table.num_rows
    sizes = np.zeros(n, dtype=np.int64)
    for name in ("key", "value"):
        if name in table.column_names:
            col = table.column(name)
            lengths = pc.binary_length(col) if col.type != pa.string() else pc.utf8_length(col)
            sizes += pc.fill_null(lengths, 0).to_numpy(zero_copy_only=False)
    cum = np.cumsum(sizes + 64)  # 64 ~ per-record overhead
    lo = 0
    while lo < n:
        base = cum[lo - 1] if lo else 0
        hi = int(np.searchsorted(cum, base + APPEND_BYTES, side="right"))
        hi = max(hi, lo + 1)
        yield lo, min(hi, n)
        lo = hi


def _check_schema(schema: StructType, topic_option: bool) -> tuple[tuple[str, str], ...]:
    """``(DataFrame column, sink column)`` pairs the sink uses, checked like Spark's Kafka sink
    checks them (names case-insensitively)."""
    fields = {f.name.lower(): f for f in schema.fields}
    wanted: dict[str, tuple[DataType, ...]] = {
        "value": _STRINGY,
        "key": _STRINGY,
        "topic": (StringType(),),
        "partition": (IntegerType(),),
        "headers": (HEADERS_TYPE,),
        "timestamp": (TimestampType(),),
    }
    if "value" not in fields:
        raise InvalidConfigError("schema: the DataFrame needs a 'value' column (binary or string)")
    if "topic" not in fields and not topic_option:
        raise InvalidConfigError(
            "topic: set .option('topic', ...) or give the DataFrame a 'topic' column"
        )
    used: list[tuple[str, str]] = []
    for name, types in wanted.items():
        f = fields.get(name)
        if f is None or (name == "topic" and topic_option):
            continue
        if not any(_same_type(f.dataType, t) for t in types):
            raise InvalidConfigError(
                f"schema: column {f.name!r} must be "
                f"{' or '.join(t.simpleString() for t in types)}, not {f.dataType.simpleString()}"
            )
        used.append((f.name, name))
    return tuple(used)


def _same_type(a: DataType, b: DataType) -> bool:
    return bool(a.simpleString() == b.simpleString())
