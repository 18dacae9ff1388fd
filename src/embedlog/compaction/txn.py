"""What the cleaner must know about producers and transactions before it drops anything.

One walk over the batch headers of a partition (:func:`scan_headers`, ~61 bytes read per
batch; control batches are decoded for their marker type) yields:

* the **aborted transactions**: producer id, first offset, offset of the ABORT marker (what
  Kafka's ``.txnindex`` records; embedlog has no such file, so it is rebuilt here);
* the **last stable offset**: the first offset of the oldest transaction that has no marker
  yet; the cleaner never cleans past it;
* each producer's **last data batch** and epoch (Kafka's ``lastRecordsOfActiveProducers``): that
  batch keeps at least its header, so a producer's sequence state survives compaction.

:class:`CleanedTransactions` then replays Kafka's ``CleanedTransactionMetadata`` while the
cleaner walks batches in offset order: records of aborted transactions are dropped whatever
their keys, and a marker becomes removable once no batch of its transaction is left (it is
first given a delete horizon, then removed after it, like a tombstone).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..segment import format as fmt
from ..segment.segment import Segment

__all__ = [
    "AbortedTxn",
    "CleanedTransactions",
    "LastBatch",
    "ProducerLog",
    "control_type",
    "iter_headers",
    "scan_headers",
]


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class LastBatch:
    """A producer's last data batch (``None``: its last write was a marker of a new epoch)."""

    last_offset: int | None
    epoch: int


@dataclass(slots=True)
class ProducerLog:
    """Result of :func:`scan_headers`."""

    aborted: list[AbortedTxn] = field(default_factory=list)
    last_stable_offset: int | None = None
    producers: dict[int, LastBatch] = field(default_factory=dict)

    def keeps_header(self, header: fmt.BatchHeader) -> bool:
        """Kafka's ``isBatchLastRecordOfProducer``: the batch must stay, at least empty."""
        if header.producer_id < 0:
            return False
        last = self.producers.get(header.producer_id)
        if last is None:
            return False
        if last.last_offset is not None:
            return header.last_offset == last.last_offset
        return header.is_control and header.producer_epoch == last.epoch


def iter_headers(seg: Segment, position: int = 0) -> Iterator[tuple[int, fmt.BatchHeader]]:
    """``(position, header)`` of each complete batch of ``seg`` from ``position``, reading only
    headers (the CRC is not checked; the cleaner's main read does)."""
    size = seg.size
    while position + fmt.HEADER_SIZE <= size:
        header = fmt.parse_header(seg.pread(position, fmt.HEADER_SIZE), 0)
        if position + header.size > size:
            return
        yield position, header
        position += header.size


def control_type(raw: bytes | memoryview, header: fmt.BatchHeader) -> int | None:
    """The marker type of the control batch ``raw`` (0 ABORT, 1 COMMIT, ...), None if it is
    empty."""
    if not header.records_count:
        return None
    records = fmt.decode_records(raw, 0, header)
    return fmt.decode_control_record(records.key(0))[1]


def scan_headers(segments: Sequence[Segment], end: int) -> ProducerLog:
    """Walk the headers of ``segments`` (in order) below offset ``end``."""
    out = ProducerLog()
    open_txns: dict[int, int] = {}
    for seg in segments:
        for position, h in iter_headers(seg):
            if h.base_offset >= end:
                break
            pid = h.producer_id
            if pid < 0:
                continue
            last = out.producers.get(pid)
            if last is None or h.producer_epoch > last.epoch:
                last = LastBatch(None, h.producer_epoch)
            if h.is_control:
                out.producers[pid] = LastBatch(last.last_offset, h.producer_epoch)
                kind = control_type(seg.pread(position, h.size), h)
                first = open_txns.pop(pid, None)
                if kind == fmt.CONTROL_ABORT:
                    begin = h.base_offset if first is None else first
                    out.aborted.append(AbortedTxn(pid, begin, h.last_offset))
            else:
                out.producers[pid] = LastBatch(h.last_offset, h.producer_epoch)
                if h.is_transactional:
                    open_txns.setdefault(pid, h.base_offset)
    out.aborted.sort(key=lambda t: t.first_offset)
    if open_txns:
        out.last_stable_offset = min(open_txns.values())
    return out


@dataclass(slots=True)
class _Aborted:
    txn: AbortedTxn
    last_seen: int | None = None


class CleanedTransactions:
    """Kafka's ``CleanedTransactionMetadata``: fed every batch of a pass in offset order."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = list(aborted)
        self._firsts = [t.first_offset for t in self._aborted]
        self._next = 0
        self._ongoing_aborted: dict[int, _Aborted] = {}
        self._ongoing_committed: set[int] = set()

    def _reach(self, offset: int) -> None:
        stop = bisect.bisect_right(self._firsts, offset)
        for t in self._aborted[self._next : stop]:
            self._ongoing_aborted.setdefault(t.producer_id, _Aborted(t))
        self._next = max(self._next, stop)

    def on_data_batch(self, header: fmt.BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction (drop its records)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(header.producer_id)
        if aborted is not None:
            aborted.last_seen = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: fmt.BatchHeader, kind: int | None) -> bool:
        """True when the marker may go (no batch of its transaction is left)."""
        self._reach(header.last_offset)
        if kind is None:
            return True  # an empty control batch was already cleaned
        pid = header.producer_id
        if kind == fmt.CONTROL_ABORT:
            aborted = self._ongoing_aborted.pop(pid, None)
            return aborted is None or aborted.last_seen is None
        if kind == fmt.CONTROL_COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False
