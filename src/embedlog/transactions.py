"""Transactions as the storage sees them: which batches belong to aborted transactions, and
where the oldest transaction still without a marker begins.

A transactional producer writes data batches with the *transactional* attribute bit and its
producer id, then ends the transaction with a *marker*: a control batch of that producer id
whose one record's key holds the type, ``COMMIT`` (1) or ``ABORT`` (0). Batches of other
producers interleave freely. Terms used here and by the readers above:

* an **open transaction** of a producer id starts at the first offset of its transactional
  data written since that producer's last marker; the next marker of that producer id ends it,
  whatever the marker's type (a marker with no open transaction before it ends nothing);
* an **aborted range** (:class:`AbortedTxn`) is ``(producer id, first offset, offset of the
  ABORT marker)`` -- one entry of Kafka's ``.txnindex``. A batch is **aborted** when it is
  transactional and its producer id has an aborted range that holds its last offset;
* the **last stable offset** of a range of batches is the first offset of its oldest open
  transaction (``None`` when none is open): a ``read_committed`` reader hands out nothing at or
  past it, and the cleaner cleans nothing past it.

Kafka's rules are followed where they decide an odd case: batches without a producer id
(``producer_id < 0``) take no part in transactions, and a control batch ends its producer's
transaction even without the transactional bit; a control batch left empty by compaction ends
it without a type.

Nothing here writes, and nothing here knows about clients: the consumer's ``read_committed``
filter, the cleaner (:mod:`embedlog.compaction.txn`) and a future ``.txnindex`` build on
:class:`TxnTracker` (batches in offset order in, aborted ranges and the last stable offset
out), :func:`aborted_ranges` (the same over a run of segments) and :class:`AbortedRanges`
(is this batch aborted?).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .segment import format as fmt
from .segment.segment import Segment

__all__ = [
    "AbortedRanges",
    "AbortedTxn",
    "TxnTracker",
    "aborted_ranges",
    "control_type",
    "iter_headers",
    "last_stable_offset",
    "marker_type",
    "segment_markers",
]


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer id, its first offset and its ABORT marker's
    (last) offset; every transactional batch of ``producer_id`` in between is aborted."""

    producer_id: int
    first_offset: int
    last_offset: int


def marker_type(records: fmt.DecodedRecords) -> int | None:
    """The type of the marker whose decoded records are ``records`` (``None`` if empty)."""
    if not len(records):
        return None
    return fmt.decode_control_record(records.key(0))[1]


def control_type(raw: bytes | memoryview, header: fmt.BatchHeader) -> int | None:
    """The marker type of the control batch ``raw`` (0 ABORT, 1 COMMIT, ...), ``None`` if it
    is empty."""
    if not header.records_count:
        return None
    return marker_type(fmt.decode_records(raw, 0, header))


class TxnTracker:
    """Fed batches in offset order, follows each producer's open transaction.

    ``open`` maps a producer id to the first offset of its open transaction; ``aborted`` lists
    the aborted ranges completed so far, in marker order.
    """

    __slots__ = ("aborted", "open")

    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = []

    def on_data(self, header: fmt.BatchHeader, first_offset: int | None = None) -> None:
        """A data batch; ``first_offset`` is its first offset the reader saw (default the
        base offset: a reader that starts inside a batch opens the transaction there)."""
        if header.is_transactional and header.producer_id >= 0:
            self.open.setdefault(
                header.producer_id, header.base_offset if first_offset is None else first_offset
            )

    def on_marker(self, header: fmt.BatchHeader, kind: int | None) -> AbortedTxn | None:
        """A control batch of type ``kind`` (``None``: emptied by compaction); the aborted
        range it completes, if it is an ABORT."""
        pid = header.producer_id
        if pid < 0:
            return None
        first = self.open.pop(pid, None)
        if kind != fmt.CONTROL_ABORT:
            return None
        txn = AbortedTxn(pid, header.base_offset if first is None else first, header.last_offset)
        self.aborted.append(txn)
        return txn

    def on_batch(self, header: fmt.BatchHeader, kind: int | None = None) -> None:
        """Either of the above, by the header's control bit."""
        if header.is_control:
            self.on_marker(header, kind)
        else:
            self.on_data(header)

    @property
    def last_stable_offset(self) -> int | None:
        """First offset of the oldest open transaction; ``None`` when none is open."""
        return min(self.open.values()) if self.open else None


def iter_headers(seg: Segment, position: int = 0) -> Iterator[tuple[int, fmt.BatchHeader]]:
    """``(position, header)`` of each complete batch of ``seg`` from ``position``, reading only
    headers (the CRC is not checked: a reader of the records does that)."""
    size = seg.size
    while position + fmt.HEADER_SIZE <= size:
        header = fmt.parse_header(seg.pread(position, fmt.HEADER_SIZE), 0)
        if position + header.size > size:
            return
        yield position, header
        position += header.size


def segment_markers(
    segments: Iterable[Segment], end: int
) -> Iterator[tuple[fmt.BatchHeader, int | None]]:
    """``(header, marker type)`` of each batch of ``segments`` (in order) below offset ``end``;
    the type is read (one small decode) for control batches only, ``None`` for data."""
    for seg in segments:
        for position, header in iter_headers(seg):
            if header.base_offset >= end:
                return
            kind = None
            if header.is_control and header.producer_id >= 0:
                kind = control_type(seg.pread(position, header.size), header)
            yield header, kind


def aborted_ranges(segments: Sequence[Segment], end: int) -> TxnTracker:
    """The aborted ranges and open transactions of ``segments`` below offset ``end``: what a
    ``.txnindex`` would hold for them, rebuilt from the batch headers."""
    tracker = TxnTracker()
    for header, kind in segment_markers(segments, end):
        tracker.on_batch(header, kind)
    return tracker


def last_stable_offset(segments: Sequence[Segment], end: int) -> int:
    """The last stable offset of ``segments`` ending at ``end``: the first offset of the
    oldest transaction without a marker, else ``end``."""
    lso = aborted_ranges(segments, end).last_stable_offset
    return end if lso is None else lso


class AbortedRanges:
    """Aborted ranges, indexed per producer id to answer :meth:`is_aborted` in any order."""

    __slots__ = ("_firsts", "_txns")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        by_pid: dict[int, list[AbortedTxn]] = {}
        for txn in sorted(aborted, key=lambda t: t.first_offset):
            by_pid.setdefault(txn.producer_id, []).append(txn)
        self._txns = by_pid
        self._firsts = {pid: [t.first_offset for t in ts] for pid, ts in by_pid.items()}

    def __bool__(self) -> bool:
        return bool(self._txns)

    def is_aborted(self, header: fmt.BatchHeader) -> bool:
        """True when ``header``'s batch is a transactional data batch of an aborted
        transaction (its records must never reach a ``read_committed`` reader)."""
        if header.is_control or not header.is_transactional:
            return False
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, header.last_offset) - 1
        return i >= 0 and header.last_offset <= self._txns[header.producer_id][i].last_offset
