"""One segment: ``<base>.log`` with its sparse ``<base>.index`` and ``<base>.timeindex``.

Invariants:

* the ``.log`` holds v2 record batches back to back from byte 0 to :attr:`Segment.size`; every
  batch's offsets are >= the base offset, strictly above the previous batch's, and fit in a
  signed 32-bit delta from the base; with the partition's context (:attr:`Segment.bounds`, set
  by the loader) they also end below the next segment's base, and the active segment of a
  topic embedlog created has no gap. The rules, shared by reads, tail walks, recovery and
  ``embedlog verify``, are in :mod:`.rules`; the walk is :mod:`.scan`;
* the ``.log`` is the only source of truth -- both indexes are caches rebuilt from it by
  :meth:`Segment.recover` whenever they are missing, suspect, or the segment was not cleanly closed;
* index entries follow Kafka's rule: an entry is added for a batch appended after more than
  ``index.interval.bytes`` bytes since the previous entry; it maps the batch's *last* offset to the
  batch's *start* position (time index: the segment's max timestamp so far to its offset);
* a segment knows nothing about topics or partitions; what its neighbours imply for its
  offsets (:class:`.rules.Bounds`) it is told by whoever lists the partition.

Only the active segment of the writer is ever written; sealed segments are read-only. The class
is built in layers, each its own module: :mod:`.files` (descriptors), :mod:`.scan` (the batch
walk), :mod:`.recovery` (validation and index rebuilding), and here the open segment's lookups,
appends, rolls and lifecycle.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Literal, TypeVar

from .. import _io
from ..errors import CorruptBatchError, CorruptIndexError, StorageError
from ..index import OffsetIndex, TimeIndex
from ..index.txn_index import TxnIndexEntry
from ..naming import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, segment_path
from . import format as fmt
from . import point_memo
from .crc_memo import Memo
from .files import pinned
from .header import max_batches
from .point_read import PointReads
from .recovery import RecoveryResult, SegmentRecovery
from .rules import INT32_MAX, check_order
from .scan import SegmentSettings, located
from .txn_file import TxnIndexFile

__all__ = ["RecoveryResult", "Segment", "SegmentSettings"]

_Index = TypeVar("_Index", OffsetIndex, TimeIndex)

log = logging.getLogger(__name__)


class Segment(SegmentRecovery, PointReads):
    """A base offset's three files. Writable only while it is the writer's active segment."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        settings: SegmentSettings,
        *,
        writable: bool,
        live: bool = False,
        suffix: str = "",
    ) -> None:
        """Open the segment (the ``.log`` must exist unless ``writable``).

        ``live`` marks the last segment of a partition opened read-only while another process
        may be writing it: its size is re-read on :meth:`refresh` and its indexes are read with
        ``pread`` copies instead of mappings (a writer may trim them; a mapping would SIGBUS).
        ``suffix`` is appended to the three file names (Kafka's ``.cleaned`` / ``.swap``
        segments of a compaction in progress).
        """
        self.directory = directory
        self.base_offset = base_offset
        self.settings = settings
        self.writable = writable
        self.live = live
        self.suffix = suffix
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX) + suffix
        self.index_path = segment_path(directory, base_offset, INDEX_SUFFIX) + suffix
        self.timeindex_path = segment_path(directory, base_offset, TIMEINDEX_SUFFIX) + suffix
        self.txn_index = TxnIndexFile(
            segment_path(directory, base_offset, TXNINDEX_SUFFIX) + suffix, base_offset)
        self._index: OffsetIndex | None = None
        self._timeindex: TimeIndex | None = None
        self._index_size_seen = -1
        self._replaced = False  # log_path was found to name another file: no index by name
        self._unusable: set[str] = set()  # index paths that are not regular files
        self._next_offset: int | None = None
        self._max_timestamp: int | None = None
        self._offset_of_max_timestamp = base_offset
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index = 0
        self.pristine = False
        """A writable segment whose three files are as the last clean close left them (and
        fsynced): set by a clean open (:meth:`load_active_state`), cleared by any append, cut or
        index rebuild. Sealing a pristine segment fsyncs nothing."""
        self.log_synced = False
        """Every byte of the log is fsynced: set by :meth:`flush`, cleared by any append, cut
        or recovery; :meth:`flush` (and so the seal) does not fsync the log again."""
        self.crc_memo = Memo()  # CRCs checked while sealed (embedlog.segment.crc_memo)
        self._point_owner = point_memo.new_owner()  # its record ends (.point_memo)
        self._open_files(writable, suffix)

    # ------------------------------------------------------------------ reading

    def _own_index(self, open_index: Callable[[], _Index]) -> _Index | None:
        """The index ``open_index`` opens by name if it belongs to this segment's file; None if
        it vanished meanwhile (a writer removing it) or belongs to a file renamed over this
        one's name (then no index is opened by name again)."""
        try:
            index = open_index()
        except StorageError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        except CorruptIndexError as exc:  # not a regular file: a reader scans the log instead
            log.warning("ignoring %s", exc)
            self._unusable.add(exc.path or "")
            return None
        if self.is_current():
            return index
        index.close()
        self._replaced = True
        return None

    def _entry_limit(self) -> int:
        return max_batches(self.size)  # one entry per batch of at least 61 bytes

    def _offset_index(self) -> OffsetIndex | None:
        if self.writable:
            return self._index
        if self._replaced or self.index_path in self._unusable:
            return None
        if self.live:
            # pread copies of a file the writer may trim; reload when it grew.
            try:
                size = os.lstat(self.index_path).st_size
            except FileNotFoundError:
                return None
            if self._index is None or size != self._index_size_seen:
                if self._index is not None:
                    self._index.close()
                self._index = self._own_index(
                    lambda: OffsetIndex(self.index_path, self.base_offset, writable=False,
                                        copy=True, entry_limit=self._entry_limit())
                )
                self._index_size_seen = size
            return self._index
        if self._index is None:
            if not os.path.exists(self.index_path):
                return None
            self._index = self._own_index(
                lambda: OffsetIndex(self.index_path, self.base_offset, writable=False,
                                    entry_limit=self._entry_limit())
            )
            if self._index is None:
                return None
            try:
                self._index.sanity_check(self.size)
            except CorruptIndexError:
                log.warning("ignoring inconsistent index %s; scanning the log", self.index_path)
                self._index.close()
                self._index = None
        return self._index

    def _time_index(self) -> TimeIndex | None:
        if (self._timeindex is None and not self.writable and not self._replaced
                and self.timeindex_path not in self._unusable):
            if not os.path.exists(self.timeindex_path):
                return None
            self._timeindex = self._own_index(
                lambda: TimeIndex(self.timeindex_path, self.base_offset, writable=False,
                                  copy=self.live, entry_limit=self._entry_limit())
            )
            if self._timeindex is not None and not self.live:
                try:
                    self._timeindex.sanity_check(self.size)
                except CorruptIndexError:
                    log.warning("ignoring inconsistent index %s; scanning the log",
                                self.timeindex_path)
                    self._timeindex.close()
                    self._timeindex = None
        return self._timeindex

    def _indexed_position(self, offset: int) -> int:
        """Where the offset index says to start scanning for ``offset`` (0 without an index).

        A reader does not hold the partition lock here, so the index it got may be closed under
        it by a concurrent seal (the writer's in-memory index gives way to the sealed file) or
        by a reload of a live segment's copy: it then asks once more for the current index."""
        for _ in range(2):
            index = self._offset_index()
            if index is None:
                return 0
            try:
                _, start = index.lookup(offset)
            except ValueError:
                if not index.closed:
                    raise
                continue
            return start if start < self.size else 0
        return 0

    def find_position(self, offset: int) -> int | None:
        """Byte position of the first batch whose last offset is >= ``offset``; ``None`` if the
        segment has no such batch."""
        found = self.find_batch(offset)
        return None if found is None else found[0]

    @pinned
    def find_batch(self, offset: int) -> tuple[int, bytes] | None:
        """:meth:`find_position` and the batch's header bytes there (the CRC not checked).

        The headers walked over go through the order rule of :func:`.rules.check_order` (from
        the segment's base offset when the walk starts at byte 0): the walk that reads from the
        position found cannot check its first batch against the ones before it, and a base
        offset moved back (it lies outside the CRC) would otherwise hand out another batch's
        records at the offsets asked for, or skip a batch moved below the segment's base. A
        segment that is not ``live`` ending in part of a header is damage, as in the walk."""
        start = self._indexed_position(offset)
        position = start
        floor: int | None = self.base_offset if start == 0 else None
        while position + fmt.HEADER_SIZE <= self.size:
            head = self.pread(position, fmt.HEADER_SIZE)
            try:
                header = fmt.parse_header(head, 0)
            except CorruptBatchError as exc:
                if position == start and start:
                    position = start = 0  # the index pointed into a batch: it is damaged
                    floor = self.base_offset
                    continue
                raise located(exc, self.log_path, position) from exc
            if position == start and start and header.base_offset > offset:
                position = start = 0  # the index claims a later batch holds `offset`: damaged
                floor = self.base_offset
                continue
            floor = check_order(header, floor, self.base_offset, self.log_path, position)
            if position + header.size > self.size:
                if self.live:
                    return None  # not completely written yet
                raise CorruptBatchError(
                    f"batch of {header.size} bytes runs past the end of the segment",
                    path=self.log_path,
                    position=position,
                )
            if header.last_offset >= offset:
                return position, head
            position += header.size
        if position < self.size and not self.live:
            # As the walk says: only a segment another process appends to may end in part of
            # a header; in any other, those bytes (a cut file) are damage, not the end.
            raise CorruptBatchError(
                f"{self.size - position} bytes at the end do not form a whole batch",
                path=self.log_path,
                position=position,
            )
        return None

    def read_identity(self) -> point_memo.Key | None:
        """The key under which :mod:`.point_memo` remembers reads of this segment file now;
        None for the writer's active segment. Taken before a read."""
        sealed = self._sealed_identity()
        return None if sealed is None else (self._point_owner, sealed)

    @pinned
    def find_offset_by_timestamp(self, timestamp: int, start: int = 0) -> int | None:
        """The first offset ``>= start`` in this segment whose record timestamp is
        ``>= timestamp`` (Kafka's ``findOffsetByTimestamp(timestamp, startingOffset)``: records
        below the log start are not candidates, even when timestamps are out of order).

        The time index only says where to start, and it carries no checksum: the entry used
        is checked against the batch it names (whose max timestamp must equal the entry's).
        A disagreeing entry is damage and the segment is scanned from its start instead."""
        tindex = self._time_index() if not self.writable else self._timeindex
        entry = tindex.floor_entry(timestamp) if tindex is not None and len(tindex) else None
        if entry is not None:
            position = self.find_position(entry[1])
            if position is not None:
                found = self._first_at_or_after(position, timestamp, start, entry[0])
                if found is not False:
                    return found
        found = self._first_at_or_after(0, timestamp, start, None)
        return None if found is False else found

    def _first_at_or_after(self, position: int, timestamp: int, start: int,
                           expect: int | None) -> int | Literal[False] | None:
        """Scan from ``position`` for the first record at or after ``start`` stamped at or after
        ``timestamp``; False when the first batch's max timestamp is not ``expect`` (the index
        entry that chose ``position`` disagrees with the log)."""
        for buf, p, header in self.batches(position):
            if expect is not None:
                if header.max_timestamp != expect:
                    return False
                expect = None
            if (header.is_control or header.max_timestamp < timestamp
                    or header.last_offset < start):
                continue
            records = fmt.decode_records(buf, p, header)
            hits = ((records.timestamps >= timestamp) & (records.offsets >= start)).nonzero()[0]
            if len(hits):
                return int(records.offsets[hits[0]])
        return None

    @property
    def next_offset(self) -> int:
        """One past the last offset of the last complete batch (the base if empty)."""
        if self._next_offset is None:
            self._next_offset = self._scan_tail()
        return self._next_offset

    @pinned
    def _scan_tail(self) -> int:
        """The end offset, from the batch headers after the last index entry (the index only
        says where to start: its offsets are never trusted for the answer)."""
        index = self._offset_index()
        start = 0
        if index is not None and len(index):
            start = index.lookup(2**63 - 1)[1]
        return self._walk_tail(start)

    def _walk_tail(self, start: int) -> int:
        nxt = None
        if start:
            try:
                for _, _, header in self.batches(start, verify=False):
                    nxt = header.next_offset
            except CorruptBatchError:
                nxt = None  # the index pointed into a batch
        if nxt is None:
            nxt = self.base_offset
            for _, _, header in self.batches(0, verify=False):
                nxt = header.next_offset
        return nxt

    @property
    @pinned
    def max_timestamp(self) -> int:
        """Largest record timestamp in the segment (-1 if none): the time index's last entry,
        as Kafka keeps it, else a scan."""
        if self._max_timestamp is None:
            tindex = self._time_index()
            ts, position = -1, 0
            if tindex is not None and len(tindex):
                ts, offset = tindex.last_entry()
                position = self.find_position(offset) or 0
            # The batches after the last entry too: a time index cut at an entry boundary
            # still looks valid, and would hide the segment's newest timestamps.
            for _, _, header in self.batches(position, verify=False):
                ts = max(ts, header.max_timestamp)
            self._max_timestamp = ts
        return self._max_timestamp

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # ------------------------------------------------------------------ writing

    @pinned
    def open_indexes_for_append(self) -> None:
        """Open both indexes writable (active segment), preallocated to segment.index.bytes;
        a new (empty) segment also gets its empty ``.txnindex``."""
        if self.size == 0:
            self.txn_index.create_empty()
        limit = self._entry_limit()
        self._index = OffsetIndex(self.index_path, self.base_offset, writable=True,
                                  max_bytes=self.settings.segment_index_bytes, entry_limit=limit)
        self._timeindex = TimeIndex(self.timeindex_path, self.base_offset, writable=True,
                                    max_bytes=self.settings.segment_index_bytes,
                                    entry_limit=limit)

    @pinned
    def append(self, batch: bytes | bytearray | memoryview, header: fmt.BatchHeader,
               aborted: TxnIndexEntry | None = None) -> int:
        """Write one encoded batch at the end; return its byte position. Not durable until
        :meth:`flush`. An ABORT marker's ``.txnindex`` entry is written (durably) first."""
        self.pristine = self.log_synced = False
        if aborted is not None:
            self.txn_index.append(aborted)
        position = self.size
        _io.pwrite(self._write_fd(), batch, position)
        self.size += len(batch)
        self._index_batch(position, header)
        self._next_offset = header.next_offset
        return position

    def should_roll(self, batch_size: int, last_offset: int, max_timestamp: int, cfg_ms: int,
                    segment_bytes: int) -> bool:
        """Kafka's roll rules for the batch about to be appended."""
        if self.size == 0:
            return last_offset - self.base_offset > INT32_MAX
        assert self._index is not None and self._timeindex is not None
        if self.size > segment_bytes - batch_size:
            return True
        first = self._first_batch_timestamp
        if first is not None and first >= 0 and max_timestamp - first > cfg_ms:
            return True
        if self._index.is_full or self._timeindex.is_full:
            return True
        return last_offset - self.base_offset > INT32_MAX

    @pinned
    def flush(self) -> None:
        """fsync the log unless :attr:`log_synced` (the indexes are fsynced by :meth:`seal`)."""
        if self.writable and not self.log_synced:
            _io.fsync(self._write_fd())
            self.log_synced = True

    @pinned
    def seal(self, *, sync: bool = True) -> None:
        """Make this segment read-only: final time-index entry, indexes trimmed and synced,
        log synced (Kafka's ``onBecomeInactiveSegment``). ``sync=False`` only for the crash
        checker's mutation tests (``_io.SAFETY``).

        A :attr:`pristine` segment is not fsynced: its log and index entries are those its last
        clean close fsynced, and the trims only undo the open's pre-allocation (a crash that
        loses them leaves zero padding after the entries, the state of any active segment,
        which every open reads as such)."""
        if not self.writable:
            return
        assert self._index is not None and self._timeindex is not None
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            entries = len(self._timeindex)
            self._timeindex.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
            self.pristine = self.pristine and len(self._timeindex) == entries
        self._index.trim()
        self._timeindex.trim()
        if sync and not self.pristine:
            self._index.flush()
            self._timeindex.flush()
            self.flush()
        self._index.close()
        self._timeindex.close()
        self._index = self._timeindex = None
        if self._wfd is not None:
            _io.close(self._wfd)
            self._wfd = None
        self.writable = False

    @pinned
    def truncate_to(self, offset: int) -> None:
        """Drop every batch whose base offset is >= ``offset`` (writable segment only)."""
        position = self.find_position(offset)
        if position is None:
            return
        head = fmt.parse_header(self.pread(position, fmt.HEADER_SIZE))
        if head.base_offset < offset:
            position += head.size
        assert self._index is not None and self._timeindex is not None
        self.pristine = self.log_synced = False
        _io.truncate(self._write_fd(), position)
        self.size = position
        self.recover(truncate=False)

    def close(self) -> None:
        """Release descriptors and mappings (a writable segment is sealed first)."""
        if self.writable:
            self.seal()
        for idx in (self._index, self._timeindex):
            if idx is not None:
                idx.close()
        self._index = self._timeindex = None
        self._close_files()

    def delete(self) -> None:
        """Unlink the three files (callers fsync the directory).

        Nothing is closed here (:meth:`retire`): iterators that captured this segment keep
        reading the unlinked inode through the open descriptor, released with the last reference --
        the same reason Kafka delays deletion by ``file.delete.delay.ms``.
        """
        if self.writable:
            self.seal()
        self.retire()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            _io.unlink(path)
        self.txn_index.unlink()

