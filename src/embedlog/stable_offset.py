"""A partition's last stable offset, kept up to date incrementally.

The last stable offset (LSO) is the first offset of the oldest transaction without a marker, else
the log end: where ``read_committed`` readers, the cleaner and tiering stop. Kafka keeps it in its
producer state; :class:`StableOffset` reads only the batch headers appended since its previous
call, and a read-only view's first call may start at a producer snapshot (:class:`StableSeed`)
instead of the first segment. Its answers are :func:`embedlog.transactions.last_stable_offset`'s
(see there and :meth:`~embedlog.transactions.TxnTracker.stable_from` for a transaction that may
have begun in deleted segments).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from .segment.segment import Segment
from .transactions import TxnTracker, batch_markers

__all__ = ["StableOffset", "StableSeed"]


class StableSeed(NamedTuple):
    """A producer snapshot as a starting point of :class:`StableOffset`: every batch below
    ``offset`` is summed up by ``producers`` (the producer ids it has state for) and ``open``
    (producer id -> first offset of its transaction open at ``offset``)."""

    offset: int
    producers: frozenset[int]
    open: Mapping[int, int]


class StableOffset:
    """One partition's last stable offset, kept up to date by reading only the batch headers
    appended since the previous call (Kafka keeps it in its producer state); the answer is
    always :func:`~embedlog.transactions.last_stable_offset`'s, bounded below by the log start
    and held there by a transaction that may have begun in deleted segments
    (:meth:`~embedlog.transactions.TxnTracker.stable_from`).

    It holds the segments it has read (the objects themselves: a segment deleted by retention or
    swapped in by compaction makes it read everything again, as does an end that went back), the
    position in the last of them where it stopped, and the transactions open so far. The caller
    serialises calls (the partition's lock)."""

    __slots__ = ("_end", "_position", "_segments", "_tracker")

    _segments: tuple[Segment, ...]
    _position: int
    _end: int
    _tracker: TxnTracker

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._segments, self._position, self._end = (), 0, 0
        self._tracker = TxnTracker(keep=False)

    def get(self, segments: Sequence[Segment], end: int, start: int = 0,
            began: Callable[[], Mapping[int, int]] | None = None,
            seed: Callable[[], StableSeed | None] | None = None) -> int:
        """The last stable offset of ``segments`` ending at ``end``, of a partition whose log
        start is ``start`` (``began``: see :meth:`TxnTracker.stable_from`). ``seed``: asked
        when reading starts from scratch; a snapshot inside ``segments`` (from the first
        one's base to ``end``) replaces the reading of every batch below its offset."""
        known = self._segments
        if end < self._end or len(segments) < len(known) or \
                any(a is not b for a, b in zip(known, segments, strict=False)):
            self._forget()
            known = ()
        first, floor = max(len(known) - 1, 0), -1
        if not known and seed is not None and segments:
            first, floor = self._seeded(segments, end, seed)
        for i in range(first, len(segments)):
            seg, position = segments[i], self._position if i == first else 0
            self._segments, self._position = tuple(segments[: i + 1]), position
            for at, header, kind in batch_markers(seg, position, end):
                if header.base_offset >= floor:  # (below: the seed's)
                    self._tracker.on_batch(header, kind)
                self._position = at + header.size
        self._end = end
        headless = bool(segments) and segments[0].base_offset > 0
        lso = self._tracker.stable_from(start, headless, began)
        return max(start, end) if lso is None else lso

    def _seeded(self, segments: Sequence[Segment], end: int,
                seed: Callable[[], StableSeed | None]) -> tuple[int, int]:
        """Start from ``seed()`` when it lies inside ``segments`` (the first one's base
        included: its transactions may have begun in segments deleted since): the index of the
        segment holding its offset and the offset (batches below it are the seed's); else
        ``(0, -1)``. The seed's producers count as marked: where each one's transaction began
        is known."""
        found = seed()
        if found is None or not segments[0].base_offset <= found.offset <= end:
            return 0, -1
        i = bisect.bisect_right([s.base_offset for s in segments], found.offset) - 1
        self._tracker.open.update(found.open)
        self._tracker.marked.update(found.producers)
        return i, found.offset
