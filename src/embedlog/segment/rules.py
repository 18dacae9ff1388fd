"""The offset rules of segments, one place for reads, tail walks, recovery and verify.

Within a segment (:func:`check_order`): batch offsets never go backwards -- each batch starts at
or above the segment's base offset and above the previous batch's last offset -- and fit a
signed 32-bit delta from the base offset. Forward gaps are legal everywhere, the active segment
included: compaction leaves them, and a Kafka follower of a compacted topic appends its leader's
compacted batches as they come (Kafka rejects only offsets that go backwards).

Across the segments of a partition (:func:`end_offset_of`, :func:`stray_empty_tail`): a 0-byte
segment holds no record, so its base offset is only a claim. Kafka's log end offset is the
active segment's next offset -- its base offset while it is empty -- so one empty segment right
after the data counts; two or more empty segments at the end are strays that no writer made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from ..errors import CorruptBatchError
from . import format as fmt

__all__ = ["BackwardsError", "check_order", "end_offset_of", "stray_empty_tail"]

INT32_MAX: Final = 2**31 - 1


class _Sized(Protocol):
    """What the partition-level rules need of a segment."""

    @property
    def size(self) -> int: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def next_offset(self) -> int: ...


def check_order(header: fmt.BatchHeader, floor: int, base_offset: int, path: str,
                position: int) -> int:
    """The offsets of ``header`` start at or above ``floor`` (the segment's base offset, then
    the previous batch's next offset: forward gaps are legal) and fit a 32-bit delta from
    ``base_offset``; returns the next floor. ``path`` and ``position`` locate the error."""
    if header.base_offset < floor or header.last_offset < header.base_offset:
        raise BackwardsError(
            f"batch offsets {header.base_offset}..{header.last_offset} are out of order "
            f"(expected >= {floor})",
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
    return header.next_offset


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
    n = _empty_tail(segments)
    if n == 0:
        return segments[-1].next_offset
    if n == len(segments):
        return segments[0].base_offset
    before = segments[-1 - n].next_offset
    return max(before, segments[-1].base_offset) if n == 1 else before


class BackwardsError(CorruptBatchError):
    """A batch whose offsets go backwards: below the segment base or overlapping the batch
    before it."""
