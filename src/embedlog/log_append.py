"""``Log.append``'s write: one record, through the partition's open batch when it must be durable.

Without an fsync per append (``durability="none"``) a record is written at once as a batch
of its own (:func:`~embedlog.batch_writer.write_records`): it is readable
when ``append`` returns.

In ``fsync`` mode ``append`` takes the producer's path (:mod:`embedlog.producer`): the record
joins the partition's open batch (an :class:`~embedlog.batch_writer.OpenBatch`, one per
partition, owned by the :class:`Appender` of the log) and its writer waits in the partition's
group commit (:meth:`Partition.sync_through <embedlog.partition.Partition.sync_through>`):
while one fsync runs the records of every other writer gather in the batch, and the next
leader writes them all with one write and one fsync. A writer returns once a round covered
its record, readable and on disk.

**Each writer's own error.** A batch that fails to be written fails every record in it: each
opening of a batch has a :class:`~embedlog.batch_writer.Ticket`, taken by its writers with
their records (under the batch's lock) and given the outcome of the write before any later
batch of the partition can be written (the write holds the partition lock); a write cut short
by an interrupt gives it a :class:`~embedlog.errors.StorageError` (:meth:`OpenBatch.write
<embedlog.batch_writer.OpenBatch.write>`). A writer whose ticket has an error raises it, and
one whose ticket was not written fails, even when a later batch took the same offsets and a
round covered them (:meth:`OpenBatch.sync_through
<embedlog.batch_writer.OpenBatch.sync_through>`). A durable producer's senders do the same;
without ``fsync`` a producer keeps a batch's error for its next call (its records were
acknowledged one by one at ``send``).

Records the open batch does not take go the first way, each its own batch followed by an
fsync of its own: a keyless record for a compacted topic (refused there with its own error),
and a record larger than the batch's estimate allows (checked exactly there).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _io
from .batch_writer import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_BATCH_SIZE,
    RECORD_OVERHEAD,
    OpenBatch,
    choose_codec,
    headers_size,
    write_records,
)
from .errors import LogClosedError
from .partition import Partition
from .records import Header, RecordMetadata

__all__ = ["Appender"]

_new = tuple.__new__


def _noop(batch: OpenBatch, *args: object) -> None:
    """``on_open`` and ``on_close``: nothing to do (every writer waits for a round and learns
    its batch's outcome from its ticket; no linger)."""


class Appender:
    """``Log.append``'s writes for one log (see the module notes); thread-safe."""

    def __init__(self) -> None:
        self._batches: dict[Partition, OpenBatch] = {}

    def append(self, p: Partition, value: bytes | None, key: bytes | None,
               headers: list[Header] | None, timestamp: int) -> RecordMetadata:
        """Write one checked record to ``p``; durable on return when ``p`` fsyncs appends."""
        if p.fsync_appends and _io.SAFETY.fsync_before_ack:
            meta = self._join(p, value, key, headers, timestamp)
            if meta is not None:
                return meta
        header, = write_records(p, [value], [key], [headers] if headers else None, timestamp,
                                codec=choose_codec(p.config, None))
        return _new(RecordMetadata, (p.topic, p.partition, header.base_offset,  # type: ignore[no-any-return]
                                     header.max_timestamp if header.timestamp_type == 1
                                     else timestamp))

    def _join(self, p: Partition, value: bytes | None, key: bytes | None,
              headers: Sequence[Header] | None, timestamp: int) -> RecordMetadata | None:
        """Add the record to ``p``'s open batch and wait for the round that writes it; None,
        with nothing added, for a record the batch does not take (see the module notes)."""
        size = RECORD_OVERHEAD + (0 if value is None else len(value)) + (
            0 if key is None else len(key)) + (headers_size(headers) if headers else 0)
        batch = self._batch(p)
        while True:
            with batch.lock:  # (not acquire/try: an interrupt could land between the two)
                if batch.open:
                    if size > batch.max_record or (key is None and batch.compact):
                        return None  # (written alone: checked exactly, or refused alone)
                    n = len(batch.values)
                    batch.values.append(value)
                    batch.keys.append(key)
                    batch.timestamps.append(timestamp)
                    if headers or batch.headers is not None:
                        batch.add_headers(n, headers or None)
                    batch.size += size
                    offset, ticket = batch.base + n, batch.ticket
                    full = batch.size >= batch.limit or n >= batch.last
                    stamp = batch.append_time if batch.log_append else timestamp
                    break
            if not batch.reserve():  # the log was closed, or the topic deleted
                p.check_writable()
                raise LogClosedError(f"{p.topic}-{p.partition} is closed")
        if full:
            batch.settle()
        batch.sync_through(offset, ticket)
        return _new(RecordMetadata, (p.topic, p.partition, offset, stamp))  # type: ignore[no-any-return]

    def _batch(self, p: Partition) -> OpenBatch:
        batch = self._batches.get(p)
        if batch is None:
            for gone in [q for q in list(self._batches) if not q.segments]:  # closed ones
                self._batches.pop(gone, None)
            batch = self._batches.setdefault(p, OpenBatch(
                p, batch_size=DEFAULT_BATCH_SIZE, max_batch_records=DEFAULT_BATCH_RECORDS,
                compression=None, stamp=None, on_open=_noop, on_close=_noop, waited=True))
        return batch
