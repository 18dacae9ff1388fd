"""The read path over a partition's segments: offset -> segment -> batch -> records.

:func:`scan` walks a captured list of segments (the partition picks them under its lock: the
first is the one holding the start offset) from the offset index floor of the start offset,
restricting every batch to ``[start, stop)``; :func:`records` turns the columns into
:class:`~embedlog.records.Record` tuples with :meth:`DecodedRecords.records` (built in C by the
compiled core; C-level ``map``/``zip`` in the pure codec: no per-record bytecode either way).

Offsets are checked on the way, because the base offset lies outside the CRC: a batch reaching
into the next segment, or (in a sealed segment) past the log end, is corruption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from itertools import chain
from typing import TypeVar, cast

from . import _io
from .errors import CorruptBatchError
from .records import Record
from .segment import format as fmt
from .segment import point_memo
from .segment.rules import check_ceiling
from .segment.segment import Segment

__all__ = ["Decode", "records", "restrict", "scan"]

R = TypeVar("R", bound=Sized)
Decode = Callable[[bytes, int, fmt.BatchHeader, int, int, "int | None"], R]
"""What :func:`scan` makes of a stored batch: ``decode(buf, position, header, offset, stop,
wanted)`` -> the batch's records in ``[offset, stop)`` (:func:`restrict`), in whatever form;
called while ``buf`` is valid, it must keep no view of it (``buf`` may be a mapping)."""


def scan(
    segs: list[Segment],
    start: int,
    stop: int,
    *,
    control: bool,
    max_records: int | None,
    current_end: Callable[[], int],
    decode: Decode[R],
) -> Iterator[tuple[fmt.BatchHeader, R]]:
    """Data batches of ``segs`` whose records fall in ``[start, stop)``, each restricted to that
    range by ``decode`` (:func:`restrict`, or a consumer's own: see :data:`Decode`; a batch
    is yielded when its result is not empty). Control batches are skipped (their offsets still
    count) unless ``control``. With ``max_records`` the caller promises to stop after that many
    records, so the batches are decoded no further (a point read walks its batch only up to
    the record it wants).
    ``current_end`` gives the partition's end offset now (an append may be in progress)."""
    if not segs:  # a partition with no segment (a read-only view of a folder not there)
        return
    wanted = max_records
    offset = start
    ceilings = [s.base_offset for s in segs[1:]] + [None]
    for seg, ceiling in zip(segs, ceilings, strict=True):
        if offset >= stop:
            return
        # A point read (restricting as every read does) uses and fills the point-read memo.
        memo = wanted is not None and decode is restrict
        if memo and wanted is not None:
            hit = seg.remembered_run(offset, stop, wanted)
            if hit is not None and not _past(seg, hit[0], ceiling, stop, current_end) and (
                    len(hit[1]) == wanted or hit[0].last_offset + 1 >= stop):
                yield cast("tuple[fmt.BatchHeader, R]", hit)  # decode is restrict
                return
        found_at = seg.find_batch(offset)
        if found_at is None:
            continue
        position, head = found_at
        # The file's identity is taken before its batch is read, and only for a batch that
        # can be remembered (its header, read by find_batch, says so).
        ident = seg.read_identity() if memo and point_memo.eligible(
            fmt.parse_header(head, 0)) else None
        for buf, p, header in seg.batches(position, verify=_io.SAFETY.verify_crc,
                                          exact_first=wanted is not None, head=head):
            at, ident = ident, None  # only the first batch's file position is known
            if _past(seg, header, ceiling, stop, current_end):
                return
            if (header.last_offset < offset or (header.is_control and not control)
                    or not header.records_count):
                continue
            if at is not None and point_memo.eligible(header):  # decode is restrict
                found = cast(R, _remember(at, position, buf, p, header, offset, stop, wanted))
            else:
                found = decode(buf, p, header, offset, stop, wanted)
            if len(found):
                yield header, found
                if wanted is not None:
                    wanted -= len(found)
                    if wanted <= 0:
                        return
        offset = max(offset, seg.next_offset)


def _past(seg: Segment, header: fmt.BatchHeader, ceiling: int | None, stop: int,
          current_end: Callable[[], int]) -> bool:
    """Whether ``header`` lies at or past ``stop``; raises for a batch reaching into the next
    segment or past the log end."""
    check_ceiling(header, ceiling, seg.log_path)
    if header.base_offset < stop:
        return False
    if not seg.live and header.base_offset >= current_end():
        raise CorruptBatchError(
            f"batch offsets {header.base_offset}..{header.last_offset} lie past "
            f"the log end offset", path=seg.log_path)
    return True


def _remember(identity: point_memo.Key, at: int, buf: bytes, position: int, header: fmt.BatchHeader,
              offset: int, stop: int, wanted: int | None) -> fmt.DecodedRecords:
    """:func:`restrict` for a point read's first batch (at file position ``at``): decoded
    whole, its record ends remembered (:mod:`.segment.point_memo`) for the next point reads."""
    found = fmt.decode_records(buf, position, header)
    point_memo.remember(identity, at, header, found)
    lo = int(found.offsets.searchsorted(offset))
    hi = int(found.offsets.searchsorted(stop))
    if wanted is not None:
        hi = min(hi, lo + wanted)
    return found if lo == 0 and hi == len(found) else found.slice(lo, hi)


def restrict(buf: bytes, position: int, header: fmt.BatchHeader, offset: int, stop: int,
              wanted: int | None) -> fmt.DecodedRecords:
    """The records of the batch at ``position`` of ``buf`` that fall in ``[offset, stop)``,
    decoding no more than ``wanted`` of them."""
    first, count = 0, wanted
    if offset > header.base_offset:
        if header.records_count == header.last_offset_delta + 1:
            first = offset - header.base_offset  # dense: record i has offset base + i
        else:
            count = None  # compacted: which record holds `offset` is known only by decoding
    found = fmt.decode_records(buf, position, header, first=first, count=count)
    lo = hi = None
    if found.offsets[0] < offset:
        lo = int(found.offsets.searchsorted(offset))
    if header.last_offset >= stop:
        hi = int(found.offsets.searchsorted(stop))
    if lo is not None or hi is not None:
        found = found.slice(lo or 0, len(found) if hi is None else hi)
    return found


def records(
    topic: str,
    partition: int,
    batches: Iterable[tuple[fmt.BatchHeader, fmt.DecodedRecords]],
    max_records: int | None,
) -> Iterator[Record]:
    """The records of ``batches`` (at most ``max_records``) as ``Record`` tuples (lazily, one
    batch at a time; handed out by ``chain``, with no generator step per record)."""
    return chain.from_iterable(_lists(topic, partition, batches, max_records))


def _lists(
    topic: str,
    partition: int,
    batches: Iterable[tuple[fmt.BatchHeader, fmt.DecodedRecords]],
    max_records: int | None,
) -> Iterator[list[Record]]:
    remaining = max_records
    for header, columns in batches:
        n = len(columns)
        if remaining is not None and n > remaining:
            columns = columns.slice(0, remaining)
        yield columns.records(topic, partition, header.timestamp_type)
        if remaining is not None:
            remaining -= n
            if remaining <= 0:
                return
