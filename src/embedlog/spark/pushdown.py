"""Filters Spark pushes down, turned into offset-range restrictions.

Used only by the opt-in pushdown reader (``.option("pushFilters", "true")`` together with
``spark.sql.python.filterPushdown.enabled=true``). What is exact is reported as handled, so Spark
drops it from its own ``Filter`` node:

* ``topic`` ``=``, ``IN``, ``LIKE 'x%'`` -> topics read;
* ``partition`` ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=`` -> partitions read;
* ``offset`` ``=``, ``<``, ``<=``, ``>``, ``>=`` -> the offset range of every partition (``IN``
  narrows the range to its min..max and is left for Spark to finish);
* ``IS NOT NULL`` on those columns and ``timestamp``: always true.

``timestamp >= t`` / ``> t`` become a time-index lookup (the first offset whose timestamp
reaches ``t``; every earlier record is older). Kafka timestamps need not increase with offsets,
so the filter is still returned to Spark, and upper bounds on ``timestamp`` are left to Spark.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

__all__ = ["Constraints", "push_filters"]

_NEVER_NULL = frozenset({"topic", "partition", "offset", "timestamp", "timestamptype"})


@dataclass(frozen=True)
class Constraints:
    """The conjunction of pushed filters: ``None`` means unrestricted."""

    topics: frozenset[str] | None = None
    topic_prefixes: tuple[str, ...] = ()
    partitions: frozenset[int] | None = None
    partition_lo: int | None = None
    partition_hi: int | None = None  # inclusive
    offset_lo: int | None = None
    offset_hi: int | None = None  # exclusive
    timestamp_lo_ms: int | None = None  # records older than this are not wanted
    empty: bool = False  # contradictory filters such as offset = 1 AND offset = 2

    def wants_topic(self, topic: str) -> bool:
        if self.empty or (self.topics is not None and topic not in self.topics):
            return False
        return all(topic.startswith(p) for p in self.topic_prefixes)

    def wants_partition(self, partition: int) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.partition_lo is not None and partition < self.partition_lo:
            return False
        return self.partition_hi is None or partition <= self.partition_hi

    def clip(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` narrowed to the pushed offset bounds (may become empty)."""
        if self.offset_lo is not None:
            start = max(start, self.offset_lo)
        if self.offset_hi is not None:
            end = min(end, self.offset_hi)
        return start, max(start, end)


def push_filters(filters: list[Filter]) -> tuple[Constraints, list[Filter]]:
    """Fold ``filters`` into :class:`Constraints`; return them and the filters Spark must
    still evaluate (the same objects, as the API requires)."""
    c = Constraints()
    rest: list[Filter] = []
    for f in filters:
        c, exact = _absorb(c, f)
        if not exact:
            rest.append(f)
    return c, rest


def _absorb(c: Constraints, f: Filter) -> tuple[Constraints, bool]:
    """Apply one filter; the flag says whether ``c`` now enforces it exactly."""
    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(attr) != 1:
        return c, False
    col = attr[0].lower()
    if isinstance(f, IsNotNull):
        return c, col in _NEVER_NULL
    value = getattr(f, "value", None)
    if col == "topic":
        return _topic(c, f, value)
    if col == "partition":
        return _partition(c, f, value)
    if col == "offset":
        return _offset(c, f, value)
    if col == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual)):
        micros = _micros(value)
        if micros is not None:
            # ts_ms * 1000 >= micros  <=>  ts_ms >= ceil(micros / 1000)
            lo = -(-micros // 1000) if isinstance(f, GreaterThanOrEqual) else micros // 1000 + 1
            if c.timestamp_lo_ms is None or lo > c.timestamp_lo_ms:
                c = replace(c, timestamp_lo_ms=lo)
    return c, False


def _topic(c: Constraints, f: Filter, value: Any) -> tuple[Constraints, bool]:
    if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(value, str):
        return _intersect_topics(c, {value}), True
    if isinstance(f, In) and all(isinstance(v, str) for v in value):
        return _intersect_topics(c, set(value)), True
    if isinstance(f, StringStartsWith) and isinstance(value, str):
        return replace(c, topic_prefixes=(*c.topic_prefixes, value)), True
    return c, False


def _intersect_topics(c: Constraints, topics: set[str]) -> Constraints:
    merged = frozenset(topics) if c.topics is None else c.topics & topics
    return replace(c, topics=merged)


def _partition(c: Constraints, f: Filter, value: Any) -> tuple[Constraints, bool]:
    if isinstance(f, In):
        if not all(_is_int(v) for v in value):
            return c, False
        wanted = frozenset(int(v) for v in value)
        return replace(c, partitions=wanted if c.partitions is None else c.partitions & wanted), \
            True
    if not _is_int(value):
        return c, False
    v = int(value)
    if isinstance(f, (EqualTo, EqualNullSafe)):
        wanted = frozenset({v})
        return replace(c, partitions=wanted if c.partitions is None else c.partitions & wanted), \
            True
    lo, hi = _bounds(f, v)
    if lo is not None:
        c = replace(c, partition_lo=lo if c.partition_lo is None else max(lo, c.partition_lo))
    if hi is not None:
        hi -= 1  # partition_hi is inclusive
        c = replace(c, partition_hi=hi if c.partition_hi is None else min(hi, c.partition_hi))
    return c, lo is not None or hi is not None


def _offset(c: Constraints, f: Filter, value: Any) -> tuple[Constraints, bool]:
    if isinstance(f, In):
        if not value or not all(_is_int(v) for v in value):
            return c, False
        return _offset_bounds(c, min(value), max(value) + 1), False
    if not _is_int(value):
        return c, False
    v = int(value)
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return _offset_bounds(c, v, v + 1), True
    lo, hi = _bounds(f, v)
    if lo is None and hi is None:
        return c, False
    return _offset_bounds(c, lo, hi), True


def _offset_bounds(c: Constraints, lo: int | None, hi: int | None) -> Constraints:
    if lo is not None and (c.offset_lo is None or lo > c.offset_lo):
        c = replace(c, offset_lo=lo)
    if hi is not None and (c.offset_hi is None or hi < c.offset_hi):
        c = replace(c, offset_hi=hi)
    if c.offset_lo is not None and c.offset_hi is not None and c.offset_hi <= c.offset_lo:
        c = replace(c, empty=True)
    return c


def _bounds(f: Filter, v: int) -> tuple[int | None, int | None]:
    """``[lo, hi)`` of an integer comparison, or ``(None, None)`` for other filters."""
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None, None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _micros(value: Any) -> int | None:
    """Epoch microseconds of a pushed timestamp literal (naive values are taken as UTC)."""
    if not isinstance(value, dt.datetime):
        return None
    moment: dt.datetime = value
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc)
    seconds: int = calendar.timegm(moment.timetuple())
    return seconds * 1_000_000 + moment.microsecond
