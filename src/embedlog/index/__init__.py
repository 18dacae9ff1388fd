"""Kafka-compatible index files of a segment: ``.index`` (offset -> log position) and
``.timeindex`` (timestamp -> offset). Both are sparse, fixed-width, big-endian, unchecksummed
caches that can always be rebuilt from the ``.log``; see :mod:`embedlog.index.base`. The
``.txnindex`` entry codec (aborted transactions) is :mod:`embedlog.index.txn_index`."""

from .offset_index import OffsetIndex
from .time_index import TimeIndex

__all__ = ["OffsetIndex", "TimeIndex"]
