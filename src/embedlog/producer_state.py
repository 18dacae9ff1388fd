"""Idempotent-producer state of one partition: the sequence numbers each producer id wrote.

A batch with ``producerId >= 0`` and ``baseSequence >= 0`` (not a control batch) is checked
against the state before it is appended, with Kafka's rules (``ProducerAppendInfo``):

* a producer id never seen in the partition may start at any sequence;
* a lower epoch than the one on record is fenced (:class:`~embedlog.errors.ProducerFencedError`);
* a higher epoch must start again at sequence 0;
* a COMMIT/ABORT marker (a control batch of a producer id) of a lower epoch than the one on
  record is fenced too (Kafka's ``appendEndTxnMarker``); one of a higher epoch is accepted and
  its epoch recorded, the producer's sequences forgotten: so the ABORT marker of a timed-out
  transaction, which carries the coordinator's bumped epoch, fences the old producer in the
  partition itself (its next batch has a lower epoch than the one on record);
* in the same epoch, a batch whose first and last sequence equal one of the producer's last
  :data:`RETAINED_BATCHES` batches is a **duplicate**: the stored header is returned and nothing
  is written; any other batch must start at the last sequence + 1 (wrapping from ``2**31 - 1``
  to 0), else :class:`~embedlog.errors.OutOfOrderSequenceError`.

The table also follows each producer's open transaction (:class:`~embedlog.transactions.
TxnTracker`, Kafka's ``ongoingTxns``), so that an ABORT marker about to be appended gets its
``.txnindex`` entry (:meth:`ProducerStateTable.abort_entry`).

The state lives in memory, and in Kafka's producer snapshots (``<offset>.snapshot``,
:mod:`embedlog.producer_snapshot`; written at each roll and at close by
:mod:`embedlog.producer_state_store`). The first time it is needed after an open it is loaded
from the newest usable snapshot and brought up to date from the batch headers at and after the
snapshot's offset (:meth:`ProducerStateTable.replay`; only markers are decoded); without one it
is rebuilt from every batch header of the partition (:meth:`ProducerStateTable.scan`). Either
way deduplication survives a reopen -- with one difference from a table that saw the batches:
a snapshot keeps only each producer's **last** batch (Kafka's format), so after a load from a
snapshot only a retry of that batch is recognised as a duplicate (as in Kafka after a restart);
a retry of an earlier one of the last :data:`RETAINED_BATCHES` is refused as out of order. A
header rebuilt from a snapshot carries the batch's offsets, sequences, producer id and epoch
and its max timestamp (the snapshot's timestamp), nothing else.

Segments deleted by retention do not take their producers with them while the log is open,
nor across a reopen that loads a snapshot (Kafka keeps them too, until they expire); only a
full scan, without a usable snapshot, no longer sees them: such a producer is then treated as
new, exactly as when Kafka expires a producer id.

**Expiration** (Kafka's ``producer.id.expiration.ms``, default one day): a producer with no
open transaction that wrote nothing to the partition for that long is dropped from the table
(:meth:`ProducerStateTable.expire`, run by the partition before it checks a batch, at most once
per :data:`EXPIRATION_CHECK_MS`); its next batch is checked as a new producer's. A producer's
last write is the clock at its last append, or, in a table rebuilt from the log, its last
batch's max timestamp (as Kafka's producer snapshots keep it), or a snapshot's timestamp.

**Producer ids** are allocated from a counter in the log folder, ``embedlog.producer-ids``
(:data:`embedlog.naming.PRODUCER_IDS_FILE`, format :data:`embedlog.checkpoint.PRODUCER_IDS`),
replaced atomically and made durable before the id is used. Layout::

    embedlog-producer-ids 1
    <the next free producer id>

Without the file (a new log, or a Kafka folder) ids start above the largest one the log holds.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from . import checkpoint
from .errors import CorruptCheckpointError, OutOfOrderSequenceError, ProducerFencedError
from .index.txn_index import TxnIndexEntry
from .naming import PRODUCER_IDS_FILE
from .producer_snapshot import SnapshotEntry
from .segment import format as fmt
from .transactions import TxnTracker, marker_type

__all__ = [
    "EXPIRATION_CHECK_MS",
    "PRODUCER_ID_EXPIRATION_MS",
    "RETAINED_BATCHES",
    "ProducerEntry",
    "ProducerStamp",
    "ProducerStateTable",
    "allocate_producer_id",
    "next_sequence",
]

RETAINED_BATCHES: Final = 5
"""Batches remembered per producer for duplicate detection (Kafka's
``NUM_BATCHES_TO_RETAIN``)."""
PRODUCER_ID_EXPIRATION_MS: Final = 24 * 3600 * 1000
"""Kafka's default ``producer.id.expiration.ms`` (1 day)."""
EXPIRATION_CHECK_MS: Final = 10 * 60 * 1000
"""How often (at most) a table looks for expired producers: Kafka's default
``producer.id.expiration.check.interval.ms`` (10 minutes)."""

_INT32_MAX: Final = 2**31 - 1
_ids_lock = threading.Lock()


