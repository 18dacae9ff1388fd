"""Rebuilding one segment's state from its ``.log``: the recovery half of
:class:`~embedlog.segment.segment.Segment`.

* :meth:`SegmentRecovery.recover` (Kafka's ``LogSegment.recover``): validate every batch from
  byte 0 -- framing, CRC, records and the offset rules of :mod:`.rules` with the segment's
  :attr:`~.scan.SegmentScan.bounds` --, rebuild both indexes, and cut the log at the first
  invalid or incomplete batch (the writer's open after an unclean shutdown; a sealed segment is
  validated but never cut: the loader reports its damage);
* :meth:`SegmentRecovery.load_active_state`: after a clean close, the active segment's end
  offset, max timestamp and roll timestamp from its indexes and the batches after the last
  index entry, rebuilding indexes that disagree with the log; a segment it takes as it is
  stays ``pristine`` (its seal fsyncs nothing) until something changes it;
* :meth:`SegmentRecovery._index_batch`: Kafka's index rule, shared with appends: an entry for
  a batch appended after more than ``index.interval.bytes`` bytes since the previous one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import _io
from ..errors import CorruptBatchError, CorruptIndexError
from . import format as fmt
from .files import pinned
from .scan import SegmentScan

__all__ = ["RecoveryResult", "SegmentRecovery"]

log = logging.getLogger("embedlog.segment.segment")  # the logger these messages always had


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What :meth:`SegmentRecovery.recover` found: the bytes kept and cut, the end offset,
    and the first damage (None when only an incomplete tail, or nothing, was cut)."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    error: str | None


class SegmentRecovery(SegmentScan):
    """Validation and index rebuilding of one segment (see the module notes)."""

    _max_timestamp: int | None
    _offset_of_max_timestamp: int
    _first_batch_timestamp: int | None
    _bytes_since_index: int
    pristine: bool
    log_synced: bool

    @pinned
    def load_active_state(self) -> None:
        """After a clean open: the end offset, the max timestamp and the roll timestamp, from the
        indexes plus a walk of the batches after the last index entry.

        Indexes that fail their sanity check, or whose entries reach past the end the walk
        finds, are rebuilt from the log; the log itself was closed cleanly, so any damage found
        then raises :class:`CorruptBatchError` instead of being cut."""
        assert self._index is not None and self._timeindex is not None
        try:
            self._index.sanity_check(self.size)
            self._timeindex.sanity_check(self.size)
        except CorruptIndexError:
            self._rebuild_indexes()
            return
        self._max_timestamp, self._offset_of_max_timestamp = self._timeindex.last_entry()
        if self.size >= fmt.HEADER_SIZE:
            self._first_batch_timestamp = fmt.parse_header(
                self.pread(0, fmt.HEADER_SIZE)
            ).max_timestamp
        start, nxt = 0, self.base_offset
        if len(self._index):
            _, start = self._index.lookup(2**63 - 1)
        try:
            for _, _, header in self.batches(start, verify=False):
                if header.max_timestamp > self._max_timestamp:
                    self._max_timestamp = header.max_timestamp
                    self._offset_of_max_timestamp = header.last_offset
                nxt = header.next_offset
        except CorruptBatchError:
            self._rebuild_indexes()
            return
        stale = (len(self._index) and self._index.last_offset >= nxt) or (
            len(self._timeindex) and self._timeindex.last_entry()[1] >= nxt)
        if stale or (start and nxt == self.base_offset):
            self._rebuild_indexes()
            return
        self._next_offset = nxt
        self.pristine = True

    def _rebuild_indexes(self) -> None:
        log.warning("rebuilding the inconsistent indexes of %s", self.log_path)
        result = self.recover(truncate=False)
        if result.truncated_bytes:
            raise CorruptBatchError(
                f"segment closed cleanly is damaged: {result.error or 'incomplete batch'}",
                path=self.log_path,
                position=result.valid_bytes,
            )

    @pinned
    def recover(self, *, truncate: bool = True) -> RecoveryResult:
        """Validate every batch from byte 0, rebuild both indexes, and cut the log at the first
        invalid or incomplete batch (Kafka's ``LogSegment.recover``). The offset rules are the
        ones of :meth:`batches` (with :attr:`bounds`): forward gaps are kept unless the segment
        is dense, offsets that go backwards or reach the next segment are damage. Of two
        batches whose offsets collide neither is yielded (either base offset may be the damaged
        one: they are outside the CRC), so the cut comes before both."""
        assert self._index is not None and self._timeindex is not None
        self.pristine = self.log_synced = False
        self._index.reset()
        self._timeindex.reset()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._first_batch_timestamp = None
        self._bytes_since_index = 0
        valid, nxt, error = 0, self.base_offset, None
        try:
            for buf, p, header in self.batches(0, verify=_io.SAFETY.verify_crc,
                                               partial_tail=True):
                if not header.is_control and header.records_count:
                    fmt.decode_records(buf, p, header)  # full record-level validation
                self._index_batch(valid, header)
                valid, nxt = valid + header.size, header.next_offset
        except CorruptBatchError as exc:
            error = str(exc)
        truncated = self.size - valid
        if truncated and truncate and _io.SAFETY.truncate_torn_tail:
            log.warning(
                "truncating %s at byte %d (%d bytes dropped): %s",
                self.log_path,
                valid,
                truncated,
                error or "incomplete batch",
            )
            _io.truncate(self._write_fd(), valid)
            self.size = valid
        self._next_offset = nxt
        return RecoveryResult(valid, truncated, nxt, error)

    def _index_batch(self, position: int, header: fmt.BatchHeader) -> None:
        assert self._index is not None and self._timeindex is not None
        if self._first_batch_timestamp is None:
            self._first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > (self._max_timestamp if self._max_timestamp is not None else -1):
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        if self._bytes_since_index > self.settings.index_interval_bytes:
            if not self._index.is_full:
                self._index.append(header.last_offset, position)
            if self._max_timestamp is not None and not self._timeindex.is_full:
                self._timeindex.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size

