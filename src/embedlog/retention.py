"""Retention policy: which leading segments of a partition ``retention.ms`` and
``retention.bytes`` let go (Kafka's time- and size-based deletion). Pure: it reads segment
sizes and times, deletes nothing; :meth:`Partition.enforce_retention
<embedlog.partition.Partition.enforce_retention>` moves the log start and unlinks.

Rules: only closed segments go, never the active (last) one; segments go strictly from the
front; a segment goes by time when its newest timestamp (its file's modification time when it
holds no timestamp) is more than ``retention.ms`` before ``now``, by size when the partition
without it still holds at least ``retention.bytes``; a negative setting disables that rule.
Records are deleted only from topics whose ``cleanup.policy`` includes ``delete``: Kafka's
DeleteRecords refuses a compact-only topic (:func:`check_deletable`), as its retention passes
it over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .config import TopicConfig
from .errors import PolicyViolationError

__all__ = ["Measured", "check_deletable", "expired", "segment_time"]


def check_deletable(topic: str, partition: int, config: TopicConfig) -> None:
    """Raise :class:`PolicyViolationError` unless records of the topic may be deleted (its
    ``cleanup.policy`` includes ``delete``)."""
    if not config.delete:
        raise PolicyViolationError(
            f"records of {topic}-{partition} cannot be deleted: its cleanup.policy is "
            f"{config.cleanup_policy!r} (deleting records needs 'delete' in it)")


class Measured(Protocol):
    """What retention reads of a segment (a local :class:`~embedlog.segment.segment.Segment`,
    or a tiered segment known only from the remote manifest)."""

    @property
    def size(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...

    def last_modified_ms(self) -> int: ...


def expired(segments: Sequence[Measured], now: int, retention_ms: int,
            retention_bytes: int) -> int:
    """How many leading segments of ``segments`` (the active one last) retention deletes."""
    total = sum(s.size for s in segments)
    doomed = 0
    for seg in segments[:-1]:
        by_time = retention_ms >= 0 and now - segment_time(seg) > retention_ms
        by_size = retention_bytes >= 0 and total - seg.size >= retention_bytes
        if not (by_time or by_size):
            break
        total -= seg.size
        doomed += 1
    return doomed


def segment_time(seg: Measured) -> int:
    """The time retention.ms measures a segment by: its largest timestamp, else its mtime."""
    ts = seg.max_timestamp
    return ts if ts >= 0 else seg.last_modified_ms()
