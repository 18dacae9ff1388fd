"""The read side of a partition: capturing a range of segments, scanning it into batches and
records, finding an offset by timestamp, and following the writer from a read-only view.

:class:`~embedlog.partition.Partition` keeps the public calls (``batches``, ``read``,
``offset_for_timestamp``, ``refresh``); they run these functions on it. Scanning the captured
segments is :mod:`embedlog.reader`'s.

A read-only partition never writes; the writer of another process keeps appending, rolling,
deleting and swapping compacted segments in under it. So a view:

* refreshes (:func:`refresh_view`): lists the folder again and adopts what changed
  (:func:`embedlog.view_loader.adopt`), the active segment's new size, and the writer's persisted
  log start offset;
* scans so that it survives the writer: a captured segment deleted or replaced before its
  file was (re)opened (the descriptor budget opens files lazily, :mod:`embedlog._handles`) raises
  ``StorageError(ESTALE)``; the view lists the folder again and resumes after the last batch it
  yielded, at most ``_RESCANS`` times -- unless that offset is now below the log start
  (``delete_records``/retention took it): then :class:`~embedlog.errors.OffsetOutOfRangeError`,
  as a read from there would raise (a consumer applies its ``auto_offset_reset``), never a silent
  jump to the new log start;
* reads the known records first: a bounded read below the known end lists no folder; only
  a read that comes up short refreshes (reading on from the known end).

A tiered partition (``tier``, :mod:`embedlog.tiering`) may start below its first local
segment: a scan from there reads the remote segments first, each fetched only when the scan
reaches it (:func:`batches`), then the local ones.

Invariants: the segment list is captured under the partition's lock, once per scan (segments
deleted meanwhile stay readable through their open descriptors); a view's log start only moves
forward and never past its end offset.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sized
from typing import Protocol, TypeVar

from . import reader, view_loader
from .errors import OffsetOutOfRangeError, StorageError
from .loader import Stamp
from .records import Record
from .segment import _native
from .segment import format as fmt
from .segment.point_read import deferred
from .segment.rules import OverlapError
from .segment.segment import Segment, SegmentSettings

__all__ = [
    "Readable", "RemoteSegments", "batches", "check_range", "decoded", "offset_for_timestamp",
    "read", "refresh_view", "scan", "segment_index", "with_remote",
]

_RESCANS = 20  # how often a scan follows the writer's deletions and swaps

Batch = tuple[fmt.BatchHeader, fmt.DecodedRecords]
Batches = Iterator[Batch]
R = TypeVar("R", bound=Sized)


class RemoteSegments(Protocol):
    """A tiered partition's remote part (:class:`embedlog.tiering.tier.Tier`): segments
    published to the remote store, below the first local one."""

    def floor(self, local_base: int) -> int | None: ...

    def refresh_note(self) -> None: ...

    def segments(self, start: int, below: int, settings: SegmentSettings) -> list[Segment]: ...

    def each_segment(self, start: int, below: int, settings: SegmentSettings
                     ) -> Iterator[Segment]: ...

    def offset_for_timestamp(self, timestamp: int, below: int,
                             settings: SegmentSettings, start: int = 0) -> int | None: ...


class Readable(Protocol):
    """What reading needs of a partition (:class:`embedlog.partition.Partition`)."""

    directory: str
    topic: str
    partition: int
    settings: SegmentSettings
    writable: bool
    lock: threading.RLock
    segments: list[Segment]
    start_offset: int
    _bases: list[int]
    _manifest_seen: Stamp
    tier: RemoteSegments | None

    @property
    def end_offset(self) -> int: ...

    def persisted_start(self) -> int | None: ...

    def refresh(self) -> None: ...


def refresh_view(p: Readable) -> None:
    """Pick up segments created or deleted by the writer (and swapped in by its compaction)
    and the active segment's new size; a writer's partition is left alone. A segment deleted
    between the listing and its opening (``StorageError(ESTALE)``) makes it list again."""
    if p.writable:
        return
    with p.lock:
        for attempt in range(_RESCANS + 1):
            try:
                return _refresh_once(p, stale_dropped=attempt > 0)
            except StorageError as exc:  # a segment listed was deleted before it was opened
                if exc.errno != errno.ESTALE or attempt == _RESCANS:
                    raise
                time.sleep(0.001 * (attempt + 1))


def _refresh_once(p: Readable, stale_dropped: bool) -> None:
    """One listing adopted; with ``stale_dropped`` the open segments whose name now holds
    another file (or none) are opened afresh rather than kept."""
    try:
        names = os.listdir(p.directory)
    except FileNotFoundError:
        names = []
    segments = [s for s in p.segments if s.is_current()] if stale_dropped else p.segments
    adopted = view_loader.adopt(p.directory, p.settings, segments, names, p._manifest_seen)
    if adopted is not None:
        p.segments, p._manifest_seen = adopted
        p._bases = [s.base_offset for s in p.segments]
        if p._bases:
            p.start_offset = max(p.start_offset, local_floor(p))
    if p.segments:
        p.segments[-1].refresh()
    persisted = p.persisted_start()
    if persisted is not None and persisted > p.start_offset:
        p.start_offset = min(persisted, p.end_offset)


def local_floor(p: Readable) -> int:
    """The lowest offset readable: the first local segment's base, or below it the start of
    the tiered segments that reach it (:class:`RemoteSegments`)."""
    base = p._bases[0]
    if p.tier is None:
        return base
    if not p.writable:
        p.tier.refresh_note()
    floor = p.tier.floor(base)
    return base if floor is None else floor


def with_remote(p: Readable, start: int, segs: list[Segment], end: int | None = None
                ) -> list[Segment]:
    """``segs`` (captured from the local list for a read of ``[start, end)``) preceded by
    the tiered segments that hold the offsets from ``start`` up to the first of them."""
    if p.tier is None or not segs or start >= segs[0].base_offset:
        return segs
    below = segs[0].base_offset if end is None else min(end, segs[0].base_offset)
    return p.tier.segments(start, below, p.settings) + segs


def _remote_batches(p: Readable, tier: RemoteSegments, start: int, stop: int, control: bool,
                    wanted: int | None, decode: reader.Decode[R]
                    ) -> Generator[tuple[fmt.BatchHeader, R], None, tuple[int, int | None]]:
    """The batches of ``[start, stop)`` (``stop`` at most the first local base) from the
    tiered segments, each fetched only when the scan reaches it; returns where the scan
    ended and how many records are still wanted."""
    offset = start
    for seg in tier.each_segment(start, stop, p.settings):
        ceiling = seg.bounds.ceiling if seg.bounds.ceiling is not None else stop
        for header, found in reader.scan([seg], offset, min(stop, ceiling), control=control,
                                         max_records=wanted, current_end=lambda: p.end_offset,
                                         decode=decode):
            offset = header.next_offset
            if wanted is not None:
                wanted -= len(found)
            yield header, found
            if wanted is not None and wanted <= 0:
                return offset, 0
        offset = max(offset, ceiling)
    return offset, wanted


def scan(p: Readable, segs: list[Segment], offset: int, stop: int, control: bool,
         wanted: int | None, decode: reader.Decode[R]
         ) -> Iterator[tuple[fmt.BatchHeader, R]]:
    """:func:`embedlog.reader.scan` of ``segs`` over ``[offset, stop)``; a view that meets
    ESTALE or a compaction swap half way (:class:`~embedlog.segment.rules.OverlapError`) lists
    the folder again and resumes (a writer re-raises it)."""

    def current_end() -> int:
        with p.lock:  # an append in progress has updated the end once the lock is free
            return p.end_offset

    for _ in range(_RESCANS):
        try:
            for header, found in reader.scan(segs, offset, stop, control=control,
                                             max_records=wanted, current_end=current_end,
                                             decode=decode):
                offset = header.next_offset
                if wanted is not None:
                    wanted -= len(found)
                yield header, found
            return
        except (StorageError, OverlapError) as exc:
            if p.writable or (isinstance(exc, StorageError) and exc.errno != errno.ESTALE):
                raise
            gone = exc
        with p.lock:
            p.refresh()
            if offset < p.start_offset:  # deleted under the scan: never skipped in silence
                raise OffsetOutOfRangeError(
                    f"offset {offset} of {p.topic}-{p.partition} was deleted during the read: "
                    f"the log now starts at {p.start_offset}") from gone
            segs = with_remote(p, offset, list(p.segments[segment_index(p, offset) :]))
    raise gone


def segment_index(p: Readable, offset: int) -> int:
    """Where in ``p.segments`` the segment holding ``offset`` is (the first one below it)."""
    return max(0, bisect.bisect_right(p._bases, offset) - 1)


def check_range(p: Readable, offset: int) -> None:
    """Raise unless ``offset`` lies in ``[log start, log end]`` (the end: nothing yet)."""
    if offset < p.start_offset or offset > p.end_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for {p.topic}-{p.partition}: "
            f"the log holds [{p.start_offset}, {p.end_offset})"
        )


def batches(p: Readable, start: int | None, end: int | None, control: bool,
            max_records: int | None) -> Batches:
    """Data batches whose records fall in ``[start, end)``, each restricted to that range
    (:func:`embedlog.reader.scan`: control batches skipped unless ``control``; with
    ``max_records`` decoded no further than that). The segment list is captured once.
    ``start=None``: the log start when the scan begins (wherever retention moved it)."""
    return decoded(p, start, end, control, max_records, reader.restrict)


def decoded(p: Readable, start: int | None, end: int | None, control: bool,
            max_records: int | None, decode: reader.Decode[R]
            ) -> Iterator[tuple[fmt.BatchHeader, R]]:
    """:func:`batches` with each batch made into records by ``decode``
    (:data:`embedlog.reader.Decode`) rather than :func:`embedlog.reader.restrict`."""
    start, stop, segs = _capture(p, start, end)
    if p.tier is not None and segs and start < segs[0].base_offset:
        start, max_records = yield from _remote_batches(
            p, p.tier, start, min(stop, segs[0].base_offset), control, max_records, decode)
        if max_records == 0 or start >= stop:
            return
    yield from scan(p, segs, start, stop, control, max_records, decode)


def _capture(p: Readable, start: int | None, end: int | None) -> tuple[int, int, list[Segment]]:
    """``(start, stop, segments)`` of a scan; a view refreshes first unless the range lies below
    its known end (a view kept short of a damaged segment, :func:`embedlog.view_loader.open_view`,
    then raises). A view that meets a compaction swap half way
    (:class:`~embedlog.segment.rules.OverlapError`) lists the folder again, up to ``_RESCANS``
    times; a writer's overlap is damage and raises."""
    for attempt in range(_RESCANS + 1):
        try:
            with p.lock:
                if not p.writable and (attempt or start is None or end is None
                                       or start >= p.end_offset or end > p.end_offset):
                    p.refresh()
                first = p.start_offset if start is None else start
                check_range(p, first)
                stop = p.end_offset if end is None else min(end, p.end_offset)
                return first, stop, list(p.segments[segment_index(p, first) :])
        except OverlapError:
            if p.writable or attempt == _RESCANS:
                raise
            time.sleep(0.001 * (attempt + 1))  # the writer is between a rename and an unlink
    raise AssertionError("unreachable")


