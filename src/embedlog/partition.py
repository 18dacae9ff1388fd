"""A partition: an ordered run of segments in ``<topic>-<partition>/``.

A partition appends, reads, rolls and applies retention. Opening its folder (recovery, swaps,
the manifest check) is :mod:`embedlog.loader`'s, encoding :mod:`embedlog.batch_writer`'s, group
commit :mod:`embedlog.group_commit`'s, the read side (range capture, a view's refresh and
rescans) :mod:`embedlog.partition_read`'s, retention's choice :mod:`embedlog.retention`'s.

Invariants:

* segment base offsets strictly increase; every offset in a segment is below the next segment's
  base; only the last segment (the *active* one) is ever appended to;
* ``start_offset`` (the log start) is >= the first segment's base (a tiered partition's: the
  remote's first, ``tier``) and only moves forward; it is persisted before the segments below
  it are unlinked (``log-start-offset-checkpoint``), so a crash can never leave a hole;
* ``embedlog.segments`` (:mod:`embedlog.manifest`) lists the byte size of every sealed segment
  and is rewritten whenever that set changes;
* at most one :class:`TailBatch` holds a reservation of the tail; anything else that appends,
  flushes or closes writes it first, so offsets handed out are never given to anyone else;
* in ``fsync`` durability an append returns only after the data is on disk; concurrent appenders
  share one fsync (group commit); after :meth:`Partition.close` every write is refused.

**The tail contract** (all that writers use): :meth:`Partition.reserve` the tail for a batch,
:meth:`Partition.settle` (write) what was reserved, :meth:`Partition.append_encoded` a batch,
:meth:`Partition.sync_through` an offset (group commit), :meth:`Partition.sync` everything.

Lock order: ``lock`` (the partition's, re-entrant) -> a tail batch's lock -> ``sync_lock``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import _io, loader, partition_read, producer_state_store, view_loader
from .config import TopicConfig
from .errors import (
    CorruptionError,
    EmbedlogError,
    LogClosedError,
    LogPoisonedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    poisoning,
)
from .group_commit import GroupCommit
from .manifest import write_manifest
from .producer_state import PRODUCER_ID_EXPIRATION_MS, ProducerStateTable
from .records import Record
from .retention import check_deletable, expired
from .segment import format as fmt
from .segment.rules import end_offset_of
from .segment.segment import Segment, SegmentSettings
from .stable_offset import StableOffset
from .tail_batch import TailBatch
from .transactions import AbortedRanges, indexed_aborted

__all__ = ["Partition", "SegmentInfo", "TailBatch", "now_ms"]


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as seen by planners (Spark splits, retention reports)."""

    base_offset: int
    size: int
    path: str


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Partition:
    """One partition's segments, with the writer's append path when ``writable``."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        writable: bool,
        fsync: bool = False,
        clock: Callable[[], int] = now_ms,
        on_start_offset: Callable[[Partition], None] | None = None,
        on_roll: Callable[[Partition], None] | None = None,
        start_offset_source: Callable[[Partition], int | None] | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.writable = writable
        self.fsync_appends = fsync
        self.clock = clock
        self._on_start_offset = on_start_offset
        self._on_roll = on_roll
        self._start_offset_source = start_offset_source  # views: the writer's log start
        self.settings = SegmentSettings(
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            max_batch_bytes=max(config.max_message_bytes, 64 * 1024 * 1024),
        )
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.start_offset = 0
        self.stable = StableOffset()  # the last stable offset, read incrementally (under lock)
        self.lock = threading.RLock()
        self._commit = GroupCommit(self._flush_active, self._write_round)
        self.poisoned: BaseException | None = None
        self.refusal: Callable[[], EmbedlogError] | None = None  # refused: quarantine, fork
        self.damage: CorruptionError | None = None
        self.appended = threading.Condition(self.lock)
        self._reserved: TailBatch | None = None
        self._waited = False  # a waited reservation is being written (TailBatch)
        self.producer_state: ProducerStateTable | None = None
        self.producer_id_expiration_ms = PRODUCER_ID_EXPIRATION_MS  # set by its topic table
        self._manifest_seen: tuple[int, int, int] | None = None
        self.tier: partition_read.RemoteSegments | None = None  # tiered: embedlog.tiering

    # ------------------------------------------------------------------ loading

    def load(self, *, recovery_point: int | None, start_offset: int, clean: bool,
             start_from: tuple[str, int] | None = None) -> None:
        """Open the segments (:mod:`embedlog.loader`): as the writer, finish interrupted swaps,
        validate everything after the recovery point when the last close was not clean, and
        cut a torn tail; read-only, open what is there."""
        if self.writable:
            segs, self.damage = loader.recover_or_quarantine(
                self.directory, self.settings, recovery_point=recovery_point,
                start_offset=start_offset, clean=clean, start_from=start_from)
            if self.damage is not None:
                self.refusal = functools.partial(loader.quarantine_error, self, self.damage)
        else:
            segs, self._manifest_seen = view_loader.open_view(self.directory, self.settings)
        self.segments, self._bases = segs, [s.base_offset for s in segs]
        low = partition_read.local_floor(self) if segs else start_offset
        self.start_offset = max(start_offset, low)
        if self.writable and self.damage is None:
            if not segs:
                self._add_segment(self.start_offset)
            producer_state_store.prune(self.directory, producer_state_store.snapshot_floor(self),
                                       self.end_offset)
            self._commit.durable_end = self.end_offset  # recovery ended with a synced tail

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next appended record will get."""
        segs, start = self.segments, self.start_offset  # end_offset_of's common case inlined
        end = start if not segs else segs[-1].next_offset if segs[-1].size else end_offset_of(segs)
        return end if end > start else start

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_infos(self) -> list[SegmentInfo]:
        with self.lock:
            return [SegmentInfo(s.base_offset, s.size, s.log_path) for s in self.segments]

    def refresh(self) -> None:
        """Read-only view: pick up the writer's changes (:func:`.partition_read.refresh_view`)."""
        partition_read.refresh_view(self)

    def persisted_start(self) -> int | None:
        """Read-only view: the writer's persisted log start offset, when it is known."""
        source = self._start_offset_source
        return None if source is None else source(self)

    @contextlib.contextmanager
    def poison_on_error(self) -> Iterator[None]:
        """Run a mutation: an error inside it but embedlog's own refusals (raised before any
        change) poisons the partition (appends refused until the log is reopened and
        recovered): see :func:`~embedlog.errors.poisoning`."""
        try:
            yield
        except BaseException as exc:
            self._poison(exc)
            raise

    def _poison(self, exc: BaseException) -> None:
        if self.poisoned is None:
            self.poisoned = poisoning(exc, f"{self.topic}-{self.partition}")

    def check_writable(self) -> None:
        if self.refusal is not None:
            raise self.refusal()
        if self.poisoned is not None:
            raise LogPoisonedError(
                f"an earlier failed write ({self.poisoned}) left {self.directory} in an unknown "
                "state; close and reopen the log to recover it"
            )

    # ------------------------------------------------------------------ the tail contract

    def reserve(self, batch: TailBatch) -> bool:
        """Reserve the tail for ``batch``: any other reservation is written first, then
        ``batch.open_at(end offset)`` runs and ``batch`` holds the tail until it is settled.
        Already holding it is fine. Returns False (nothing reserved) when the partition is
        closed; raises when it is poisoned."""
        with self.lock:
            if self._reserved is batch:
                return True
            self.settle()
            if not self.segments:
                return False
            self.check_writable()
            self._reserved = batch  # (first: an interrupt in open_at must not leave an open
            try:  # batch unreserved, its records written by no round)
                batch.open_at(self.end_offset)
            except BaseException:
                if not batch.open:
                    self._reserved = None
                raise
            return True

    def settle(self, batch: TailBatch | None = None) -> None:
        """Write the reserved batch (only if it is ``batch``, when given) and release the tail."""
        with self.lock:
            reserved = self._reserved
            if reserved is not None and (batch is None or reserved is batch):
                self._reserved = None
                self._waited = reserved.waited
                try:
                    reserved.write()
                except BaseException:  # cut short before it took its records: still reserved
                    if reserved.open and self._reserved is None:
                        self._reserved = reserved
                    raise
                finally:
                    self._waited = False

    def append_encoded(self, batch: bytearray) -> fmt.BatchHeader:
        """Append one encoded v2 batch (base offset 0, CRC valid); assign its offsets in place.

        A reserved batch is written first. An idempotent producer's batch is checked against
        the producer state (a duplicate returns the stored header and writes nothing). Returns
        the batch header as stored. Durable on return in fsync mode (but for a waited
        reservation's write, :class:`TailBatch`).
        """
        self._check_batch_size(batch)
        with self.lock:
            header, seq = self._append_locked(batch)
            sync = self.fsync_appends and not self._waited
        if sync:
            self.sync(seq)
        return header

    def _write_round(self) -> tuple[int, int]:
        """A group-commit round's write (the reserved batch): the end offset, the append count."""
        with self.lock:
            self.check_writable()
            if self._reserved is not None:
                self.settle()
            return self.end_offset, self._commit.written

    def _append_locked(self, batch: bytearray) -> tuple[fmt.BatchHeader, int]:
        """Assign offsets and append (caller holds ``lock``): the stored header and the append's
        count (an idempotent duplicate writes nothing: its stored header, the count so far)."""
        self.check_writable()
        if self._reserved is not None:
            self.settle()
        fmt.set_base_offset(batch, self.end_offset)
        header = fmt.parse_header(batch, 0)
        if header.producer_id >= 0:
            states = self.producer_states()
            states.expire(self.clock())
            duplicate = states.check(header)
            if duplicate is not None:
                return duplicate, self._commit.written
        return header, self._append(batch, header)

    def _check_batch_size(self, batch: bytearray) -> None:
        if len(batch) > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {len(batch)} bytes exceeds max.message.bytes="
                f"{self.config.max_message_bytes} of topic {self.topic!r}"
            )

    def _append(self, batch: bytearray, header: fmt.BatchHeader) -> int:
        """Roll if due and append (caller holds ``lock``); returns the append's count."""
        try:  # (poison_on_error, without a generator on the hot path)
            if self.active.should_roll(len(batch), header.last_offset, header.max_timestamp,
                                       self.config.roll_ms, self.config.segment_bytes):
                self._roll(header.base_offset)
            aborted = (self.producer_states().abort_entry(header, batch)
                       if header.is_control and header.producer_id >= 0 else None)
            self.active.append(batch, header, aborted)
            self._commit.written += 1
            if header.producer_id >= 0:
                self.producer_states().update(header, batch, now=self.clock())
        except BaseException as exc:
            self._poison(exc)
            raise
        self.appended.notify_all()
        return self._commit.written

    def sync_through(self, offset: int) -> bool:
        """Group commit for writers that leave records in a reserved batch (the producer in
        ``fsync`` mode): return once ``offset`` is on disk (:meth:`GroupCommit.sync_through
        <embedlog.group_commit.GroupCommit.sync_through>`). Writers must not append themselves
        while an fsync runs: an append to the page under write-back waits for that I/O, which
        would serialise them. Returns False if ``offset`` was never written."""
        return self._commit.sync_through(offset)

    def sync(self, seq: int | None = None) -> None:
        """Make every append up to ``seq`` (default: all so far) durable; one fsync serves every
        appender waiting behind it (group commit)."""
        self._commit.sync(seq)

    def _flush_active(self) -> None:
        segments = self.segments
        if not segments:  # closed meanwhile (its close sealed what was written)
            raise LogClosedError(f"{self.topic}-{self.partition} is closed")
        try:
            segments[-1].flush()
        except StorageError as exc:  # (not an interrupt: the next fsync covers what it did not)
            self._poison(exc)
            raise

    # ------------------------------------------------------------------ rolling / closing

    def _roll(self, new_base: int) -> None:
        """Seal the active segment (fsync) and start a new one at ``new_base``."""
        with self._commit.sync_lock:
            old = self.active
            if old.size == 0:
                return
            old.seal()
            self._commit.sealed()
        self._add_segment(new_base)
        write_manifest(self.directory, {s.base_offset: s.size for s in self.segments[:-1]})
        producer_state_store.take_snapshot(self, new_base, load=True)
        if self._on_roll is not None:
            self._on_roll(self)

    def _add_segment(self, base: int) -> None:
        seg = Segment(self.directory, base, self.settings, writable=True)
        seg.open_indexes_for_append()
        seg.load_active_state()
        self.segments.append(seg)
        self._bases.append(base)
        _io.fsync_dir(self.directory)

    def roll(self) -> None:
        """Seal the active segment now (if it holds anything)."""
        with self.lock, self.poison_on_error():
            self.check_writable()
            if self.active.size:
                self._roll(self.end_offset)

    def producer_states(self) -> ProducerStateTable:
        """Idempotent producers' sequence state, loaded on first use after an open from a
        snapshot and the batch headers after it (:mod:`.producer_state_store`; caller holds
        ``lock``)."""
        if self.producer_state is None:
            self.producer_state = producer_state_store.load_state(self)
        return self.producer_state

    def max_producer_id(self) -> int:
        """The largest producer id in the partition's batches, or -1."""
        with self.lock:
            return self.producer_states().max_producer_id

    def flush(self) -> None:
        """Write the reserved batch, then fsync every append so far."""
        with self.lock:
            self.check_writable()
            if self._reserved is not None:
                self.settle()
        self.sync()

    def close(self) -> None:
        with self.lock:
            self.settle()
            if self.writable and self.poisoned is None and self.refusal is None and \
                    self.segments and self.producer_state is not None:  # (else no snapshot)
                self.active.flush()  # the snapshot's offsets durable first; seals fsync anyway
                producer_state_store.take_snapshot(self, self.end_offset, load=False)
            for seg in self.segments:
                try:
                    seg.close()
                except StorageError:
                    if self.poisoned is None:
                        raise
            self.segments, self._bases = [], []
            self.refusal = self.refusal or functools.partial(  # a round queued before the close
                LogClosedError, f"{self.topic}-{self.partition} is closed")

    # ------------------------------------------------------------------ reading

    def batches(
        self, start: int | None, end: int | None = None, *, control: bool = False,
        max_records: int | None = None,
    ) -> Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]]:
        """:func:`embedlog.partition_read.batches`: the data batches of ``[start, end)``
        (``start=None``: the log start), restricted to it; control batches with ``control``."""
        return partition_read.batches(self, start, end, control, max_records)

    def read(self, start: int | None, end: int | None = None, max_records: int | None = None
             ) -> Iterator[Record]:
        """Records from ``start`` (:func:`embedlog.partition_read.read`)."""
        return partition_read.read(self, start, end, max_records)

    def aborted_txns(self, start: int, end: int) -> AbortedRanges | None:
        """:func:`embedlog.transactions.indexed_aborted` over ``[start, end)``."""
        with self.lock:
            segs = self.segments[partition_read.segment_index(self, start) :]
        return indexed_aborted(partition_read.with_remote(self, start, segs, end), start, end)

    def last_stable_offset(self) -> int:
        """:func:`embedlog.producer_state_store.last_stable_offset` (no refresh of a view)."""
        return producer_state_store.last_stable_offset(self)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """Earliest offset whose timestamp is >= ``timestamp`` (Kafka's ``offsetsForTimes``)."""
        return partition_read.offset_for_timestamp(self, timestamp)

    # ------------------------------------------------------------------ deletion

    def delete_records(self, before: int) -> int:
        """Move the log start offset up to ``before`` (Kafka's DeleteRecords); whole segments
        below it are deleted. Returns the new log start offset."""
        with self.lock, self.poison_on_error():
            self.check_writable()
            check_deletable(self.topic, self.partition, self.config)
            if before > self.end_offset or before < 0:
                raise OffsetOutOfRangeError(f"cannot delete records before {before}: {self.topic}"
                                            f"-{self.partition} ends at {self.end_offset}")
            if before > self.start_offset:
                # on disk first: a checkpointed log start past the end is damage on open
                self._flush_active()
                self.start_offset = before
                self._persist_start()
                self._delete_leading(lambda seg, nxt: nxt <= self.start_offset)
            return self.start_offset

    def enforce_retention(self, now: int | None = None) -> int:
        """Delete closed segments past ``retention.ms`` / ``retention.bytes``; never the active
        one. Returns the number of segments deleted."""
        if not self.config.delete:
            return 0
        now = self.clock() if now is None else now
        with self.lock, self.poison_on_error():
            self.check_writable()
            deleted = 0
            doomed = expired(self.segments, now, self.config.retention_ms,
                             self.config.retention_bytes)
            if doomed:
                new_start = self.segments[doomed].base_offset
                self.start_offset = max(self.start_offset, new_start)
                self._persist_start()
                deleted = self._delete_leading(lambda seg, nxt: nxt <= self.start_offset)
            return deleted

    def _persist_start(self) -> None:
        _io.mark("intent_start_offset", topic=self.topic, partition=self.partition,
                 offset=self.start_offset)
        if self._on_start_offset is not None:
            self._on_start_offset(self)

    def _delete_leading(self, doomed: Callable[[Segment, int], bool]) -> int:
        count = 0
        while len(self.segments) > 1 and doomed(self.segments[0], self._bases[1]):
            self.segments.pop(0).delete()
            self._bases.pop(0)
            count += 1
        if count:
            _io.fsync_dir(self.directory)
            write_manifest(self.directory, {s.base_offset: s.size for s in self.segments[:-1]})
        return count

    def replace_segments(
        self, old: list[Segment], new: list[Segment], *, manifest: bool = True
    ) -> None:
        """Swap compacted segments in for ``old`` (caller holds the lock and did the renames;
        ``manifest=False``: it also wrote the manifest of the new set, as it must before the
        last ``.swap`` file goes)."""
        keep = [s for s in self.segments if s not in old]
        self.segments = sorted(keep + new, key=lambda s: s.base_offset)
        self._bases = [s.base_offset for s in self.segments]
        if manifest:
            write_manifest(self.directory, {s.base_offset: s.size for s in self.segments[:-1]})