class _BatchSource(Protocol):
    @property
    def base_offset(self) -> int: ...

    def find_position(self, offset: int) -> int | None: ...

    def batches(self, position: int = 0, end: int | None = None, *, verify: bool = True
                ) -> Iterable[tuple[bytes, int, fmt.BatchHeader]]: ...


def next_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past ``2**31 - 1`` to 0 (Kafka's
    ``DefaultRecordBatch.incrementSequence``)."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def _last_sequence(header: fmt.BatchHeader) -> int:
    return next_sequence(header.base_sequence, header.last_offset_delta)


def _first_sequence(last: int, delta: int) -> int:
    """``last - delta`` wrapping below 0 to ``2**31 - 1`` (Kafka's ``decrementSequence``)."""
    return last - delta if last >= delta else _INT32_MAX - (delta - last) + 1


@dataclass(slots=True)
class ProducerEntry:
    """What one producer id last wrote in a partition, and when (``last_ms``: the clock at
    its last append, or its last batch's max timestamp when rebuilt from the log)."""

    epoch: int
    last_sequence: int
    batches: deque[fmt.BatchHeader] = field(
        default_factory=lambda: deque(maxlen=RETAINED_BATCHES)
    )
    last_ms: int = -1
    coordinator_epoch: int = -1
    """As a snapshot recorded it (-1: none); embedlog keeps it, it does not check it."""


class ProducerStateTable:
    """Producer id -> :class:`ProducerEntry` for one partition (the caller serialises access).

    ``expiration_ms`` is Kafka's ``producer.id.expiration.ms``: :meth:`expire` drops a producer
    with no open transaction whose last write is that old, so that its next batch is checked as
    a new producer's (any sequence), as Kafka does.
    """

    def __init__(self, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.txns = TxnTracker(keep=False)
        self.expiration_ms = expiration_ms
        self._max_pid = -1
        self._next_check: int | None = None

    @classmethod
    def scan(cls, segments: Iterable[_BatchSource],
             expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> ProducerStateTable:
        """The state rebuilt from every batch header of ``segments`` (oldest first)."""
        table = cls(expiration_ms)
        table.replay(list(segments), 0)
        return table

    def replay(self, segments: Sequence[_BatchSource], start: int) -> None:
        """Bring the table up to date with the batches of ``segments`` (oldest first) whose
        base offset is >= ``start``: the segments wholly below it are skipped, the one holding
        it is read from the offset index's position (:meth:`Segment.find_position
        <embedlog.segment.segment.Segment.find_position>`)."""
        for i, seg in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue
            position: int | None = 0
            if seg.base_offset < start:
                position = seg.find_position(start)
            if position is None:
                continue
            for buf, p, header in seg.batches(position, verify=False):
                if header.producer_id >= 0 and header.base_offset >= start:
                    self.update(header, buf, p)

    @classmethod
    def from_snapshot(cls, entries: Iterable[SnapshotEntry],
                      expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> ProducerStateTable:
        """The table a snapshot's ``entries`` describe: each producer with its epoch, last
        sequence, last write, its last batch (a header rebuilt from the entry) and its open
        transaction (so an ABORT marker still gets its ``.txnindex`` entry right). Expired
        producers are dropped by :meth:`expire`, as in any table."""
        table = cls(expiration_ms)
        for e in entries:
            table._max_pid = max(table._max_pid, e.producer_id)
            entry = table.entries[e.producer_id] = ProducerEntry(
                e.producer_epoch, e.last_sequence, last_ms=e.timestamp,
                coordinator_epoch=e.coordinator_epoch)
            if e.last_offset >= 0 and e.last_sequence >= 0:
                entry.batches.append(_snapshot_header(e))
            if e.current_txn_first_offset >= 0:
                table.txns.open[e.producer_id] = e.current_txn_first_offset
        return table

    def snapshot_entries(self) -> list[SnapshotEntry]:
        """The table as a snapshot's entries (by producer id): each producer's last batch, its
        open transaction's first offset."""
        out = []
        for pid in sorted(self.entries):
            e = self.entries[pid]
            last = e.batches[-1] if e.batches else None
            out.append(SnapshotEntry(
                pid, e.epoch, e.last_sequence, -1 if last is None else last.last_offset,
                0 if last is None else last.last_offset_delta, e.last_ms, e.coordinator_epoch,
                self.txns.open.get(pid, -1)))
        return out

    @property
    def max_producer_id(self) -> int:
        """The largest producer id seen (expired ones included), or -1."""
        return self._max_pid

    def expire(self, now: int) -> list[int]:
        """Drop the producers idle for ``expiration_ms`` at ``now`` (none with an open
        transaction); looks at most once per :data:`EXPIRATION_CHECK_MS` (or per
        ``expiration_ms``, if shorter). Returns the producer ids dropped."""
        if self._next_check is not None and now < self._next_check:
            return []
        self._next_check = now + min(EXPIRATION_CHECK_MS, self.expiration_ms)
        doomed = [pid for pid, e in self.entries.items()
                  if pid not in self.txns.open and now - e.last_ms >= self.expiration_ms]
        for pid in doomed:
            del self.entries[pid]
        return doomed

    def check(self, header: fmt.BatchHeader) -> fmt.BatchHeader | None:
        """Validate a batch about to be appended: ``None`` to write it, the stored header if it
        is a duplicate; raises when its epoch or sequence is wrong."""
        if header.base_sequence < 0 and not header.is_control:
            return None
        entry = self.entries.get(header.producer_id)
        if entry is None:
            return None
        pid, epoch = header.producer_id, header.producer_epoch
        if epoch < entry.epoch:
            raise ProducerFencedError(
                f"producer {pid} epoch {epoch} is fenced: epoch {entry.epoch} already wrote here"
            )
        if header.is_control:
            return None  # a marker: recorded by update (a higher epoch replaces the entry)
        if epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} must start at sequence 0, "
                    f"not {header.base_sequence}"
                )
            return None
        last = _last_sequence(header)
        for stored in entry.batches:
            if stored.base_sequence == header.base_sequence and _last_sequence(stored) == last:
                return stored
        expected = next_sequence(entry.last_sequence, 1)
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: batch starts at sequence {header.base_sequence}, "
                f"expected {expected} (last written {entry.last_sequence})"
            )
        return None

    def abort_entry(self, header: fmt.BatchHeader, raw: bytes | bytearray | memoryview
                    ) -> TxnIndexEntry | None:
        """The ``.txnindex`` entry of the batch ``raw`` about to be appended, if it is an ABORT
        marker of a producer id (nothing is recorded: :meth:`update` does, once appended)."""
        if not header.is_control or header.producer_id < 0:
            return None
        if _marker_kind(header, raw, 0) != fmt.CONTROL_ABORT:
            return None
        others = {p: o for p, o in self.txns.open.items() if p != header.producer_id}
        return TxnIndexEntry(
            header.producer_id, self.txns.open.get(header.producer_id, header.base_offset),
            header.last_offset, min(others.values(), default=header.last_offset + 1))

    def update(self, header: fmt.BatchHeader, raw: bytes | bytearray | memoryview = b"",
               position: int = 0, now: int | None = None) -> None:
        """Record a batch that was appended at ``now`` (``None``: found in the log, as of its
        max timestamp); ``raw[position:]`` holds it (read for the type of a marker)."""
        if header.is_control:
            self.txns.on_marker(header, _marker_kind(header, raw, position))
        else:
            self.txns.on_data(header)
        pid = header.producer_id
        self._max_pid = max(self._max_pid, pid)
        entry = self.entries.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.entries[pid] = ProducerEntry(header.producer_epoch, -1)
        elif header.producer_epoch < entry.epoch:
            return
        entry.last_ms = max(entry.last_ms, header.max_timestamp if now is None else now)
        if header.is_control or header.base_sequence < 0:
            return
        entry.last_sequence = _last_sequence(header)
        entry.batches.append(header)


