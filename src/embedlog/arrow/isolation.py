"""``read_committed`` over a run of batches: what a Kafka consumer below the last stable
offset sees.

Input: the batches (:class:`~embedlog.RecordBatch`) of one partition in offset order,
**control batches included** (``read_batches(..., control=True)``), read from some start
offset up to the log end. Output: the data batches whose records a ``read_committed`` reader
may see, each cut below ``end``:

* a non-transactional batch is visible once every transactional batch before it is decided
  (Kafka hands out nothing above the first open transaction: the last stable offset);
* a transactional batch of producer id ``P`` waits for ``P``'s next COMMIT or ABORT marker and
  is then handed out or dropped;
* batches from ``end`` on are read only for the markers of transactions open below ``end``,
  and reading stops as soon as none is open (so a committed transaction whose marker lies after
  ``end`` still counts as committed);
* what is still undecided at the log end is withheld.

The rules for odd cases are :mod:`embedlog.transactions`' (Kafka's): batches without a producer
id take no part in transactions, any control batch of a producer id ends its open transaction,
and one emptied by compaction ends it as a commit. That module's ``TxnTracker`` answers for a
whole range at once; this filter decides batch by batch, so an export streams.

Memory: the batches of transactions still open are held until their markers arrive (a long
transaction is buffered whole), as a consumer cannot hand them out earlier either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np

from ..records import RecordBatch
from ..segment import format as fmt

__all__ = ["committed_batches", "cut_below"]


class _Entry:
    __slots__ = ("batch", "visible")

    def __init__(self, batch: RecordBatch, visible: bool | None) -> None:
        self.batch, self.visible = batch, visible


def committed_batches(batches: Iterable[RecordBatch], end: int) -> Iterator[RecordBatch]:
    """The batches a ``read_committed`` reader sees below ``end`` (see the module notes)."""
    pending: deque[_Entry] = deque()
    open_txns: dict[int, list[_Entry]] = {}
    for batch in batches:
        if batch.base_offset >= end and not open_txns:
            break
        if batch.is_control:
            if batch.producer_id in open_txns:
                kind = fmt.decode_control_record(batch.key(0))[1] if len(batch) else None
                for entry in open_txns.pop(batch.producer_id):
                    entry.visible = kind != fmt.CONTROL_ABORT
        elif batch.base_offset < end:
            transactional = batch.is_transactional and batch.producer_id >= 0
            entry = _Entry(cut_below(batch, end), None if transactional else True)
            if transactional:
                open_txns.setdefault(batch.producer_id, []).append(entry)
            pending.append(entry)
        while pending and pending[0].visible is not None:
            done = pending.popleft()
            if done.visible and len(done.batch):
                yield done.batch


def cut_below(records: RecordBatch, end: int) -> RecordBatch:
    """``records`` restricted to offsets below ``end`` (a view; offsets ascend)."""
    n = len(records)
    if n == 0 or int(records.offsets[-1]) < end:
        return records
    return records.slice(0, int(np.searchsorted(records.offsets, end)))
