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
  past it, and the cleaner cleans nothing past it. A partition's is never below its log start,
  and a transaction whose first batches were deleted (``delete_records``, retention) is still
  open: its later batches are transactional and have no marker after them. Kafka keeps such a
  transaction in its producer state, so the last stable offset stays at the log start until
  the marker. Read from the segments alone, an open transaction of a producer with no marker
  in them may have begun below the first segment, once segments were deleted (the first one's
  base is above 0): :class:`StableOffset` then stops at the log start, unless the writer's
  producer state tells where the transaction began.

Kafka's rules are followed where they decide an odd case: batches without a producer id
(``producer_id < 0``) take no part in transactions, and a control batch ends its producer's
transaction even without the transactional bit; a control batch left empty by compaction ends
it without a type.

Nothing here knows about clients, and nothing writes but :func:`rebuild_txn_indexes`
(recovery's rebuild of the ``.txnindex`` files). The pieces:

* :class:`TxnTracker` (batches in offset order in; aborted ranges, the ``.txnindex`` entries
  they make and the last stable offset out), :func:`aborted_ranges` (the same over a run of
  segments), used by the writer (:mod:`embedlog.producer_state`), recovery, the cleaner
  (:mod:`embedlog.compaction.txn`) and the transaction coordinator;
* :func:`indexed_aborted`: the aborted ranges of a fetch read from the segments' ``.txnindex``
  files (Kafka's ``collectAbortedTransactions``), ``None`` when a segment has none;
  :func:`rebuild_txn_indexes` rewrites those files from the markers;
* :class:`AbortedRanges`: is this batch aborted?
* :class:`CommittedFilter`: **the** ``read_committed`` filter, batch by batch, used by the
  consumer's fetcher, the Arrow reader and the Spark source.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .errors import CorruptIndexError
from .index.txn_index import TxnIndexEntry
from .segment import format as fmt
from .segment.segment import Segment

__all__ = [
    "AbortedRanges",
    "AbortedTxn",
    "CommittedFilter",
    "TxnBatch",
    "TxnTracker",
    "aborted_ranges",
    "batch_markers",
    "control_type",
    "indexed_aborted",
    "iter_headers",
    "last_stable_offset",
    "marker_type",
    "rebuild_txn_indexes",
    "segment_markers",
]

_T = TypeVar("_T")
_NO_END = 2**63 - 1


class TxnBatch(Protocol):
    """What the transaction rules read of a batch (a :class:`~embedlog.segment.format.BatchHeader`
    or a :class:`~embedlog.records.RecordBatch`)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...


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
    the aborted ranges completed so far, in marker order, and ``entries`` the same as
    ``.txnindex`` entries: each with the last stable offset right after its marker (the first
    offset of the oldest transaction of another producer still open, else the marker's offset
    + 1: Kafka's ``ProducerStateManager.lastStableOffset``). ``marked`` holds the producer ids
    of the markers fed (an open transaction of one of them began where ``open`` says).
    """

    __slots__ = ("_keep", "aborted", "entries", "marked", "open")

    def __init__(self, *, keep: bool = True) -> None:
        """``keep=False``: follow open transactions only (a writer's state: no history)."""
        self.open: dict[int, int] = {}
        self.marked: set[int] = set()
        self.aborted: list[AbortedTxn] = []
        self.entries: list[TxnIndexEntry] = []
        self._keep = keep

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
        self.marked.add(pid)
        first = self.open.pop(pid, None)
        if kind != fmt.CONTROL_ABORT:
            return None
        txn = AbortedTxn(pid, header.base_offset if first is None else first, header.last_offset)
        if self._keep:
            self.aborted.append(txn)
            stable = min(self.open.values()) if self.open else txn.last_offset + 1
            self.entries.append(TxnIndexEntry(pid, txn.first_offset, txn.last_offset, stable))
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

    def stable_from(self, start: int, headless: bool,
                    began: Callable[[], Mapping[int, int]] | None = None) -> int | None:
        """The last stable offset of a partition whose log start is ``start``, fed from its
        first segment (``None`` when nothing is open). With ``headless`` (segments below the
        first were deleted), a transaction may have begun below: ``began()`` (the writer's
        producer state: producer id to the first offset of its open transaction, even one
        with no batch left) tells; without it, a transaction of a producer without a marker
        fed counts from ``start``."""
        firsts = self.open
        if headless and began is not None:
            known = began()
            firsts = {pid: min(firsts.get(pid, first), first) for pid, first in known.items()}
            firsts.update((pid, first) for pid, first in self.open.items() if pid not in known)
        elif headless and not self.marked.issuperset(firsts):
            firsts = {pid: first if pid in self.marked else start
                      for pid, first in firsts.items()}
        return max(start, min(firsts.values())) if firsts else None


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
        if seg.base_offset >= end:
            return
        for _, header, kind in batch_markers(seg, 0, end):
            yield header, kind


def batch_markers(seg: Segment, position: int, end: int
                  ) -> Iterator[tuple[int, fmt.BatchHeader, int | None]]:
    """``(position, header, marker type)`` of the batches of ``seg`` from byte ``position``
    below offset ``end`` (:func:`segment_markers` for one segment)."""
    for at, header in iter_headers(seg, position):
        if header.base_offset >= end:
            return
        kind = None
        if header.is_control and header.producer_id >= 0:
            kind = control_type(seg.pread(at, header.size), header)
        yield at, header, kind


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

    def is_aborted(self, header: TxnBatch) -> bool:
        """True when ``header``'s batch is a transactional data batch of an aborted
        transaction (its records must never reach a ``read_committed`` reader)."""
        return self.aborted_by(header) is not None

    def aborted_by(self, header: TxnBatch) -> int | None:
        """The offset of the ABORT marker that aborts ``header``'s batch, as the ranges say
        (``None``: the batch is not aborted)."""
        if header.is_control or not header.is_transactional:
            return None
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return None
        i = bisect.bisect_right(firsts, header.last_offset) - 1
        marker = self._txns[header.producer_id][i].last_offset if i >= 0 else -1
        return marker if header.last_offset <= marker else None


def indexed_aborted(segments: Sequence[Segment], start: int, end: int) -> AbortedRanges | None:
    """The aborted transactions overlapping ``[start, end)``, from the ``.txnindex`` files of
    ``segments`` (the one holding ``start`` first, then the later ones), as Kafka collects them
    for a fetch: a segment's entries are read until one whose last stable offset is ``>= end``
    (nothing open below ``end`` ends later). ``None`` when a segment read has no usable index:
    the caller then decides by the markers it reads."""
    found: list[AbortedTxn] = []
    for seg in segments:
        entries = _indexed(seg)
        if entries is None:
            return None
        for e in entries:
            if e.last_offset >= start and e.first_offset < end:
                found.append(AbortedTxn(e.producer_id, e.first_offset, e.last_offset))
            if e.last_stable_offset >= end:
                return AbortedRanges(found)
    return AbortedRanges(found)


def rebuild_txn_indexes(segments: list[Segment], first: int, *, only_missing: bool = False
                        ) -> None:
    """Rewrite the ``.txnindex`` of ``segments[first:]`` from their ABORT markers (with
    ``only_missing``, only where there is no usable one); the entries' first and last stable
    offsets need the transactions open before, so the older segments' headers are walked
    too -- only when those segments hold an ABORT marker at all. Unchanged files stay."""
    todo = segments[first:]
    if only_missing:
        todo = [s for s in todo if _indexed(s) is None]
    if not todo:
        return
    rebuilt: list[tuple[Segment, list[TxnIndexEntry]]] = []
    if not any(kind == fmt.CONTROL_ABORT for _, kind in segment_markers(todo, _NO_END)):
        rebuilt = [(seg, []) for seg in todo]
    else:
        tracker = TxnTracker()
        for seg in segments[: segments.index(todo[-1]) + 1]:
            done = len(tracker.entries)
            for header, kind in segment_markers([seg], _NO_END):
                tracker.on_batch(header, kind)
            if seg in todo:
                rebuilt.append((seg, tracker.entries[done:]))
    for seg, entries in rebuilt:
        if _indexed(seg) != entries:
            seg.txn_index.rewrite(entries)



def _indexed(seg: Segment) -> list[TxnIndexEntry] | None:
    """``seg``'s ``.txnindex`` entries; ``None`` when it has no usable one, or its name now
    belongs to a file compaction swapped in over the segment's."""
    entries = seg.txn_index.entries(seg.size)
    if entries is None or seg.writable or seg.is_current():
        return entries
    return None


class _Held(Generic[_T]):
    __slots__ = ("first", "item", "visible")

    def __init__(self, item: _T, first: int, visible: bool | None) -> None:
        self.item, self.first, self.visible = item, first, visible


class CommittedFilter(Generic[_T]):
    """``read_committed``, batch by batch: fed the batches of one partition in offset order
    from some start offset (**control batches included**, with their marker type), it hands
    out the items of the data batches a ``read_committed`` reader sees, in offset order:

    * a non-transactional batch once every transactional batch before it is decided (nothing
      is handed out past the oldest undecided one: the last stable offset);
    * a transactional batch of producer id ``P`` once it is decided: by ``aborted`` (the
      ``.txnindex`` ranges of the read, :func:`indexed_aborted`) at once if they abort it,
      else by ``P``'s next marker -- of any type when ``aborted`` is given (the index is then
      authoritative, as for a Kafka consumer), else a marker that is not an ABORT (one emptied
      by compaction counts as a commit) makes it visible.

    :attr:`stable` is the first offset of the oldest batch still undecided (``None`` when
    everything fed is decided). Memory: the batches of open transactions are held until their
    markers arrive, as a consumer cannot hand them out earlier either.
    """

    __slots__ = ("_aborted", "_dropped", "_open", "_pending")

    def __init__(self, aborted: AbortedRanges | None = None) -> None:
        self._aborted = aborted
        self._pending: deque[_Held[_T]] = deque()
        self._open: dict[int, list[_Held[_T]]] = {}
        self._dropped: dict[int, int] = {}  # producer id -> the ABORT marker ``aborted`` names

    @property
    def open(self) -> bool:
        """Whether some transaction fed is still undecided."""
        return bool(self._open)

    @property
    def stable(self) -> int | None:
        return self._pending[0].first if self._pending else None

    def add(self, batch: TxnBatch, kind: int | None, item: _T, first: int | None = None
            ) -> list[_T]:
        """Feed one batch (``kind``: its marker type, for a control batch; ``item``: what to
        hand out for a data batch; ``first``: its first offset read, default its base) and
        return the items decided visible by it, in order."""
        pid = batch.producer_id
        if batch.is_control:
            held = self._open.pop(pid, None) if pid >= 0 else None
            self._check_marker(batch, kind, held is not None)
            visible = self._aborted is not None or kind != fmt.CONTROL_ABORT
            for entry in held or ():
                entry.visible = visible
        else:
            start = batch.base_offset if first is None else first
            marker = self._aborted.aborted_by(batch) if self._aborted is not None else None
            if not (batch.is_transactional and pid >= 0):
                self._pending.append(_Held(item, start, True))
            elif marker is not None:
                self._dropped[pid] = marker  # decided: never handed out
            else:
                entry = _Held(item, start, None)
                self._open.setdefault(pid, []).append(entry)
                self._pending.append(entry)
        out: list[_T] = []
        pending = self._pending
        while pending and pending[0].visible is not None:
            done = pending.popleft()
            if done.visible:
                out.append(done.item)
        return out

    def _check_marker(self, batch: TxnBatch, kind: int | None, held: bool) -> None:
        """The ``.txnindex`` ranges (``aborted``) against the marker that ends a transaction
        read: a transaction they abort must end with an ABORT marker at the offset they
        name, and one they do not abort must not end with an ABORT marker. Either way round
        the index is damaged (it has no checksum): its ranges would hide committed records
        or hand out aborted ones, so the read fails instead (recovery and ``embedlog
        verify`` rebuild the file from the markers). A marker emptied by compaction
        (``kind`` ``None``) says nothing."""
        named = self._dropped.pop(batch.producer_id, None)
        if self._aborted is None or kind is None:
            return
        if named is not None and (kind != fmt.CONTROL_ABORT or batch.base_offset != named):
            what = "COMMIT" if kind != fmt.CONTROL_ABORT else "ABORT"
            raise CorruptIndexError(
                f".txnindex: producer {batch.producer_id}'s transaction ends with a {what} "
                f"marker at offset {batch.base_offset}, but the index aborts it at {named}")
        if held and kind == fmt.CONTROL_ABORT:
            raise CorruptIndexError(
                f".txnindex: producer {batch.producer_id}'s transaction ends with an ABORT "
                f"marker at offset {batch.base_offset} that the index does not list")

    def feed(self, batches: Iterable[tuple[TxnBatch, int | None, _T]], end: int) -> Iterator[_T]:
        """The visible items of data batches starting below ``end``; batches from ``end`` on
        are read only for the markers of transactions still open, and reading stops as soon as
        none is (so a transaction committed by a marker past ``end`` counts as committed).
        Whatever is undecided when ``batches`` end is withheld (see :attr:`stable`)."""
        for batch, kind, item in batches:
            if batch.base_offset >= end:
                if not self._open:
                    return
                if not batch.is_control:
                    continue
            yield from self.add(batch, kind, item)
