"""``spark.readStream.format("embedlog")``: micro-batches over a growing log.

Offsets are Kafka's checkpoint shape, ``{"<topic>": {"<partition>": next_offset}}``. The
reader supports admission control (``maxOffsetsPerTrigger`` -> ``ReadMaxRows``, split across
partitions in proportion to their backlog as Kafka does; ``minOffsetsPerTrigger`` ->
``ReadMinRows``, with ``maxTriggerDelay``: a smaller backlog waits until that long has passed
since the last admitted batch, or since the query started) and ``Trigger.AvailableNow`` (the end
offsets at start are the target; later records wait for the next run). Partitions that appear
during a query start at their earliest offset. A checkpointed offset that retention has since
removed fails the query unless ``failOnDataLoss=false``, in which case reading resumes at the log
start; so does one past the partition's end (the topic deleted and created again), in which case
reading resumes at the new end, as in Kafka's source.

The initial offsets (``startingOffsets``, ``latest`` by default) are resolved once, on the first
``initialOffset`` call, and then kept: Spark may ask again before the first batch is written to
the checkpoint's offsets log, and a log growing meanwhile must not move the start. From the first
batch on, the checkpoint holds them.

Spark calls ``latestOffset``, ``partitions`` and ``commit`` in one long-lived driver-side Python
process, so state kept on ``self`` survives between calls: the initial offsets, the availableNow
target, the time of the last admitted batch, and one
:class:`~embedlog.spark.catalog.FolderView`, refreshed once per trigger, that reads only the
selected partitions. ``read`` runs on executors with everything it needs in the
:class:`~embedlog.spark.scan.ReadTask`.

The Python data source API has no hook for custom source metrics, so Kafka's
``avgOffsetsBehindLatest``/``maxOffsetsBehindLatest``/``minOffsetsBehindLatest`` cannot appear in
``progress.sources[i].metrics``; the source reports its latest offsets
(``progress.sources[i].latestOffset``) and :func:`source_metrics` derives the three from a
progress entry.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

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

from ..errors import CorruptCheckpointError, OffsetOutOfRangeError, UnknownTopicError
from .options import ReadOptions
from .planning import (
    OffsetRange,
    TopicPartition,
    plan_tasks,
    resolve_offsets,
    select_partitions,
)
from .scan import make_tasks, read_task
from .schema import arrow_schema, resolve_columns
from .stable import dense_topics, planning_view

__all__ = [
    "EmbedlogStreamReader",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "source_metrics",
]

Offsets = dict[TopicPartition, int]
_PARTITION = re.compile(r"[0-9]{1,10}\Z")


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` -> ``{"t": {"p": n}}`` with sorted keys (Spark stores it verbatim)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`offsets_to_json`. Spark hands back what it kept in its checkpoint
    folder, so anything :func:`offsets_to_json` does not write -- a partition other than
    ASCII digits below ``2**31``, an offset other than an int in ``[0, 2**63)``, another
    shape -- is a :class:`~embedlog.errors.CorruptCheckpointError`."""
    shape = CorruptCheckpointError(
        f"Spark offsets: expected {{topic: {{partition: offset}}}}, got {str(doc)[:200]}")
    if not isinstance(doc, Mapping):
        raise shape
    out: Offsets = {}
    for t, parts in doc.items():
        if not isinstance(t, str) or not isinstance(parts, Mapping):
            raise shape
        for p, o in parts.items():
            if (not isinstance(p, str) or not _PARTITION.match(p) or int(p) >= 1 << 31
                    or type(o) is not int or not 0 <= o < 1 << 63):
                raise CorruptCheckpointError(f"Spark offsets: {t!r:.100}: {{{p!r:.40}: "
                                             f"{o!r:.40}}} is not a partition and an offset")
            out[(t, int(p))] = o
    return out


def rate_limit(begin: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               max_offsets: int) -> Offsets:
    """End offsets admitting about ``max_offsets`` offsets, shared in proportion to each
    partition's backlog; a partition with a backlog always gets at least one, one without
    gets its latest offset (below ``begin`` if its offsets went back: Kafka's ``rateLimit``)."""
    backlog = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    out: Offsets = {}
    for tp, size in backlog.items():
        share = max_offsets * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = begin[tp] + min(size, take) if size else latest[tp]
    return out


