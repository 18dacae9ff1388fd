"""``spark.readStream.format("embedlog")``: micro-batches over a growing log.

Offsets are Kafka's checkpoint shape, ``{"<topic>": {"<partition>": next_offset}}``. The
reader supports admission control (``maxOffsetsPerTrigger`` -> ``ReadMaxRows``, split across
partitions in proportion to their backlog as Kafka does; ``minOffsetsPerTrigger`` ->
``ReadMinRows``, without ``maxTriggerDelay``, which the Python API cannot express) and
``Trigger.AvailableNow`` (the end offsets at start are the target; later records wait for the
next run). Partitions that appear during a query start at their earliest offset. A checkpointed
offset that retention has since removed fails the query unless ``failOnDataLoss=false``, in which
case reading resumes at the log start.

Spark calls ``latestOffset``, ``partitions`` and ``commit`` in one long-lived driver-side Python
process, so the availableNow target kept on ``self`` survives between calls; ``read`` runs on
executors with everything it needs in the :class:`~embedlog.spark.scan.ReadTask`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..errors import OffsetOutOfRangeError, UnknownTopicError
from ..log import Log
from .options import ReadOptions
from .planning import (
    OffsetRange,
    TopicPartition,
    resolve_offsets,
    select_partitions,
    split_ranges,
)
from .scan import ReadTask, planning_log, read_task
from .schema import arrow_schema, resolve_columns

__all__ = ["EmbedlogStreamReader", "offsets_from_json", "offsets_to_json", "rate_limit"]

Offsets = dict[TopicPartition, int]


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` -> ``{"t": {"p": n}}`` with sorted keys (Spark stores it verbatim)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`offsets_to_json`."""
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def rate_limit(begin: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_offsets: int) -> Offsets:
    """End offsets admitting about ``max_offsets`` offsets, shared in proportion to each
    partition's backlog; a partition with a backlog always gets at least one."""
    backlog = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    out: Offsets = {}
    for tp, size in backlog.items():
        share = max_offsets * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = begin[tp] + min(size, take)
    return out


class EmbedlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Micro-batch reader with admission control and ``Trigger.AvailableNow``."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.columns = resolve_columns(schema)
        self._target: Offsets | None = None

    # -- offsets (driver) ------------------------------------------------------------------

    def _partitions(self, log: Log) -> list[TopicPartition]:
        return select_partitions(log, self.options.selection, strict=False)

    def _latest(self, log: Log) -> Offsets:
        return {tp: log.end_offset(*tp) for tp in self._partitions(log)}

    def initialOffset(self) -> dict[str, dict[str, int]]:
        opts = self.options
        with planning_log(opts.path) as log:
            starts = resolve_offsets(log, self._partitions(log), opts.starting, side="start",
                                     strategy=opts.timestamp_strategy)
        return offsets_to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with planning_log(self.options.path) as log:
            self._target = self._latest(log)

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        begin = offsets_from_json(start)
        with planning_log(self.options.path) as log:
            latest = self._latest(log)
            for tp in latest:
                if tp not in begin:  # a new partition starts at its earliest offset
                    begin[tp] = log.start_offset(*tp)
        if self._target is not None:  # availableNow: never past the target, nothing new
            latest = {tp: min(off, self._target.get(tp, begin[tp])) for tp, off in latest.items()}
        latest = {tp: max(off, begin[tp]) for tp, off in latest.items()}
        end = self._admit(begin, latest, limit)
        merged = dict(begin)  # keep partitions no longer selected exactly as they were
        merged.update(end)
        return offsets_to_json(merged)

    def _admit(self, begin: Offsets, latest: Offsets, limit: ReadLimit) -> Offsets:
        available = sum(latest[tp] - begin[tp] for tp in latest)
        min_rows = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        elif isinstance(limit, ReadAllAvailable):
            min_rows = None
        if min_rows is not None and self._target is None and available < min_rows:
            return {tp: begin[tp] for tp in latest}
        if isinstance(limit, ReadMaxRows):
            return rate_limit(begin, latest, limit.max_rows)
        return latest

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        with planning_log(self.options.path) as log:
            return offsets_to_json(self._latest(log))

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[InputPartition]:
        opts = self.options
        with planning_log(opts.path) as log:
            tasks = self._plan(log, offsets_from_json(start), offsets_from_json(end))
        return [
            ReadTask(opts.path, r.topic, r.partition, r.start, r.end, opts.fail_on_data_loss,
                     r.size_bytes)
            for r in tasks
        ]

    def _plan(self, log: Log, begin: Offsets, stop: Offsets) -> list[OffsetRange]:
        opts = self.options
        ranges: list[OffsetRange] = []
        for tp, hi in sorted(stop.items()):
            try:
                log_start = log.start_offset(*tp)
            except UnknownTopicError:
                self._data_loss(f"{tp[0]}-{tp[1]} no longer exists")
                continue
            lo = begin.get(tp, log_start)
            if lo < log_start:
                self._data_loss(
                    f"{tp[0]}-{tp[1]}: offsets [{lo}, {log_start}) were deleted (retention, "
                    "delete_records or compaction) before this query read them"
                )
                lo = log_start
            if hi < lo:
                self._data_loss(f"{tp[0]}-{tp[1]}: offset went back from {lo} to {hi}")
                continue
            if hi > lo:
                ranges.append(OffsetRange(tp[0], tp[1], lo, hi))
        return split_ranges(log, ranges, max_partition_bytes=opts.max_partition_bytes,
                            min_partitions=opts.min_partitions)

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{message}. Set failOnDataLoss=false to skip the lost records and continue"
            )

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to release: the log keeps its own retention, independent of readers."""

    # -- data (executors) ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return read_task(
            partition, self.columns, arrow_schema(self.schema), self.options.batch_rows
        )
