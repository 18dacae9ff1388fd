"""Topics as Arrow: :func:`read_arrow` streams a log's records as ``pyarrow.RecordBatch``es
with the schema of Spark's Kafka source; :func:`read_table` collects them.

**What is read.** ``topics`` (one name, several, or every topic), ``partitions`` (numbers
applied to every topic, default all), from ``start_offset`` (default: the log start) or the first
record at or after ``start_time``, to ``end_offset`` (exclusive; default: the log end when
:func:`read_arrow` is called) or the first record at or after ``end_time``. Offsets are one int
for every partition or a mapping ``{(topic, partition): offset}``; times are epoch milliseconds
or aware ``datetime``\\ s (exact; one between two milliseconds is the next), looked up through
the time index as Spark's ``startingTimestamp`` / ``endingTimestamp`` are (a start time after
every record gives an empty range; an end time after every record means the log end). A start
offset outside ``[log start, log end]`` raises
:class:`~embedlog.OffsetOutOfRangeError` (those records are gone or not there yet); an end offset
past the log end is the log end. The plan -- every partition's range -- is fixed when
:func:`read_arrow` returns, so records appended later are not read and every error about the
arguments is raised then.

**How.** Partitions are read one after the other, in (topic, partition) order, batch by batch
through :meth:`Log.decoded_batches` (:meth:`Log.read_batches` for ``read_committed``); each
Arrow batch is built from the decoder's columns (:mod:`embedlog.arrow.columns`: no Python
object per record, except for ``headers``; with the compiled core, a batch wholly in range and
without headers goes from the read buffer into the Arrow buffers in one C pass,
:mod:`embedlog.arrow.sink`) and holds
one partition's records, at most ``batch_rows`` of them and about 64 MiB of keys and values, so
memory stays bounded whatever the log's size. ``columns`` picks and orders the columns; the
others are never built (reading only ``offset`` and ``timestamp`` never copies a key or value).
``isolation_level="read_committed"`` hides aborted transactions and stops each partition at its
first open transaction (:mod:`embedlog.arrow.isolation`), and at the latest at its last stable
offset (the log start while a transaction whose first batches were deleted is open), as a
Kafka consumer does.
A record whose timestamp (epoch ms, stored up to ``2**63 - 1``) passes what
``timestamp[us]`` holds (after the year 294,000) raises :class:`~embedlog.UsageError` naming it
when the ``timestamp`` column is built, as Spark's Kafka source refuses it; leave that column out
to export such a log.

Works on a writer, on a read-only open beside a running writer, and on a Kafka broker's log
directory opened read-only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, Union

import pyarrow as pa

from .. import _validate
from ..errors import InvalidConfigError, OffsetOutOfRangeError, UsageError
from ..reader import Decode
from ..records import RecordBatch, TopicPartition
from ..segment.header import BatchHeader
from .columns import ArrowBatcher
from .isolation import committed_batches
from .schema import project

__all__ = ["DEFAULT_BATCH_ROWS", "LogReader", "PartitionRange", "plan", "read_arrow",
           "read_table"]

DEFAULT_BATCH_ROWS = 65_536
"""Rows per Arrow batch at most: 16-64k rows is where Arrow consumers run fastest."""

OffsetArg = Union[  # noqa: UP007 (a runtime alias)
    int, Mapping[TopicPartition, int], Mapping[tuple[str, int], int], None]
TimeArg = Union[int, dt.datetime, None]  # noqa: UP007
R = TypeVar("R", bound=Sized)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class LogReader(Protocol):
    """The read side of :class:`embedlog.Log` that this module uses."""

    def topics(self) -> list[str]: ...

    def partition_count(self, topic: str) -> int: ...

    def start_offset(self, topic: str, partition: int) -> int: ...

    def end_offset(self, topic: str, partition: int) -> int: ...

    def last_stable_offset(self, topic: str, partition: int) -> int: ...

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...

    def read_batches(self, topic: str, partition: int, start_offset: int | None = None,
                     end_offset: int | None = None, *, control: bool = False
                     ) -> Iterator[RecordBatch]: ...

    def decoded_batches(self, topic: str, partition: int, start_offset: int, end_offset: int,
                        decode: Decode[R]) -> Iterator[tuple[BatchHeader, R]]: ...


@dataclass(frozen=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int


def read_arrow(
    log: LogReader,
    topics: str | Iterable[str] | None = None,
    *,
    partitions: int | Iterable[int] | None = None,
    start_offset: OffsetArg = None,
    end_offset: OffsetArg = None,
    start_time: TimeArg = None,
    end_time: TimeArg = None,
    columns: Sequence[str] | None = None,
    include_headers: bool = False,
    isolation_level: str = "read_uncommitted",
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> pa.RecordBatchReader:
    """A ``pyarrow.RecordBatchReader`` over the records selected (see the module notes)."""
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError("isolation_level must be read_uncommitted or read_committed, "
                                 f"not {isolation_level!r}")
    batch_rows = _validate.config_count(batch_rows, "batch_rows")
    names, schema = project(columns, include_headers)
    ranges = plan(log, topics, partitions, start_offset, end_offset, start_time, end_time)
    committed = isolation_level == "read_committed"
    batches = _batches(log, ranges, names, schema, batch_rows, committed)
    return pa.RecordBatchReader.from_batches(schema, batches)


def read_table(log: LogReader, topics: str | Iterable[str] | None = None, **options: Any
               ) -> pa.Table:
    """:func:`read_arrow`'s records as one ``pyarrow.Table`` (same arguments)."""
    return read_arrow(log, topics, **options).read_all()