def read(p: Readable, start: int | None, end: int | None,
         max_records: int | None) -> Iterator[Record]:
    """Records from ``start`` (:func:`embedlog.reader.records`); a bounded read from a known
    offset is answered from one remembered batch when it can be (:func:`_remembered`)."""
    if max_records is None or start is None:
        return reader.records(p.topic, p.partition,
                              batches(p, start, end, False, max_records), max_records)
    core = _native.CORE  # lazy as a generator: nothing is read before the first next()
    args = (p, start, end, max_records)
    return deferred(_bounded, args) if core is None else core.deferred(_bounded, args)


def _bounded(p: Readable, start: int, end: int | None, max_records: int) -> Iterable[Record]:
    """:func:`read` of at most ``max_records`` from ``start``, run at its first ``next()``:
    from one remembered batch, or the scan; a view below its known end reads the known
    records first (:func:`_read_known`), else it refreshes."""
    found = _remembered(p, start, end, max_records)
    if found is not None:
        return found
    if p.writable or start >= p.end_offset:
        return reader.records(p.topic, p.partition,
                              batches(p, start, end, False, max_records), max_records)
    return _read_known(p, start, end, max_records)


def _remembered(p: Readable, start: int, end: int | None, wanted: int) -> list[Record] | None:
    """The records of a bounded read from ``start`` when one batch the point-read memo holds
    (:meth:`Segment.remembered_records <embedlog.segment.point_read.PointReads.remembered_records>`)
    answers all of it, as the scan would (``wanted`` records of it, or those up to the end the
    read stops at); None otherwise, and for anything the scan handles on its own (an offset
    out of range or below the local segments, a segment gone or swapped under a view): the
    read then takes the scan, which answers or raises."""
    with p.lock:  # (not acquire/try: an interrupt could land between the two)
        bases = p._bases
        i = bisect.bisect_right(bases, start) - 1
        if i < 0 or start < p.start_offset:
            return None
        known = p.end_offset
        seg = p.segments[i]
        ceiling = bases[i + 1] if i + 1 < len(bases) else None
    stop = known if end is None or end > known else end
    if start >= stop or wanted < 1:
        return None
    try:
        # A view reads on past its known end (_read_known): a short run is whole only for a
        # writer or a read that stops there. A batch reaching the ceiling is damage the scan
        # reports (reader.scan's check_ceiling).
        return seg.remembered_records(start, stop, wanted, ceiling, p.writable or stop == end,
                                      p.topic, p.partition)
    except StorageError:  # the scan meets it too (a view's then lists the folder again)
        return None


def _read_known(p: Readable, start: int, end: int | None, max_records: int) -> Iterator[Record]:
    """Up to ``max_records`` records from ``start``: those below the known end first, then
    (only if that came up short) on from there through :func:`read`, which refreshes."""
    known = p.end_offset if end is None or end > p.end_offset else end
    got = 0
    for rec in reader.records(p.topic, p.partition,
                              batches(p, start, known, False, max_records), max_records):
        got += 1
        yield rec
    if known != end and got < max_records:
        yield from read(p, known, end, max_records - got)


def offset_for_timestamp(p: Readable, timestamp: int) -> int | None:
    """Earliest offset whose timestamp is >= ``timestamp`` (Kafka's ``offsetsForTimes``)."""
    with p.lock:
        p.refresh()
        segs = list(p.segments)
        start = p.start_offset
    if p.tier is not None and segs:
        found_remote = p.tier.offset_for_timestamp(timestamp, segs[0].base_offset, p.settings,
                                                   start)
        if found_remote is not None:
            return found_remote
    for seg in segs:
        if seg.max_timestamp < timestamp and seg is not segs[-1]:
            continue
        found = seg.find_offset_by_timestamp(timestamp, start)
        if found is not None:
            return found
    return None
