"""Turn options into offset ranges, and offset ranges into Spark input partitions.

Runs on the driver (in Spark's planner worker) against anything shaped like
:class:`LogView` -- the read side of :class:`embedlog.Log` -- so the logic is testable with a
fake. Steps:

1. :func:`select_partitions`: subscribe / subscribePattern / assign.
2. :func:`resolve_offsets`: earliest / latest / JSON / timestamps -> concrete offsets.
3. :func:`offset_ranges`: pair start and end, applying ``failOnDataLoss`` when an offset is
   outside ``[log start, log end]``.
4. :func:`split_ranges`: cut each range at segment boundaries (adjacent small segments share a
   task up to ``maxBytesPerPartition``, a bigger segment is cut by offsets to fit; no piece holds
   more than ``maxRecordsPerPartition`` offsets), then split further when ``minPartitions`` asks
   for more tasks, proportionally to volume as Kafka's ``KafkaOffsetRangeCalculator`` does.
5. :func:`pack`: put small ranges -- of different partitions -- together into one task, the way
   Spark's file sources pack small files: each range costs its bytes plus
   :data:`OPEN_COST_BYTES`, and a task is filled up to ``min(maxBytesPerPartition, max(open
   cost, total cost / parallelism))``. Thousands of tiny partitions thus become a few tasks
   (a Spark task costs milliseconds of scheduling; opening a partition's segment, far less).

Planning asks the log only about the selected partitions (:class:`LogView`;
:class:`embedlog.spark.catalog.FolderView` reads each of them once per query).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicError
from .options import (
    EARLIEST,
    LATEST,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    PartitionOffsets,
    PartitionTimestamps,
    ReadOptions,
    Subscribe,
    SubscribePattern,
    TopicSelection,
)

__all__ = [
    "OPEN_COST_BYTES",
    "LogView",
    "OffsetRange",
    "RangeFilter",
    "SegmentView",
    "TopicPartition",
    "constrain",
    "offset_ranges",
    "pack",
    "plan_batch",
    "plan_tasks",
    "resolve_offsets",
    "select_partitions",
    "split_ranges",
]

TopicPartition = tuple[str, int]
_BASE = operator.attrgetter("base_offset")

OPEN_COST_BYTES = 1024 * 1024
"""What planning charges for starting to read one more range in a task, in bytes of records
(Spark's ``spark.sql.files.openCostInBytes`` plays the same part for files)."""


class SegmentView(Protocol):
    """What planning needs of a segment (``embedlog`` ``SegmentInfo``)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...


class LogView(Protocol):
    """The read-only part of :class:`embedlog.Log` that planning uses."""

    def topics(self) -> list[str]: ...

    def partition_count(self, topic: str) -> int: ...

    def start_offset(self, topic: str, partition: int) -> int: ...

    def end_offset(self, topic: str, partition: int) -> int: ...

    def segments(self, topic: str, partition: int) -> Sequence[SegmentView]: ...

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...


class RangeFilter(Protocol):
    """Restrictions from pushed-down filters (:class:`embedlog.spark.pushdown.Constraints`)."""

    @property
    def empty(self) -> bool: ...

    @property
    def timestamp_lo_ms(self) -> int | None: ...

    def wants_topic(self, topic: str) -> bool: ...

    def wants_partition(self, partition: int) -> bool: ...

    def clip(self, start: int, end: int) -> tuple[int, int]: ...


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition, with an estimate of the bytes they occupy."""

    topic: str
    partition: int
    start: int
    end: int
    size_bytes: int = 0

    @property
    def count(self) -> int:
        return self.end - self.start


# -- 1. which partitions -----------------------------------------------------------------------


def select_partitions(
    log: LogView, selection: TopicSelection, *, strict: bool = True
) -> list[TopicPartition]:
    """The partitions a selection names, sorted by (topic, partition).

    ``strict`` (batch) makes a subscribed topic or assigned partition that does not exist an
    error; streaming passes ``False`` so that it is picked up once it appears, as Kafka does.
    """
    existing = set(log.topics())
    if isinstance(selection, SubscribePattern):
        topics = sorted(t for t in existing if selection.matches(t))
    elif isinstance(selection, Subscribe):
        missing = [t for t in selection.topics if t not in existing]
        if missing and strict:
            raise UnknownTopicError(
                f"subscribe: topic(s) {', '.join(missing)} not found; "
                f"the log has {', '.join(sorted(existing)) or 'no topics'}"
            )
        topics = sorted(t for t in selection.topics if t in existing)
    else:
        return _assigned(log, selection, existing, strict)
    return [(t, p) for t in topics for p in range(log.partition_count(t))]


def _assigned(
    log: LogView, selection: Assign, existing: set[str], strict: bool
) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for topic, partition in selection.partitions:
        count = log.partition_count(topic) if topic in existing else 0
        if partition < count:
            out.append((topic, partition))
        elif strict:
            raise UnknownTopicError(
                f"assign: {topic}-{partition} does not exist "
                f"({'topic not found' if topic not in existing else f'{count} partitions'})"
            )
    return sorted(out)


# -- 2. where to start / stop ------------------------------------------------------------------


def resolve_offsets(
    log: LogView,
    partitions: Sequence[TopicPartition],
    spec: OffsetSpec,
    *,
    side: Literal["start", "end"],
    strategy: Literal["error", "latest"] = "error",
    wanted: Collection[TopicPartition] | None = None,
) -> dict[TopicPartition, int]:
    """Concrete offsets of ``spec`` for every partition in ``wanted`` (default: all; pushed
    filters may leave fewer). JSON specs must name exactly the selected ``partitions`` (Kafka's
    rule) all the same. A timestamp with no record at or after it gives the log end for an
    ending spec; for a starting spec it fails, or gives the log end with
    ``startingOffsetsByTimestampStrategy=latest``.
    """
    if isinstance(spec, Earliest | Latest | GlobalTimestamp):
        table = dict.fromkeys(partitions, spec.timestamp if isinstance(spec, GlobalTimestamp)
                              else EARLIEST if isinstance(spec, Earliest) else LATEST)
    else:
        table = _expand(spec.option, spec.offsets if isinstance(spec, PartitionOffsets)
                        else spec.timestamps, partitions)
    if wanted is not None:
        table = {tp: value for tp, value in table.items() if tp in wanted}
    if isinstance(spec, GlobalTimestamp | PartitionTimestamps):
        return _by_timestamp(log, table, spec.option, side, strategy)
    out: dict[TopicPartition, int] = {}
    for tp, value in table.items():
        if value == EARLIEST:
            out[tp] = log.start_offset(*tp)
        elif value == LATEST:
            out[tp] = log.end_offset(*tp)
        else:
            out[tp] = value
    return out


def _expand(
    option: str,
    table: Mapping[str | None, Mapping[int, int]],
    partitions: Sequence[TopicPartition],
) -> dict[TopicPartition, int]:
    """Flatten a JSON table and check it names exactly ``partitions``."""
    flat: dict[TopicPartition, int] = {}
    for topic, parts in table.items():
        if topic is None:
            topics = sorted({t for t, _ in partitions})
            if len(topics) != 1:
                raise InvalidConfigError(
                    f"{option}: the short form {{\"<partition>\": n}} needs exactly one topic, "
                    f"but {len(topics)} are selected; key the JSON by topic"
                )
            topic = topics[0]
        for p, value in parts.items():
            flat[(topic, p)] = value
    wanted = set(partitions)
    missing = sorted(wanted - flat.keys())
    extra = sorted(flat.keys() - wanted)
    if missing or extra:
        parts_msg = []
        if missing:
            parts_msg.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts_msg.append("not selected or not existing " + ", ".join(
                f"{t}-{p}" for t, p in extra))
        raise InvalidConfigError(
            f"{option}: the JSON must list every selected partition (use -2 for earliest, "
            f"-1 for latest); {'; '.join(parts_msg)}"
        )
    return flat


def _by_timestamp(
    log: LogView,
    stamps: Mapping[TopicPartition, int],
    option: str,
    side: Literal["start", "end"],
    strategy: Literal["error", "latest"],
) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for tp, ts in stamps.items():
        found = log.offsets_for_times(tp[0], tp[1], ts)
        if found is None:
            if side == "start" and strategy == "error":
                raise OffsetOutOfRangeError(
                    f"{option}: no record in {tp[0]}-{tp[1]} has a timestamp >= {ts}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the log end instead"
                )
            found = log.end_offset(*tp)
        out[tp] = found
    return out


# -- 3. ranges ---------------------------------------------------------------------------------


def offset_ranges(
    log: LogView,
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """Non-empty ``[start, end)`` per partition, checked against the log's current bounds.

    A start below the log start (records removed by retention or ``delete_records``), or any
    offset past the log end, is data loss: an error with ``failOnDataLoss=true`` (the default),
    clamped otherwise.
    """
    out: list[OffsetRange] = []
    for tp in sorted(starts):
        lo, hi = log.start_offset(*tp), log.end_offset(*tp)
        start, end = starts[tp], ends[tp]
        start = _check_bound(tp, start, lo, hi, "starting", fail_on_data_loss)
        end = _check_bound(tp, end, lo, hi, "ending", fail_on_data_loss)
        if end < start:
            if fail_on_data_loss:
                raise InvalidConfigError(
                    f"{tp[0]}-{tp[1]}: the ending offset {end} is before the starting offset "
                    f"{start}; check startingOffsets/endingOffsets (or their timestamp forms)"
                )
            continue
        if end > start:
            out.append(OffsetRange(tp[0], tp[1], start, end))
    return out


def _check_bound(
    tp: TopicPartition, offset: int, lo: int, hi: int, which: str, fail: bool
) -> int:
    if lo <= offset <= hi:
        return offset
    if fail:
        why = (
            "records below it were deleted (retention, delete_records or compaction)"
            if offset < lo
            else "it is beyond the log end (read_committed: its last stable offset)"
        )
        raise OffsetOutOfRangeError(
            f"{which} offset {offset} for {tp[0]}-{tp[1]} is outside the log's range "
            f"[{lo}, {hi}]: {why}. Set failOnDataLoss=false to read what is left instead"
        )
    return min(max(offset, lo), hi)


# -- 4. tasks ----------------------------------------------------------------------------------


def split_ranges(
    log: LogView,
    ranges: Iterable[OffsetRange],
    *,
    max_partition_bytes: int,
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Cut ranges into read tasks: one per segment run of at most ``max_partition_bytes``
    (at least one segment) and at most ``max_records`` offsets, then more if
    ``min_partitions`` asks for more."""
    tasks: list[OffsetRange] = []
    for rng in ranges:
        tasks.extend(_by_segment(rng, log.segments(rng.topic, rng.partition),
                                 log.end_offset(rng.topic, rng.partition), max_partition_bytes))
    if max_records is not None:
        tasks = [part for t in tasks for part in _cut(t, -(-t.count // max_records))]
    if min_partitions is not None and len(tasks) < min_partitions:
        tasks = _spread(tasks, min_partitions)
    return tasks


def pack(
    ranges: Sequence[OffsetRange],
    *,
    max_partition_bytes: int,
    parallelism: int | None = None,
    max_records: int | None = None,
) -> list[tuple[OffsetRange, ...]]:
    """Group ``ranges`` (in their order) into tasks of about
    ``min(max_partition_bytes, max(OPEN_COST_BYTES, total cost / parallelism))`` bytes, each
    range costing its size plus :data:`OPEN_COST_BYTES`; with ``max_records`` a task also
    holds at most that many offsets. ``parallelism`` defaults to the CPU count."""
    if not ranges:
        return []
    cores = parallelism or os.cpu_count() or 1
    total = sum(r.size_bytes + OPEN_COST_BYTES for r in ranges)
    target = min(max_partition_bytes, max(OPEN_COST_BYTES, total // cores))
    tasks: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    cost = count = 0
    for rng in ranges:
        more = rng.size_bytes + OPEN_COST_BYTES
        full = cost + more > target or (max_records is not None
                                        and count + rng.count > max_records)
        if current and full:
            tasks.append(tuple(current))
            current, cost, count = [], 0, 0
        current.append(rng)
        cost, count = cost + more, count + rng.count
    tasks.append(tuple(current))
    return tasks


def _by_segment(
    rng: OffsetRange, segments: Sequence[SegmentView], log_end: int, budget: int
) -> list[OffsetRange]:
    segs = sorted(segments, key=_BASE)
    if segs and rng.start <= segs[0].base_offset and rng.end >= max(log_end,
                                                                      segs[-1].base_offset):
        # The range holds every segment whole: one run if they all fit the budget (the
        # general walk below gives the same), the common case of many small partitions.
        total, spans = 0, False  # the bytes of the segments holding offsets, and are there any
        for i, seg in enumerate(segs, 1):
            end = segs[i].base_offset if i < len(segs) else max(log_end, seg.base_offset)
            if end > seg.base_offset:
                total, spans = total + seg.size, True
        if total <= budget:
            return [OffsetRange(rng.topic, rng.partition, rng.start, rng.end, total)
                    ] if spans else [rng]
    return _runs(rng, segs, log_end, budget)


def _runs(
    rng: OffsetRange, segs: Sequence[SegmentView], log_end: int, budget: int
) -> list[OffsetRange]:
    """Cut ``rng`` at the boundaries of ``segs`` (sorted): adjacent segments share a run up to
    ``budget`` bytes, a bigger one is cut by offsets."""
    runs: list[list[int]] = []  # [start, end, bytes]: adjacent segments up to the budget
    for i, seg in enumerate(segs):
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else max(log_end, seg.base_offset)
        lo, hi = max(rng.start, seg.base_offset), min(rng.end, seg_end)
        if hi <= lo:
            continue
        span = seg_end - seg.base_offset
        size = seg.size if span <= 0 else seg.size * (hi - lo) // span
        if runs and runs[-1][2] + size <= budget:
            runs[-1][1:] = hi, runs[-1][2] + size
        else:
            runs.append([lo, hi, size])
    if not runs:
        return [rng]
    # The runs must cover the range exactly, whatever a stale segment list says.
    runs[0][0], runs[-1][1] = rng.start, rng.end
    # A segment bigger than the budget (1 GiB by default) is cut by offsets.
    return [part for lo, hi, size in runs
            for part in _cut(OffsetRange(rng.topic, rng.partition, lo, hi, size),
                             -(-size // budget))]


def _spread(tasks: list[OffsetRange], want: int) -> list[OffsetRange]:
    """Split tasks into about ``want`` pieces, each task getting a share of the pieces in
    proportion to its offset count (never fewer than one)."""
    total = sum(t.count for t in tasks)
    if total == 0:
        return tasks
    return [part for task in tasks for part in _cut(task, round(task.count * want / total))]


def _cut(task: OffsetRange, parts: int) -> list[OffsetRange]:
    """``task`` in ``parts`` offset ranges of equal length (at least 1, at most one per
    offset), bytes shared in proportion."""
    parts = max(1, min(task.count, parts))
    if parts == 1:
        return [task]
    out: list[OffsetRange] = []
    for k in range(parts):
        lo = task.start + task.count * k // parts
        hi = task.start + task.count * (k + 1) // parts
        out.append(OffsetRange(task.topic, task.partition, lo, hi,
                               task.size_bytes * (hi - lo) // task.count))
    return out


# -- all steps ---------------------------------------------------------------------------------


def plan_batch(
    log: LogView, options: ReadOptions, restrict: RangeFilter | None = None
) -> list[tuple[OffsetRange, ...]]:
    """The read tasks of a batch query: every step above, with ``restrict`` (pushed filters)
    applied before splitting. An empty list when nothing is to be read."""
    tps = select_partitions(log, options.selection, strict=True)
    wanted = None if restrict is None else {
        tp for tp in tps if restrict.wants_topic(tp[0]) and restrict.wants_partition(tp[1])}
    starts = resolve_offsets(log, tps, options.starting, side="start",
                             strategy=options.timestamp_strategy, wanted=wanted)
    ends = resolve_offsets(log, tps, options.ending, side="end", wanted=wanted)
    ranges = offset_ranges(log, starts, ends, fail_on_data_loss=options.fail_on_data_loss)
    if restrict is not None:
        ranges = constrain(log, ranges, restrict)
    return plan_tasks(log, ranges, options)


def plan_tasks(
    log: LogView, ranges: Iterable[OffsetRange], options: ReadOptions
) -> list[tuple[OffsetRange, ...]]:
    """Steps 4 and 5 with the options' limits (batch and streaming alike)."""
    pieces = split_ranges(
        log,
        ranges,
        max_partition_bytes=options.max_partition_bytes,
        min_partitions=options.min_partitions,
        max_records=options.max_records_per_partition,
    )
    return pack(pieces, max_partition_bytes=options.max_partition_bytes,
                parallelism=options.min_partitions,
                max_records=options.max_records_per_partition)


def constrain(log: LogView, ranges: Iterable[OffsetRange], restrict: RangeFilter
              ) -> list[OffsetRange]:
    """Narrow ranges to pushed filters; a timestamp lower bound becomes a time-index lookup."""
    if restrict.empty:
        return []
    out: list[OffsetRange] = []
    for rng in ranges:
        start, end = restrict.clip(rng.start, rng.end)
        ts = restrict.timestamp_lo_ms
        if ts is not None and start < end:
            first = log.offsets_for_times(rng.topic, rng.partition, ts)
            start = end if first is None else max(start, min(first, end))
        if end > start:
            out.append(OffsetRange(rng.topic, rng.partition, start, end))
    return out
