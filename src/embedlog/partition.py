"""A partition: an ordered run of segments in ``<topic>-<partition>/``.

Invariants:

* segment base offsets strictly increase; every offset in a segment is below the next segment's
  base; only the last segment (the *active* one) is ever appended to;
* ``start_offset`` (the log start) is >= the first segment's base and only moves forward; it is
  persisted (``log-start-offset-checkpoint``) *before* the segments below it are unlinked, so a
  crash can never leave a hole;
* ``embedlog.segments`` lists the byte size of every sealed segment; on open a sealed segment that
  is shorter, longer or missing is reported as corruption, because a cut at a batch boundary is
  invisible to CRCs;
* in ``fsync`` durability an append returns only after the data is on disk; concurrent appenders
  share one fsync (group commit).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat

from . import _io, checkpoint
from .config import TopicConfig
from .errors import (
    CorruptBatchError,
    CorruptionError,
    LogPoisonedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from .naming import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_MANIFEST,
    SWAP_SUFFIX,
    parse_segment_file,
    segment_path,
)
from .producer_state import ProducerStateTable
from .records import Record
from .segment import format as fmt
from .segment.segment import Segment, SegmentSettings

__all__ = ["Partition", "SegmentInfo"]

log = logging.getLogger(__name__)

MANIFEST = SEGMENT_MANIFEST

# tuple.__new__ bound to Record: builds a Record from an 8-tuple in C, skipping the Python-level
# NamedTuple constructor (the difference is ~2x on a full scan).
_new_record = functools.partial(tuple.__new__, Record)


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
        self._start_offset_source = start_offset_source
        """Read-only views: where the writer's persisted log start offset is read from."""
        self.settings = SegmentSettings(
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            max_batch_bytes=max(config.max_message_bytes, 64 * 1024 * 1024),
        )
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._sealed: dict[int, int] = {}
        self.start_offset = 0
        self.lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._commit = threading.Condition(threading.Lock())  # sync_through's leader hand-off
        self._leading = False
        self._durable_end = 0  # every offset below this is known to be on disk
        self._written_seq = 0
        self._synced_seq = 0
        self.poisoned: BaseException | None = None
        self.appended = threading.Condition(self.lock)
        self.pending: Callable[[], None] | None = None
        """A producer's open batch whose offsets are promised but not yet written; called (under
        ``lock``, after being cleared) to write it before anything else is appended, flushed or
        closed."""
        self.producer_state: ProducerStateTable | None = None
        self._manifest_seen: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ loading

    def load(self, *, recovery_point: int | None, start_offset: int, clean: bool) -> None:
        """Open the segments; as the writer, finish interrupted swaps, validate everything after
        the recovery point when the last close was not clean, and cut a torn tail."""
        if os.path.islink(self.directory):  # planted: never follow it out of the log folder
            raise StorageError(errno.ELOOP, "partition folder is a symbolic link", self.directory)
        names = os.listdir(self.directory)
        if self.writable:
            names = self._clean_leftovers(names)
        bases = sorted(
            parsed[0]
            for name in names
            if (parsed := parse_segment_file(name)) and parsed[1] == LOG_SUFFIX and not parsed[2]
        )
        if self.writable:
            self._check_manifest(bases, start_offset)
        self.segments = [
            Segment(self.directory, b, self.settings, writable=False,
                    live=not self.writable and b == bases[-1])
            for b in bases
        ]
        self._bases = list(bases)
        if not self.writable and any(n.endswith(SWAP_SUFFIX) for n in names):
            self._adopt(names)  # a compaction is swapping segments in: read what it leaves
        if self.writable:
            self._drop_below_start(start_offset)
            self._recover(recovery_point, clean)
            if clean and recovery_point is not None and self.end_offset != recovery_point:
                # A clean close checkpoints the end offset: a log that now ends elsewhere lost
                # flushed records (a cut at a batch boundary, which CRCs cannot see) or has a
                # damaged base offset (outside the CRC too).
                raise CorruptionError(
                    f"the log ends at offset {self.end_offset}, but it was closed cleanly at "
                    f"{recovery_point}: flushed records are missing or damaged",
                    path=self.directory,
                )
        first = self._bases[0] if self._bases else start_offset
        self.start_offset = max(start_offset, first)
        if not self.segments and self.writable:
            self._add_segment(self.start_offset)
        if self.writable:
            self._durable_end = self.end_offset  # recovery ended with an fsync of the tail

    def _clean_leftovers(self, names: list[str]) -> list[str]:
        """Kafka's first loader pass: delete ``.deleted``/``.cleaned`` files and stray ``.tmp``;
        roll ``.swap`` files forward over the segments they replace."""
        keep, swaps = [], []
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                _io.unlink(path)
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(name)
            else:
                keep.append(name)
        if swaps:
            from .compaction.swap import complete_swaps

            keep = complete_swaps(self.directory, keep, swaps)
        if len(keep) != len(names):
            _io.fsync_dir(self.directory)
        return keep

    def _check_manifest(self, bases: list[int], start_offset: int) -> None:
        sealed = self._sealed = read_manifest(self.directory)
        present = set(bases)
        known = sorted(present | set(sealed))
        for base, size in sealed.items():
            later = bisect.bisect_right(known, base)
            if later < len(known) and known[later] <= start_offset:
                continue  # wholly below the log start: deleted or about to be
            path = segment_path(self.directory, base, LOG_SUFFIX)
            if base not in present:
                if bases and base < bases[-1]:
                    raise CorruptionError(
                        f"sealed segment {base} is missing: records would be lost", path=path
                    )
                continue
            actual = os.stat(path).st_size
            if actual != size:
                raise CorruptionError(
                    f"sealed segment is {actual} bytes, expected {size}: "
                    "it was truncated or extended after it was sealed",
                    path=path,
                    position=min(actual, size),
                )

    def _drop_below_start(self, start_offset: int) -> None:
        """Delete whole segments that lie below the log start offset (an interrupted retention)."""
        dropped = False
        while len(self.segments) > 1 and self._bases[1] <= start_offset:
            self.segments.pop(0).delete()
            self._bases.pop(0)
            dropped = True
        if dropped:
            _io.fsync_dir(self.directory)

    def _recover(self, recovery_point: int | None, clean: bool) -> None:
        if not self.segments:
            return
        if clean:
            first = len(self.segments) - 1
        else:
            point = recovery_point if recovery_point is not None else 0
            first = max(0, bisect.bisect_right(self._bases, point) - 1)
        last = len(self.segments) - 1
        i = first
        while i <= last:
            seg = self.segments[i]
            seg.close()
            seg = Segment(self.directory, seg.base_offset, self.settings, writable=True)
            self.segments[i] = seg
            seg.open_indexes_for_append()
            if clean and i == last:
                seg.load_active_state()
                break
            sealed = i < last and seg.base_offset in self._sealed
            result = seg.recover(truncate=not sealed, contiguous=i == len(self.segments) - 1)
            if sealed and result.truncated_bytes:
                # A sealed segment was fsynced whole: damage inside it is not a torn tail.
                raise CorruptionError(
                    f"sealed segment is damaged: {result.error}",
                    path=seg.log_path,
                    position=result.valid_bytes,
                )
            if result.truncated_bytes and i < last:
                log.warning(
                    "%s: dropping %d unflushed segment(s) after the truncated one",
                    self.directory,
                    last - i,
                )
                for later in self.segments[i + 1 :]:
                    later.delete()
                del self.segments[i + 1 :]
                del self._bases[i + 1 :]
                _io.fsync_dir(self.directory)
                last = i
            if i < last:
                seg.seal()
            i += 1
        self.segments[-1].flush()

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next appended record will get."""
        if not self.segments:
            return self.start_offset
        return max(self.active.next_offset, self.start_offset)

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_infos(self) -> list[SegmentInfo]:
        with self.lock:
            return [SegmentInfo(s.base_offset, s.size, s.log_path) for s in self.segments]

    def refresh(self) -> None:
        """Read-only view: pick up segments created or deleted by the writer and the active
        segment's new size."""
        if self.writable:
            return
        with self.lock:
            try:
                names = os.listdir(self.directory)
            except FileNotFoundError:
                names = []
            self._adopt(names)
            if self.segments:
                self.segments[-1].refresh()
            if self._start_offset_source is not None:
                persisted = self._start_offset_source(self)
                if persisted is not None and persisted > self.start_offset:
                    self.start_offset = min(persisted, self.end_offset)

    def _adopt(self, names: list[str]) -> None:
        """Read-only view: the segments ``names`` (a listing) holds, keeping those already open
        that still are what their name says. While the writer swaps compacted segments in
        (``.swap`` files present), the view is the one recovery would produce
        (:func:`embedlog.compaction.swap.reader_view`)."""
        bases = sorted(
            p[0] for n in names if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and not p[2]
        )
        swapping = any(n.endswith(LOG_SUFFIX + SWAP_SUFFIX) for n in names)
        stamp = _manifest_stamp(self.directory)
        recheck = stamp != self._manifest_seen
        if bases == self._bases and not swapping and not recheck:
            return
        view: dict[int, Segment | None] = dict.fromkeys(bases)
        if swapping:
            from .compaction.swap import reader_view

            view = reader_view(self.directory, self.settings)
        old = {s.base_offset: s for s in self.segments}
        segs = []
        for b, opened in view.items():
            seg = opened or old.get(b)
            if seg is None or (
                opened is None and (seg.suffix or (recheck and not seg.is_current()))
            ):
                seg = Segment(self.directory, b, self.settings, writable=False, live=True)
            segs.append(seg)
        # Segments the writer removed or replaced are dropped, not closed: a concurrent
        # iterator may still be reading them (their descriptors close with the last reference).
        for seg in segs[:-1]:
            if seg.live:
                seg.refresh()
                seg.live = False
        self.segments, self._bases = segs, list(view)
        self._manifest_seen = stamp
        if self._bases:
            self.start_offset = max(self.start_offset, self._bases[0])

    @contextlib.contextmanager
    def poison_on_error(self) -> Iterator[None]:
        """Run a mutation: an I/O error inside it leaves the files in an unknown state, so it
        poisons the partition (appends refused until the log is reopened and recovered)."""
        try:
            yield
        except StorageError as exc:
            if self.poisoned is None:
                self.poisoned = exc
            raise

    def check_writable(self) -> None:
        if self.poisoned is not None:
            raise LogPoisonedError(
                f"an earlier I/O error ({self.poisoned}) left {self.directory} in an unknown "
                "state; close and reopen the log to recover it"
            )

    # ------------------------------------------------------------------ writing

    def append_encoded(self, batch: bytearray) -> fmt.BatchHeader:
        """Append one encoded v2 batch (base offset 0, CRC valid); assign its offsets in place.

        Returns the batch header as stored. Durable on return in fsync mode.
        """
        if len(batch) > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {len(batch)} bytes exceeds max.message.bytes="
                f"{self.config.max_message_bytes} of topic {self.topic!r}"
            )
        with self.lock:
            self.check_writable()
            if self.pending is not None:
                self.drain_pending()
            base = self.end_offset
            fmt.set_base_offset(batch, base)
            header = fmt.parse_header(batch, 0)
            if header.producer_id >= 0:
                duplicate = self.producer_states().check(header)
                if duplicate is not None:
                    if self.fsync_appends:
                        self.sync()
                    return duplicate
            try:
                if self.active.should_roll(
                    len(batch),
                    header.last_offset,
                    header.max_timestamp,
                    self.config.segment_ms,
                    self.config.segment_bytes,
                ):
                    self._roll(base)
                self.active.append(batch, header)
            except StorageError as exc:
                self.poisoned = exc
                raise
            self._written_seq += 1
            if header.producer_id >= 0:
                self.producer_states().update(header)
            seq = self._written_seq
            self.appended.notify_all()
        if self.fsync_appends:
            self.sync(seq)
        return header

    def sync_through(self, offset: int, gather: Callable[[], None] | None = None) -> bool:
        """Group commit for writers that leave records in the pending batch (the producer in
        ``fsync`` mode): return once ``offset`` is on disk.

        One caller at a time (the leader) writes the pending batch -- every record gathered
        while the previous fsync ran -- with one write, then fsyncs; the others wait and find
        their records covered. ``gather`` lets the leader wait a moment for records that are on
        their way into the batch. Writers must not append themselves while an fsync runs: an
        append to the page under write-back waits for that I/O, which would serialise them.
        Returns False if ``offset`` was never written (its batch failed; the writer has the
        error). Lock order: ``lock`` -> ``_sync_lock``; ``_commit`` is never held with either.
        """
        with self._commit:
            while self._durable_end <= offset:
                if not self._leading:
                    self._leading = True
                    break
                self._commit.wait()
            else:
                return True
        covered = False
        try:
            if gather is not None:
                gather()
            with self.lock:
                self.check_writable()
                if self.pending is not None:
                    self.drain_pending()
                end, seq = self.end_offset, self._written_seq
            if end > offset:
                self.sync(seq)
                covered = True
        finally:
            with self._commit:
                if covered:
                    self._durable_end = max(self._durable_end, end)
                self._leading = False
                self._commit.notify_all()
        return covered

    def sync(self, seq: int | None = None) -> None:
        """Make every append up to ``seq`` (default: all so far) durable; one fsync serves every
        appender waiting behind it (group commit)."""
        target = self._written_seq if seq is None else seq
        if self._synced_seq >= target:
            return
        if not _io.SAFETY.fsync_before_ack:
            return
        with self._sync_lock:
            if self._synced_seq >= target:
                return
            upto = self._written_seq
            try:
                self.active.flush()
            except StorageError as exc:
                self.poisoned = exc
                raise
            self._synced_seq = max(self._synced_seq, upto)

    def _roll(self, new_base: int) -> None:
        """Seal the active segment (fsync) and start a new one at ``new_base``."""
        with self._sync_lock:
            old = self.active
            if old.size == 0:
                return
            old.seal()
            self._synced_seq = self._written_seq
        self._add_segment(new_base)
        write_manifest(self.directory, {s.base_offset: s.size for s in self.segments[:-1]})
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

    def drain_pending(self) -> None:
        """Write the open producer batch, if any (caller holds ``lock``)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending()

    def producer_states(self) -> ProducerStateTable:
        """Idempotent producers' sequence state, rebuilt from the batch headers on first use
        after an open (caller holds ``lock``)."""
        if self.producer_state is None:
            self.producer_state = ProducerStateTable.scan(self.segments)
        return self.producer_state

    def flush(self) -> None:
        with self.lock:
            self.check_writable()
            if self.pending is not None:
                self.drain_pending()
        self.sync()

    def close(self) -> None:
        with self.lock:
            self.drain_pending()
            if self.writable and self.poisoned is None and self.segments:
                self.active.flush()
            for seg in self.segments:
                try:
                    seg.close()
                except StorageError:
                    if self.poisoned is None:
                        raise
            self.segments = []
            self._bases = []

    # ------------------------------------------------------------------ reading

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def check_range(self, offset: int) -> None:
        if offset < self.start_offset or offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"the log holds [{self.start_offset}, {self.end_offset})"
            )

    def batches(
        self,
        start: int,
        end: int | None = None,
        *,
        control: bool = False,
        max_records: int | None = None,
    ) -> Iterator[tuple[fmt.BatchHeader, fmt.DecodedRecords]]:
        """Data batches whose records fall in ``[start, end)``, each restricted to that range.

        Control batches are skipped (their offsets still count) unless ``control``. With
        ``max_records`` the caller promises to stop after that many records, so the batches are
        decoded no further (a point read walks its batch only up to the record it wants). The
        segment list is captured once; segments deleted meanwhile keep being readable through
        their open descriptors.
        """
        wanted = max_records
        with self.lock:
            if not self.writable and (start >= self.end_offset or end is None):
                self.refresh()
            self.check_range(start)
            stop = self.end_offset if end is None else min(end, self.end_offset)
            segs = list(self.segments[self._segment_index(start) :])
        offset = start
        ceilings = [s.base_offset for s in segs[1:]] + [None]
        for seg, ceiling in zip(segs, ceilings, strict=True):
            if offset >= stop:
                return
            position = seg.find_position(offset)
            if position is None:
                continue
            for buf, p, header in seg.batches(position, verify=_io.SAFETY.verify_crc):
                if ceiling is not None and header.last_offset >= ceiling:
                    raise CorruptBatchError(
                        f"batch offsets {header.base_offset}..{header.last_offset} reach into "
                        f"the next segment (base {ceiling})",
                        path=seg.log_path,
                    )
                if header.base_offset >= stop:
                    if not seg.live and header.base_offset >= self._current_end():
                        raise CorruptBatchError(
                            f"batch offsets {header.base_offset}..{header.last_offset} lie past "
                            f"the log end offset", path=seg.log_path)
                    return
                if (header.last_offset < offset or (header.is_control and not control)
                        or not header.records_count):
                    continue
                first = 0
                if offset > header.base_offset and (
                    header.records_count == header.last_offset_delta + 1
                ):
                    first = offset - header.base_offset  # dense: record i has offset base + i
                records = fmt.decode_records(buf, p, header, first=first, count=wanted)
                lo = hi = None
                if records.offsets[0] < offset:
                    lo = int(records.offsets.searchsorted(offset))
                if header.last_offset >= stop:
                    hi = int(records.offsets.searchsorted(stop))
                if lo is not None or hi is not None:
                    records = records.slice(lo or 0, len(records) if hi is None else hi)
                if len(records):
                    yield header, records
                    if wanted is not None:
                        wanted -= len(records)
                        if wanted <= 0:
                            return
            offset = max(offset, seg.next_offset)

    def _current_end(self) -> int:
        with self.lock:  # an append in progress has updated the end once the lock is free
            return self.end_offset

    def read(
        self, start: int, end: int | None = None, max_records: int | None = None
    ) -> Iterator[Record]:
        """Records from ``start``; built with C-level ``map``/``zip`` (no per-record bytecode)."""
        topic, partition = repeat(self.topic), repeat(self.partition)
        remaining = max_records
        for header, records in self.batches(start, end, max_records=max_records):
            n = len(records)
            if remaining is not None and n > remaining:
                records = records.slice(0, remaining)
            heads = records.headers
            yield from map(
                _new_record,
                zip(
                    topic,
                    partition,
                    records.offsets.tolist(),
                    records.timestamps.tolist(),
                    repeat(header.timestamp_type),
                    records.keys(),
                    records.values(),
                    repeat(()) if heads is None else heads,
                ),
            )
            if remaining is not None:
                remaining -= n
                if remaining <= 0:
                    return

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """Earliest offset whose timestamp is >= ``timestamp`` (Kafka's ``offsetsForTimes``)."""
        with self.lock:
            self.refresh()
            segs = list(self.segments)
        for seg in segs:
            if seg.max_timestamp < timestamp and seg is not segs[-1]:
                continue
            found = seg.find_offset_by_timestamp(timestamp)
            if found is not None:
                return max(found, self.start_offset)
        return None

    # ------------------------------------------------------------------ deletion

    def delete_records(self, before: int) -> int:
        """Move the log start offset up to ``before`` (Kafka's DeleteRecords); whole segments
        below it are deleted. Returns the new log start offset."""
        with self.lock, self.poison_on_error():
            self.check_writable()
            if before > self.end_offset or before < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before}: {self.topic}-{self.partition} "
                    f"ends at {self.end_offset}"
                )
            if before > self.start_offset:
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
            total = self.size_bytes()
            deleted = 0
            retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
            doomed = 0
            for seg in self.segments[:-1]:
                by_time = retention_ms >= 0 and now - _segment_time(seg) > retention_ms
                by_size = retention_bytes >= 0 and total - seg.size >= retention_bytes
                if not (by_time or by_size):
                    break
                total -= seg.size
                doomed += 1
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


def _segment_time(seg: Segment) -> int:
    ts = seg.max_timestamp
    return ts if ts >= 0 else seg.last_modified_ms()


def _manifest_stamp(directory: str) -> tuple[int, int, int] | None:
    """Identity of the manifest file: it is replaced whenever the sealed segments change."""
    try:
        st = os.stat(os.path.join(directory, MANIFEST))
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def read_manifest(directory: str) -> dict[int, int]:
    """``{base offset: size}`` of sealed segments, from ``embedlog.segments``."""
    rows = checkpoint.SEGMENT_MANIFEST.read(os.path.join(directory, MANIFEST))
    return {int(base): int(size) for base, size in rows or ()}


def write_manifest(directory: str, sealed: dict[int, int]) -> None:
    checkpoint.SEGMENT_MANIFEST.write(os.path.join(directory, MANIFEST), sorted(sealed.items()))
