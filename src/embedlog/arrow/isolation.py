"""``read_committed`` over a run of :class:`~embedlog.RecordBatch` es: what a Kafka consumer
below the last stable offset sees.

Input: the batches of one partition in offset order, **control batches included**
(``read_batches(..., control=True)``), read from some start offset up to the log end. Output:
the data batches whose records a ``read_committed`` reader may see, each cut below ``end``.
The rules, and the reading past ``end`` for the markers of transactions still open there, are
:class:`embedlog.transactions.CommittedFilter`'s (the one filter the consumer, this reader and
the Spark source share); this module only adapts record batches to it, so an export streams.
What is still undecided at the log end is withheld (``CommittedFilter.stable`` tells where).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from ..records import RecordBatch
from ..segment import format as fmt
from ..transactions import CommittedFilter

__all__ = ["committed_batches", "cut_below"]


def committed_batches(batches: Iterable[RecordBatch], end: int,
                      committed: CommittedFilter[RecordBatch] | None = None
                      ) -> Iterator[RecordBatch]:
    """The batches a ``read_committed`` reader sees below ``end`` (see the module notes);
    ``committed``: the filter to use (its :attr:`~CommittedFilter.stable` tells the caller
    afterwards where undecided records begin)."""
    flt = CommittedFilter[RecordBatch]() if committed is None else committed
    for batch in flt.feed(((b, _kind(b), cut_below(b, end)) for b in batches), end):
        if len(batch):
            yield batch


def _kind(batch: RecordBatch) -> int | None:
    if not batch.is_control or not len(batch):
        return None
    return fmt.decode_control_record(batch.key(0))[1]


def cut_below(records: RecordBatch, end: int) -> RecordBatch:
    """``records`` restricted to offsets below ``end`` (a view; offsets ascend)."""
    n = len(records)
    if n == 0 or int(records.offsets[-1]) < end:
        return records
    return records.slice(0, int(np.searchsorted(records.offsets, end)))
