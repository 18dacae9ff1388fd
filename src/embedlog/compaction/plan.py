"""Which part of a partition a cleaning pass may touch, and how its segments are grouped.

Terms (Kafka's ``LogCleanerManager``; kafka-format.md section 11):

* **first dirty offset**: where the last pass stopped (``cleaner-offset-checkpoint``), or the
  log start offset when unknown or out of range;
* **first uncleanable offset**: the base offset of the segment holding the smallest of: the
  active segment's base (never cleaned), the last stable offset (open transactions), and the
  base of the first dirty segment whose newest record is younger than
  ``min.compaction.lag.ms``; cleaning always covers whole segments;
* **dirty ratio**: bytes of the segments in ``[first dirty, first uncleanable)`` over those
  bytes plus the clean ones below the first dirty offset. A background pass runs when it
  exceeds ``min.cleanable.dirty.ratio``, or when the oldest dirty segment's first batch is older
  than ``max.compaction.lag.ms`` and there is something to clean.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import TopicConfig
from ..segment import format as fmt
from ..segment.segment import Segment

__all__ = ["Cleanable", "cleanable", "group_segments"]

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Cleanable:
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    max_compaction_delay_ms: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, config: TopicConfig) -> bool:
        """Whether a background pass should clean the partition now."""
        if self.dirty_bytes <= 0:
            return False
        return self.ratio > config.min_cleanable_dirty_ratio or self.max_compaction_delay_ms > 0


def _first_batch_timestamp(seg: Segment) -> int:
    if seg.size < fmt.HEADER_SIZE:
        return -1
    return fmt.parse_header(seg.pread(0, fmt.HEADER_SIZE), 0).max_timestamp


def _segment_of(bases: Sequence[int], offset: int) -> int:
    return max(0, bisect.bisect_right(bases, offset) - 1)


def cleanable(
    segments: Sequence[Segment],
    *,
    start_offset: int,
    end_offset: int,
    checkpoint: int | None,
    last_stable_offset: int | None,
    config: TopicConfig,
    now: int,
) -> Cleanable:
    """The cleanable range of a partition whose segments are ``segments`` (the last one is the
    active segment)."""
    first_dirty = start_offset
    if checkpoint is not None and start_offset <= checkpoint <= end_offset:
        first_dirty = checkpoint
    bases = [s.base_offset for s in segments]
    limit = segments[-1].base_offset
    if last_stable_offset is not None:
        limit = min(limit, last_stable_offset)
    dirty = segments[_segment_of(bases, first_dirty) : -1]
    lag = config.min_compaction_lag_ms
    if lag > 0:
        for seg in dirty:
            if seg.max_timestamp > now - lag:
                limit = min(limit, seg.base_offset)
                break
    first_uncleanable = bases[_segment_of(bases, limit)]
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    lo = min(first_dirty, first_uncleanable)
    overlapping = segments[_segment_of(bases, lo) : bisect.bisect_left(bases, first_uncleanable)]
    dirty_bytes = sum(s.size for s in overlapping) if lo < first_uncleanable else 0
    delay = 0
    max_lag = config.max_compaction_lag_ms
    stamps = [t for t in map(_first_batch_timestamp, dirty) if t > 0]
    if stamps and min(stamps) < now - max_lag:
        delay = now - max_lag - min(stamps)
    return Cleanable(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, delay)


def _index_bytes(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def group_segments(
    segments: Sequence[Segment], max_bytes: int, max_index_bytes: int, first_uncleanable: int
) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``: runs of adjacent segments, each to be cleaned into one
    segment, whose total log size is at most ``max_bytes`` (``segment.bytes``), whose indexes
    each total at most ``max_index_bytes`` (``segment.index.bytes``) and whose offsets stay
    within a 32-bit delta of the group's base (checked up to the next segment's base, or up to
    ``first_uncleanable`` for the last one)."""
    groups: list[list[Segment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index = _index_bytes(segments[i].index_path)
        time_index = _index_bytes(segments[i].timeindex_path)
        i += 1
        while i < len(segments):
            seg = segments[i]
            last = (segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable) - 1
            seg_index = _index_bytes(seg.index_path)
            seg_time_index = _index_bytes(seg.timeindex_path)
            if (
                log_size + seg.size > max_bytes
                or index + seg_index > max_index_bytes
                or time_index + seg_time_index > max_index_bytes
                or (seg.size != 0 and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(seg)
            log_size += seg.size
            index += seg_index
            time_index += seg_time_index
            i += 1
        groups.append(group)
    return groups