def _batches(log: LogReader, ranges: list[PartitionRange], names: tuple[str, ...],
             schema: pa.Schema, batch_rows: int, committed: bool) -> Iterator[pa.RecordBatch]:
    for r in ranges:
        batcher = ArrowBatcher(r.topic, r.partition, names, schema, batch_rows)
        if committed:
            end = min(r.end, log.last_stable_offset(r.topic, r.partition))
            source = committed_batches(
                log.read_batches(r.topic, r.partition, r.start, None, control=True), end)
            for batch in source:
                yield from batcher.add(batch.timestamp_type, batch)
        else:
            for header, found in log.decoded_batches(r.topic, r.partition, r.start, r.end,
                                                     batcher.decode):
                yield from batcher.take(header, found)
        yield from batcher.flush()


# -- planning ------------------------------------------------------------------------------------


def plan(log: LogReader, topics: str | Iterable[str] | None, partitions: int | Iterable[int] | None,
         start_offset: OffsetArg, end_offset: OffsetArg, start_time: TimeArg, end_time: TimeArg
         ) -> list[PartitionRange]:
    """Every selected partition's non-empty range, in (topic, partition) order."""
    out: list[PartitionRange] = []
    begin_ms, stop_ms = _millis(start_time, "start_time"), _millis(end_time, "end_time")
    for tp in _select(log, topics, partitions):
        lo, hi = log.start_offset(*tp), log.end_offset(*tp)
        start = _offset_for(start_offset, tp, lo, "start_offset")
        if not lo <= start <= hi:
            raise OffsetOutOfRangeError(
                f"start_offset {start} is out of range for {tp.topic}-{tp.partition}: the log "
                f"holds [{lo}, {hi})")
        end = min(_offset_for(end_offset, tp, hi, "end_offset"), hi)
        if begin_ms is not None:
            found = log.offsets_for_times(tp.topic, tp.partition, begin_ms)
            start = max(start, hi if found is None else found)
        if stop_ms is not None:
            found = log.offsets_for_times(tp.topic, tp.partition, stop_ms)
            end = min(end, hi if found is None else found)
        if end > start:
            out.append(PartitionRange(tp.topic, tp.partition, start, end))
    return out


def _select(log: LogReader, topics: str | Iterable[str] | None,
            partitions: int | Iterable[int] | None) -> list[TopicPartition]:
    if topics is None:
        names = log.topics()
    else:
        names = _validate.topic_names(topics)
        if not names:
            raise UsageError("topics is empty: name at least one topic, or None for every topic")
    wanted = None
    if partitions is not None:
        wanted = {_validate.partition(p) for p in (
            [partitions] if not isinstance(partitions, Iterable) or isinstance(partitions, str)
            else partitions)}
    out: list[TopicPartition] = []
    for name in names:
        count = log.partition_count(name)  # raises UnknownTopicError
        if wanted is not None and any(not isinstance(p, int) or not 0 <= p < count
                                      for p in wanted):
            raise UsageError(f"partitions {sorted(wanted, key=repr)} are not all partitions of "
                             f"{name!r} (0..{count - 1})")
        out += [TopicPartition(name, p) for p in sorted(wanted if wanted is not None
                                                        else range(count))]
    return out


def _offset_for(arg: OffsetArg, tp: TopicPartition, default: int, what: str) -> int:
    if arg is None:
        return default
    # A TopicPartition equals its (topic, partition) tuple as a key.
    value = arg.get(tp, default) if isinstance(arg, Mapping) else arg
    return _validate.offset(value, what)


def _millis(value: TimeArg, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise UsageError(f"{what}: give an aware datetime (e.g. tzinfo=timezone.utc)")
        # Exact (a float's timestamp() is a millisecond short after 2038), rounded up: a
        # record's whole millisecond is at or after the time only from the next one on.
        micros = (value - _EPOCH) // dt.timedelta(microseconds=1)
        return max(0, -(-micros // 1000))  # before 1970: every record is later
    return _validate.timestamp_ms(value, what)