def source_metrics(source: Mapping[str, Any] | Any) -> dict[str, str]:
    """Kafka's source metrics from one ``progress["sources"][i]`` entry (a dict, or pyspark's
    ``SourceProgress``): how far the batch's end offsets are behind the latest offsets, per
    partition, as ``avgOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` /
    ``minOffsetsBehindLatest`` strings (Kafka's format). Empty when either offset is missing."""
    def field(name: str) -> Any:
        value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
        return json.loads(value) if isinstance(value, str) else value

    end, latest = field("endOffset"), field("latestOffset")
    if not isinstance(end, Mapping) or not isinstance(latest, Mapping):
        return {}
    done, newest = offsets_from_json(end), offsets_from_json(latest)
    behind = [max(0, newest[tp] - done.get(tp, newest[tp])) for tp in newest]
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": str(float(sum(behind)) / len(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "minOffsetsBehindLatest": str(min(behind)),
    }


class EmbedlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Micro-batch reader with admission control and ``Trigger.AvailableNow``."""

    def __init__(self, options: ReadOptions, schema: StructType,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.schema = schema
        self.columns = resolve_columns(schema)
        self._clock = clock
        self._view = planning_view(options.path, options.read_committed)
        self._initial: dict[str, dict[str, int]] | None = None
        self._target: Offsets | None = None
        self._last_admitted = clock()

    # -- offsets (driver) ------------------------------------------------------------------

    def _partitions(self) -> list[TopicPartition]:
        return select_partitions(self._view, self.options.selection, strict=False)

    def _latest(self) -> Offsets:
        return {tp: self._view.end_offset(*tp) for tp in self._partitions()}

    def initialOffset(self) -> dict[str, dict[str, int]]:
        if self._initial is None:
            opts = self.options
            self._view.refresh()
            starts = resolve_offsets(self._view, self._partitions(), opts.starting,
                                     side="start", strategy=opts.timestamp_strategy)
            self._initial = offsets_to_json(starts)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._view.refresh()
        self._target = self._latest()

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        begin = offsets_from_json(start)
        self._view.refresh()  # the one re-read of the folder per trigger
        latest = self._latest()
        for tp in latest:
            if tp not in begin:  # a new partition starts at its earliest offset
                begin[tp] = self._view.start_offset(*tp)
        if self._target is not None:  # availableNow: never past the target, nothing new
            latest = {tp: min(off, self._target.get(tp, begin[tp])) for tp, off in latest.items()}
        # A latest offset below ``begin`` (the topic recreated, the log truncated, a starting
        # offset past the end) is kept as it is: ``partitions`` reports it as data loss, as
        # Kafka's source does, instead of the stream waiting silently for the log to get back
        # to ``begin`` and skipping what came before.
        end = self._admit(begin, latest, limit)
        merged = dict(begin)  # keep partitions no longer selected exactly as they were
        merged.update(end)
        return offsets_to_json(merged)

    def _admit(self, begin: Offsets, latest: Offsets, limit: ReadLimit) -> Offsets:
        available = sum(max(0, latest[tp] - begin[tp]) for tp in latest)
        min_rows = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        elif isinstance(limit, ReadAllAvailable):
            min_rows = None
        now = self._clock()
        waited_ms = (now - self._last_admitted) * 1000
        if (min_rows is not None and self._target is None and available < min_rows
                and waited_ms < self.options.max_trigger_delay_ms):
            return {tp: begin[tp] for tp in latest}
        if available:
            self._last_admitted = now
        if isinstance(limit, ReadMaxRows):
            return rate_limit(begin, latest, limit.max_rows)
        return latest

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        return offsets_to_json(self._latest())

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[InputPartition]:
        opts = self.options
        planned = plan_tasks(self._view, self._ranges(offsets_from_json(start),
                                                      offsets_from_json(end)), opts)
        return make_tasks(opts.path, planned, fail_on_data_loss=opts.fail_on_data_loss,
                          read_committed=opts.read_committed, dense=dense_topics(self._view))

    def _ranges(self, begin: Offsets, stop: Offsets) -> list[OffsetRange]:
        ranges: list[OffsetRange] = []
        for tp, hi in sorted(stop.items()):
            try:
                log_start = self._view.start_offset(*tp)
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
        return ranges

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{message}. Set failOnDataLoss=false to skip the lost records and continue"
            )

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to release: the log keeps its own retention, independent of readers."""

    def stop(self) -> None:
        self._view.close()

    # -- data (executors) ------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(
            partition, self.columns, arrow_schema(self.schema), self.options.batch_rows
        )
