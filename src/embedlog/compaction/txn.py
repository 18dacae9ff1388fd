"""What the cleaner must know about producers and transactions before it drops anything.

One walk over the batch headers of a partition (:func:`scan_headers`, ~61 bytes read per
batch; control batches are decoded for their marker type) yields:

* the **aborted transactions** and the **last stable offset** (the cleaner never cleans past
  it), tracked by :class:`embedlog.transactions.TxnTracker` from the markers (a segment's
  ``.txnindex`` may be missing, so they are rebuilt here), with the ``.txnindex`` entries the
  cleaned segments carry (every entry whose marker lies in the segments a cleaned one replaces);
* each producer's **last data batch** and epoch (Kafka's ``lastRecordsOfActiveProducers``): that
  batch keeps at least its header, so a producer's sequence state survives compaction.

:class:`CleanedTransactions` then replays Kafka's ``CleanedTransactionMetadata`` while the
cleaner walks batches in offset order: records of aborted transactions are dropped whatever
their keys, and a marker becomes removable once no batch of its transaction is left (it is
first given a delete horizon, then removed after it, like a tombstone).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..index.txn_index import TxnIndexEntry
from ..segment import format as fmt
from ..segment.segment import Segment
from ..transactions import AbortedTxn, TxnTracker, control_type, segment_markers

__all__ = [
    "AbortedTxn",
    "CleanedTransactions",
    "LastBatch",
    "ProducerLog",
    "control_type",
    "scan_headers",
]


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
    entries: list[TxnIndexEntry] = field(default_factory=list)
    """The ``.txnindex`` entries of every ABORT marker, in marker order."""

    def entries_in(self, start: int, stop: int) -> list[TxnIndexEntry]:
        """The entries whose marker lies in ``[start, stop)``."""
        return [e for e in self.entries if start <= e.last_offset < stop]

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


def scan_headers(segments: Sequence[Segment], end: int) -> ProducerLog:
    """Walk the headers of ``segments`` (in order) below offset ``end``."""
    out = ProducerLog()
    txns = TxnTracker()
    for h, kind in segment_markers(segments, end):
        pid = h.producer_id
        if pid < 0:
            continue
        last = out.producers.get(pid)
        if last is None or h.producer_epoch > last.epoch:
            last = LastBatch(None, h.producer_epoch)
        if h.is_control:
            out.producers[pid] = LastBatch(last.last_offset, h.producer_epoch)
        else:
            out.producers[pid] = LastBatch(h.last_offset, h.producer_epoch)
        txns.on_batch(h, kind)
    out.aborted = sorted(txns.aborted, key=lambda t: t.first_offset)
    out.last_stable_offset = txns.last_stable_offset
    out.entries = txns.entries
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
