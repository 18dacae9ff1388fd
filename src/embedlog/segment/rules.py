"""The offset rules of segments, one place for reads, tail walks, recovery and verify.

Within a segment (:func:`check_order`): batch offsets never go backwards -- each batch starts at
or above the segment's base offset and above the previous batch's last offset -- and fit a
signed 32-bit delta from the base offset. Forward gaps between batches are legal in general:
compaction leaves them in the segments it rewrites, and a Kafka follower of a compacted topic
appends its leader's compacted batches to its active segment as they come (Kafka rejects only
offsets that go backwards).

Two more rules use what the partition knows about a segment (:class:`Bounds`; the loader
decides them once per open, :func:`bounds_of`):

* **ceiling**: a segment's batches end below the next segment's base offset (its file name).
* **dense**: in the active segment of a topic embedlog created, every batch starts exactly
  where the previous one ended, the first at the segment's base offset. embedlog's one write
  path assigns each batch the log end offset, and neither the cleaner nor salvage ever
  rewrites the active segment, so a gap there is damage: the base offset lies outside the CRC,
  and a flip that moves the last batches forward is otherwise indistinguishable from a gap.

Sealed segments need no density flag: batches that never go backwards, start at or above the
base offset and end below the ceiling can only fill ``[base, ceiling)`` exactly when none of
their base offsets moved, so for a segment embedlog wrote (whose ceiling is its own end) any
damaged base offset breaks one of those rules -- while cleaned, salvaged and Kafka segments
keep their legal gaps. Only the active segment has no ceiling: its end is what recovery is
looking for.

Across the segments of a partition (:func:`end_offset_of`, :func:`stray_empty_tail`): a 0-byte
segment holds no record, so its base offset is only a claim. Kafka's log end offset is the
active segment's next offset -- its base offset while it is empty -- so one empty segment right
after the data counts; two or more empty segments at the end are strays that no writer made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ..errors import CorruptBatchError
from . import format as fmt

__all__ = [
    "BackwardsError",
    "Bounds",
    "GapError",
    "bounds_of",
    "check_ceiling",
    "check_order",
    "end_offset_of",
    "stray_empty_tail",
]

INT32_MAX: Final = 2**31 - 1


class _Sized(Protocol):
    """What the partition-level rules need of a segment."""

    @property
    def size(self) -> int: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the partition knows about one segment's offsets: ``ceiling``, the next segment's
    base offset (None for the last segment), and ``dense``, whether its batches leave no gap
    (see the module notes)."""

    ceiling: int | None = None
    dense: bool = False


FREE: Final = Bounds()
"""No partition context: only the rules within the segment apply."""


def bounds_of(segments: Sequence[_Sized], *, dense_tail: bool) -> list[Bounds]:
    """The :class:`Bounds` of one partition's ``segments`` (ordered by base offset): each ends
    below the next one's base; the last is dense when ``dense_tail`` (the active segment of a
    topic embedlog created, which embedlog alone wrote)."""
    return [Bounds(nxt.base_offset, False) for nxt in segments[1:]] + (
        [Bounds(None, dense_tail)] if segments else [])


def check_order(header: fmt.BatchHeader, floor: int | None, base_offset: int, path: str,
                position: int, bounds: Bounds = FREE) -> int:
    """The offsets of ``header`` start at or above ``floor`` -- exactly at it in a ``dense``
    segment -- and fit a 32-bit delta from ``base_offset`` and below the ceiling; returns the
    next floor. ``floor`` is the segment's base offset for its first batch, then the previous
    batch's next offset; None when the walk starts inside the segment (the previous batch is
    unknown: only ``base_offset`` bounds it). ``path`` and ``position`` locate the error."""
    if bounds.dense and floor is not None and header.base_offset != floor:
        # Checked first: the batches before passed this check, so this one is the damaged one.
        raise GapError(
            f"batch offsets {header.base_offset}..{header.last_offset} do not follow the "
            f"previous batch (expected base offset {floor}): embedlog writes this segment "
            "without gaps",
            path=path,
            position=position,
        )
    low = base_offset if floor is None else floor
    if header.base_offset < low or header.last_offset < header.base_offset:
        raise BackwardsError(
            f"batch offsets {header.base_offset}..{header.last_offset} are out of order "
            f"(expected >= {low})",
            path=path,
            position=position,
        )
    if header.last_offset - base_offset > INT32_MAX:
        raise CorruptBatchError(
            f"batch offsets {header.base_offset}..{header.last_offset} do not fit a 32-bit "
            f"delta from the segment's base offset {base_offset}",
            path=path,
            position=position,
        )
    check_ceiling(header, bounds.ceiling, path, position)
    return header.next_offset


def check_ceiling(header: fmt.BatchHeader, ceiling: int | None, path: str,
                  position: int | None = None) -> None:
    """A batch ends below ``ceiling``, the next segment's base offset (None: no next one)."""
    if ceiling is not None and header.last_offset >= ceiling:
        raise OverlapError(
            f"batch offsets {header.base_offset}..{header.last_offset} reach into "
            f"the next segment (base {ceiling})",
            path=path,
            position=position,
        )


def _empty_tail(segments: Sequence[_Sized]) -> int:
    n = 0
    while n < len(segments) and segments[-1 - n].size == 0:
        n += 1
    return n


def stray_empty_tail(segments: Sequence[_Sized]) -> int:
    """How many of the last ``segments`` (ordered by base offset) are stray empty files that
    no writer made: a 0-byte segment's base offset is only a claim. A writer leaves at most one
    empty segment at the end -- its active segment, rolled at the end offset (Kafka's
    ``roll``) -- or a single empty segment at the log start (Kafka's
    ``truncateFullyAndStartAt``). Two or more empty segments at the end are all strays (only
    the first is kept when nothing else is left)."""
    n = _empty_tail(segments)
    if n < 2:
        return 0
    return n - 1 if n == len(segments) else n


def end_offset_of(segments: Sequence[_Sized]) -> int:
    """The end offset ``segments`` (ordered by base offset, at least one) justify: one past
    the last batch, or the base offset of a single empty active segment after it (Kafka's log
    end offset is the active segment's next offset, its base while it is empty). Stray empty
    segments (:func:`stray_empty_tail`) never advance it."""
    last = segments[-1]
    if last.size:  # no empty tail (the common case)
        return last.next_offset
    n = _empty_tail(segments)
    if n == len(segments):
        return segments[0].base_offset
    before = segments[-1 - n].next_offset
    return max(before, segments[-1].base_offset) if n == 1 else before


class BackwardsError(CorruptBatchError):
    """A batch whose offsets go backwards: below the segment base or overlapping the batch
    before it."""


class GapError(CorruptBatchError):
    """A batch that does not start where the previous one ended in a segment that has no gaps
    (see the module notes): the batch itself is the damaged one."""


class OverlapError(CorruptBatchError):
    """A batch reaching into the next segment's offsets. Damage in a writer's log; in a
    read-only view also what a compaction swap looks like half way (the cleaned segment renamed
    in before the old ones it replaces left the listing), so a view lists the folder again."""