def _snapshot_header(e: SnapshotEntry) -> fmt.BatchHeader:
    """The last batch of a snapshot entry, as far as the entry tells it."""
    return fmt.BatchHeader(
        base_offset=e.last_offset - e.offset_delta, batch_length=0, leader_epoch=-1, magic=2,
        crc=0, attributes=0, last_offset_delta=e.offset_delta, base_timestamp=e.timestamp,
        max_timestamp=e.timestamp, producer_id=e.producer_id, producer_epoch=e.producer_epoch,
        base_sequence=_first_sequence(e.last_sequence, e.offset_delta),
        records_count=e.offset_delta + 1)


def _marker_kind(header: fmt.BatchHeader, raw: bytes | bytearray | memoryview, position: int
                 ) -> int | None:
    if not header.records_count or len(raw) < position + header.size:
        return None
    return marker_type(fmt.decode_records(raw, position, header))


@dataclass(slots=True)
class ProducerStamp:
    """What an idempotent producer writes into the headers of its batches to one partition:
    its id and epoch, and ``sequence``, the next batch's base sequence (advanced by
    :meth:`advance` as batches are appended); ``transactional`` sets the batches'
    transactional bit."""

    producer_id: int
    epoch: int
    sequence: int = 0
    transactional: bool = False

    def advance(self, records: int) -> None:
        self.sequence = next_sequence(self.sequence, records)


def allocate_producer_id(directory: str, max_in_log: Callable[[], int]) -> int:
    """The next free producer id of the log in ``directory``, made durable before it is
    returned. ``max_in_log`` gives the largest id the log's batches hold (-1 if none); it is
    called only when the counter file is missing."""
    path = os.path.join(directory, PRODUCER_IDS_FILE)
    with _ids_lock:
        rows = checkpoint.PRODUCER_IDS.read(path)
        if rows is None:
            next_id = max_in_log() + 1
        elif len(rows) != 1:
            raise CorruptCheckpointError("malformed producer id counter: one id expected",
                                         path=path)
        else:
            next_id = int(rows[0][0])
        checkpoint.PRODUCER_IDS.write(path, [(next_id + 1,)])
    return next_id
