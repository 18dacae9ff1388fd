"""One cleaning pass over one partition (Kafka's ``Cleaner.doClean``).

1. **Plan** (:mod:`.plan`): the dirty section ``[first dirty, first uncleanable)``; the producer
   and transaction facts of the partition (:mod:`.txn`).
2. **Map** (:mod:`.mapping`): read the dirty section in offset order and record, for each key
   digest, the latest offset (:class:`.OffsetMap`); aborted transactional batches and control
   batches are not mapped. The map stops at a batch boundary when it is full (then a later
   pass continues from there): its end is the *end offset* of the pass. While reading, what the
   rewrite will need of each dirty batch (record offsets, byte ranges, timestamps, null values)
   is kept in memory while it fits in what the map left of the byte budget, so the rewrite need
   not decode those batches again.
3. **Rewrite**: the non-active segments below the end offset, from the log start, in groups
   (:func:`.plan.group_segments`), each group into one ``.cleaned`` segment swapped in by
   :func:`.swap.install`. A record is kept when it lies past the end offset, or has a key and
   is the latest for it (for a dirty record: its offset is one the map holds; for an older
   one: its key is not in the map at all) and, for a tombstone, its batch's delete horizon has
   not passed. Batch by batch, exactly as Kafka's ``MemoryRecords.filterTo``:

   * everything kept and no horizon to set: the batch is copied byte for byte;
   * some records dropped: the batch is rebuilt with the same base offset, last offset delta,
     producer fields, attributes and leader epoch; the kept records' bytes are copied into it
     unchanged (their deltas still refer to the same base offset and base timestamp) and
     recompressed with the batch's codec;
   * a tombstone kept in a batch without a delete horizon (or a marker whose transaction is
     gone): the batch is re-encoded with baseTimestamp = now + ``delete.retention.ms`` and
     attribute bit 6 (KIP-534); a later pass removes the tombstone once that time is past;
   * nothing kept: the batch disappears, unless it is a producer's last batch or the last one
     below the end offset, which keep their 61-byte header (``recordsCount`` 0).

Uncompressed data batches are read and decided by the compiled walk (:mod:`.walk`), which
also builds the shrunk batches; compressed ones, and any batch it does not read, from decoded
columns (:mod:`.columns`). Both give the same bytes: a batch's records are copied (not
re-encoded) exactly when that batch's varints are all minimal.

The pass checks ``should_stop`` between batches and raises :class:`Cancelled` (nothing swapped
in by then is undone: every swap is complete on its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from .. import _io
from ..naming import CLEANED_SUFFIX
from ..partition import Partition
from ..producer_state import next_sequence
from ..segment import format as fmt
from ..segment.codecs import Compression
from ..segment.encode import SectionTooLargeError
from ..segment.segment import Segment
from . import walk
from .columns import Columns, decode_batches, section
from .digest import Digester, padded
from .mapping import KeyMapper, KnownChunk
from .plan import Cleanable, cleanable, group_segments
from .stats import CompactionStats
from .swap import discard, install
from .txn import CleanedTransactions, control_type, scan_headers

__all__ = ["Cancelled", "PassResult", "clean_partition"]

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

CHUNK_BYTES: Final = 4 << 20
"""Batch bytes read and decoded together (one virtual batch), at most; a small memory budget
makes chunks smaller (1/16 of it, at least 256 KiB): a chunk's transient copies are a few
times its size."""
MIN_CHUNK_BYTES: Final = 256 << 10
BYTES_PER_CHUNK_RECORD: Final = 128
"""Chunks also end after ``chunk bytes / 128`` records (small records)."""


class Cancelled(Exception):
    """The pass was asked to stop."""


@dataclass(frozen=True, slots=True)
class PassResult:
    stats: CompactionStats
    end_offset: int | None
    """The new first dirty offset, or None when nothing was cleaned (or a swap was refused)."""
    plan: Cleanable | None


@dataclass(slots=True)
class _Batch:
    buf: bytes  # the segment read holding it, at pos
    pos: int
    raw: memoryview
    header: fmt.BatchHeader
    known: tuple[KnownChunk, int, int] | None = None
    aborted: bool = False
    control_kind: int | None = None
    discardable: bool = False  # control batch whose transaction is gone


_Decision = tuple[Bools, Bools, Columns | None, int] | walk.Outcome
"""A data batch's keep/drop decision: per record kept and null value, with the decoded columns
holding its records and where they start there (or None); or the compiled walk's outcome."""


def _isin_sorted(values: I64, sorted_array: I64) -> Bools:
    if not len(sorted_array):
        return np.zeros(len(values), np.bool_)
    i = np.minimum(np.searchsorted(sorted_array, values), len(sorted_array) - 1)
    hit: Bools = sorted_array[i] == values
    return hit


class _Pass:
    def __init__(
        self,
        partition: Partition,
        *,
        now: int,
        map_bytes: int,
        should_stop: Callable[[], bool],
    ) -> None:
        self.p = partition
        self.config = partition.config
        self.now = now
        self.map_bytes = map_bytes
        self.should_stop = should_stop
        self.stats = CompactionStats(partitions=1, passes=1)
        self.digester = Digester()
        self.chunk_bytes = min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, map_bytes // 16))
        self.chunk_records = self.chunk_bytes // BYTES_PER_CHUNK_RECORD

    def _check_stop(self) -> None:
        if self.should_stop():
            raise Cancelled()

    # ------------------------------------------------------------------ pass

    def run(self, checkpoint: int | None) -> PassResult:
        p = self.p
        with p.lock:
            p.check_writable()
            segments = list(p.segments)
            start, end = p.start_offset, p.end_offset
            # the producer state keeps a transaction whose first batches were deleted
            opened = list(p.producer_states().txns.open.values())
        plog = scan_headers(segments, end)
        firsts = [*opened, *(() if plog.last_stable_offset is None else (plog.last_stable_offset,))]
        plan = cleanable(
            segments, start_offset=start, end_offset=end, checkpoint=checkpoint,
            last_stable_offset=max(start, min(firsts)) if firsts else None,
            config=self.config, now=self.now,
        )  # fmt: skip
        if plan.first_dirty >= plan.first_uncleanable:
            return PassResult(CompactionStats(), None, plan)
        began = time.perf_counter()
        dirty = [
            s
            for i, s in enumerate(segments[:-1])
            if s.base_offset < plan.first_uncleanable
            and segments[i + 1].base_offset > plan.first_dirty
        ]
        mapper = KeyMapper(map_bytes=self.map_bytes, chunk_bytes=self.chunk_bytes,
                           chunk_records=self.chunk_records, digester=self.digester,
                           check_stop=self._check_stop, where=f"{p.topic}-{p.partition}")
        omap, end_offset, known = mapper.build(dirty, plan, plog)
        self.map = omap
        self.survivors = omap.latest_offsets()
        self.first_dirty = plan.first_dirty
        self.first_uncleanable = plan.first_uncleanable
        self.end_offset = end_offset
        self.plog = plog
        self.txn = CleanedTransactions(plog.aborted)
        self.known = known
        cleaned = [s for s in segments[:-1] if s.base_offset < end_offset]
        groups = group_segments(
            cleaned, self.config.segment_bytes, self.config.segment_index_bytes,
            plan.first_uncleanable,
        )  # fmt: skip
        complete = True
        for group in groups:
            complete = self._clean_group(group) and complete
        self.stats.map_entries = omap.size
        self.stats.map_bytes = omap.nbytes
        self.stats.elapsed_s = time.perf_counter() - began
        return PassResult(self.stats, end_offset if complete else None, plan)

    # ------------------------------------------------------------------ rewrite

    def _clean_group(self, group: list[Segment]) -> bool:
        p = self.p
        base = group[0].base_offset
        discard(p.directory, base)
        out = Segment(p.directory, base, p.settings, writable=True, suffix=CLEANED_SUFFIX)
        try:
            out.open_indexes_for_append()
            for seg in group:
                chunk: list[_Batch] = []
                size = 0
                for buf, pos, h in seg.batches(0):
                    self._check_stop()
                    chunk.append(_Batch(buf, pos, memoryview(buf)[pos : pos + h.size], h))
                    size += h.size
                    if size >= self.chunk_bytes or len(chunk) >= 4096:
                        self._filter(chunk, out)
                        chunk, size = [], 0
                self._filter(chunk, out)
            if entries := self.plog.entries_in(base, group[-1].next_offset):
                out.txn_index.rewrite(entries)  # created empty with the segment
            out.seal(sync=_io.SAFETY.fsync_before_rename)  # durable before it is renamed in
            # Kafka keeps the group's last modification time: retention measures a segment
            # without timestamps (one the pass emptied) by it, not by when it was cleaned
            if (modified := group[-1].last_modified_ms()) > 0:  # 0: the file is gone
                _io.set_mtime(out.log_path, modified)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: the files go anyway
                out.close()
            discard(p.directory, base)
            raise
        self.stats.segments_read += len(group)
        if install(p, group, out) is None:
            return False
        self.stats.segments_written += 1
        return True

    def _filter(self, chunk: list[_Batch], out: Segment) -> None:
        if not chunk:
            return
        walked: list[_Batch] = []
        for b in chunk:
            h = b.header
            if h.is_control:
                b.control_kind = control_type(b.raw, h)
                b.discardable = self.txn.on_control_batch(h, b.control_kind)
            else:
                b.aborted = self.txn.on_data_batch(h)
                if not b.aborted and h.records_count:
                    walked.append(b)
        keep: dict[int, _Decision] = {}
        left = self._decide_walked(walked, keep)
        for b in left:
            b.known = self.known.get(b.header.base_offset)
        to_decode = [b for b in left if b.known is None]
        from_known = [b for b in left if b.known is not None]
        if to_decode:
            self._decide_decoded(to_decode, keep)
        if from_known:
            self._decide_known(from_known, keep)
        for b in chunk:
            self._emit(b, keep.get(id(b)), out)

    def _decide_walked(self, batches: list[_Batch], keep: dict[int, _Decision]) -> list[_Batch]:
        """Decide on the batches the compiled walk reads (:mod:`.walk`); returns the others."""
        left = [b for b in batches if not walk.readable(b.header)]
        by_id = {id(b.header): b for b in batches}
        for run in walk.runs([(b.buf, b.pos, b.header) for b in batches
                              if walk.readable(b.header)]):
            outcomes, gone = walk.filter_run(
                run, omap=self.map, digester=self.digester, survivors=self.survivors,
                first_dirty=self.first_dirty, end_offset=self.end_offset, now=self.now,
            )  # fmt: skip
            self.stats.tombstones_removed += gone
            for (_, _, h), o in zip(run, outcomes, strict=True):
                if o.how == walk.NOT_READ:
                    left.append(by_id[id(h)])
                else:
                    keep[id(by_id[id(h)])] = o
        return left

    def _expired(self, batches: Sequence[_Batch], counts: I64) -> Bools:
        """Per record: its batch carries a delete horizon that has passed."""
        gone = [
            h.delete_horizon_ms is not None and self.now >= h.delete_horizon_ms
            for h in (b.header for b in batches)
        ]
        return np.repeat(np.array(gone, np.bool_), counts)

    def _decide_decoded(self, batches: list[_Batch], keep: dict[int, _Decision]) -> None:
        cols = decode_batches([(b.raw, b.header) for b in batches])
        r = cols.records
        offsets = r.offsets
        keyed = r.key_len >= 0
        tomb = r.value_len < 0
        past = offsets >= self.end_offset
        latest = np.zeros(len(offsets), np.bool_)
        dirty = np.flatnonzero((offsets >= self.first_dirty) & ~past)
        latest[dirty] = _isin_sorted(offsets[dirty], self.survivors)
        clean = np.flatnonzero((offsets < self.first_dirty) & keyed)
        if len(clean) and self.map.size:
            lane0, lane1 = self.digester.digests(
                padded(r.data), r.key_pos[clean], r.key_len[clean].astype(np.int64)
            )
            latest[clean] = self.map.get(lane0, lane1) < 0
        elif len(clean):
            latest[clean] = True
        counts = np.diff(cols.first)
        kept = past | (keyed & latest & ~(tomb & self._expired(batches, counts)))
        self.stats.tombstones_removed += int((keyed & latest & tomb & ~past & ~kept).sum())
        for i, b in enumerate(batches):
            lo, hi = cols.of_batch(i)
            keep[id(b)] = (kept[lo:hi], tomb[lo:hi], cols, lo)

    def _decide_known(self, batches: list[_Batch], keep: dict[int, _Decision]) -> None:
        parts = [b.known for b in batches if b.known is not None]
        counts = np.fromiter((hi - lo for _, lo, hi in parts), np.int64, len(parts))
        delta = np.concatenate([c.delta[lo:hi] for c, lo, hi in parts])
        tomb = np.concatenate([c.tomb[lo:hi] for c, lo, hi in parts])
        bases = np.fromiter((b.header.base_offset for b in batches), np.int64, len(batches))
        offsets = np.repeat(bases, counts) + delta
        latest = _isin_sorted(offsets, self.survivors)
        kept = latest & ~(tomb & self._expired(batches, counts))
        self.stats.tombstones_removed += int((latest & tomb & ~kept).sum())
        first = np.concatenate(([0], np.cumsum(counts)))
        for i, b in enumerate(batches):
            lo, hi = int(first[i]), int(first[i + 1])
            keep[id(b)] = (kept[lo:hi], tomb[lo:hi], None, 0)

    # ------------------------------------------------------------------ output

    def _retains_header(self, h: fmt.BatchHeader) -> bool:
        """Kafka's RETAIN_EMPTY: a producer's last batch, or the last batch of the cleanable
        range, keeps its header even with no record left."""
        return self.plog.keeps_header(h) or h.next_offset == self.first_uncleanable

    def _emit(self, b: _Batch, decision: _Decision | None, out: Segment) -> None:
        h = b.header
        s = self.stats
        s.bytes_read += h.size
        if not h.is_control:
            s.records_read += h.records_count
        if h.is_control:
            batch = self._control(b)
        elif b.aborted or not h.records_count:
            batch = self._empty(h) if self._retains_header(h) else None
        else:
            assert decision is not None
            batch = self._data(b, decision)
        if batch is None:
            s.batches_removed += 1
            return
        if batch is b.raw:
            s.batches_copied += 1
            s.bytes_written += len(batch)
            out.append(batch, h)
            return
        for header, part in _parts(batch):  # one batch, or several in a row (_encode)
            if header.records_count == 0:
                s.batches_emptied += 1
            else:
                s.batches_rebuilt += 1
            s.bytes_written += len(part)
            out.append(part, header)

    def _data(self, b: _Batch, decision: _Decision) -> bytes | memoryview | None:
        """The data batch ``b`` after the keep/drop decision on its records (None: dropped)."""
        h = b.header
        if isinstance(decision, walk.Outcome):
            if decision.how == walk.REENCODE:  # decided below from its records' flags
                assert decision.payload is not None
                mask = np.frombuffer(decision.payload, np.uint8)
                decision = ((mask & 1).astype(np.bool_), (mask & 2).astype(np.bool_), None, 0)
            else:
                self.stats.records_retained += decision.kept
                if decision.how == walk.COPIED:
                    return b.raw
                if decision.how == walk.SHRUNK:
                    return decision.payload
                return self._empty(h) if self._retains_header(h) else None
        kept, tomb, cols, lo = decision
        n = int(kept.sum())
        self.stats.records_retained += n
        if n == 0:
            return self._empty(h) if self._retains_header(h) else None
        if h.has_delete_horizon or not bool((tomb & kept).any()):
            return b.raw if n == h.records_count else self._shrunk(b, kept, cols, lo)
        return self._reencode(b, kept, self.now + self.config.delete_retention_ms)

    def _control(self, b: _Batch) -> bytes | memoryview | None:
        h = b.header
        horizon = h.delete_horizon_ms
        dropped = b.discardable and horizon is not None and self.now >= horizon
        if dropped or not h.records_count:
            if self._retains_header(h):
                return b.raw if not h.records_count else self._empty(h)
            return None
        if b.discardable and horizon is None:
            return self._reencode(b, np.ones(h.records_count, np.bool_),
                                  self.now + self.config.delete_retention_ms)
        return b.raw

    @staticmethod
    def _empty(h: fmt.BatchHeader) -> bytes:
        """Kafka's ``writeEmptyHeader``: the header alone, recordsCount 0."""
        return fmt.encode_batch(
            [], timestamps=-1, base_offset=h.base_offset, timestamp_type=h.timestamp_type,
            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence, is_transactional=h.is_transactional,
            is_control=h.is_control, leader_epoch=h.leader_epoch,
            last_offset_delta=h.last_offset_delta, max_timestamp=h.max_timestamp,
        )  # fmt: skip

    def _shrunk(self, b: _Batch, kept: Bools, cols: Columns | None, lo: int) -> bytes:
        """The batch with only the ``kept`` records, their bytes copied unchanged."""
        h = b.header
        starts: npt.NDArray[np.integer]
        ends: npt.NDArray[np.integer]
        if cols is not None and cols.bounds is not None and cols.exact(lo):
            data: bytes | memoryview = cols.records.data
            starts = cols.bounds[lo : lo + len(kept)]
            ends = cols.bounds[lo + 1 : lo + len(kept) + 1]
            timestamps = cols.records.timestamps[lo : lo + len(kept)]
        elif b.known is not None:
            chunk, klo, khi = b.known
            data = section(b.raw, h)
            ends = chunk.end[klo:khi]
            starts = np.concatenate(([0], ends[:-1]))  # a batch's records fill its section
            timestamps = chunk.timestamps[klo:khi]
        else:
            return self._reencode(b, kept, h.delete_horizon_ms)
        idx = np.flatnonzero(kept)
        records = fmt.join_ranges(data, starts[idx], ends[idx])
        max_ts = int(timestamps[kept].max()) if h.timestamp_type == 0 else h.max_timestamp
        return fmt.rebuild_batch(h, records, int(kept.sum()), max_ts)

    def _reencode(self, b: _Batch, kept: Bools, horizon: int | None) -> bytes:
        """The ``kept`` records encoded afresh (Kafka's ``buildRetainedRecordsInto``), with the
        delete horizon ``horizon`` when given: one batch, or several in a row (see
        :meth:`_encode`)."""
        h = b.header
        records = decode_batches([(b.raw, h)]).records
        return self._encode(h, records, np.flatnonzero(kept), horizon, h.base_offset,
                            h.last_offset, Compression(h.compression))

    def _encode(self, h: fmt.BatchHeader, records: fmt.DecodedRecords, idx: npt.NDArray[np.intp],
                horizon: int | None, base: int, last: int, codec: Compression) -> bytes:
        """The records ``idx`` of ``records`` (of batch ``h``) as a batch of offsets ``[base,
        last]`` with ``h``'s producer fields (the base sequence moved along with ``base``).
        Records whose encoding passes what a read decompresses
        (:data:`~embedlog.segment.codecs.MAX_DECOMPRESSED`: a delete horizon makes their
        timestamp deltas larger) are split in two batches, each encoded so, down to a single
        record, stored uncompressed as the write path stores it."""
        try:
            return self._encode_one(h, records, idx, horizon, base, last, codec)
        except SectionTooLargeError:
            if len(idx) == 1:
                return self._encode_one(h, records, idx, horizon, base, last, Compression.NONE)
        mid = len(idx) // 2
        cut = int(records.offsets[idx[mid]])
        return self._encode(h, records, idx[:mid], horizon, base, cut - 1, codec) + \
            self._encode(h, records, idx[mid:], horizon, cut, last, codec)

    @staticmethod
    def _encode_one(h: fmt.BatchHeader, records: fmt.DecodedRecords, idx: npt.NDArray[np.intp],
                    horizon: int | None, base: int, last: int, codec: Compression) -> bytes:
        seq = h.base_sequence
        if seq >= 0:
            seq = next_sequence(seq, base - h.base_offset)
        sub = dataclasses.replace(
            records, offsets=records.offsets[idx], timestamps=records.timestamps[idx],
            key_pos=records.key_pos[idx], key_len=records.key_len[idx],
            value_pos=records.value_pos[idx], value_len=records.value_len[idx],
            headers=None if records.headers is None else [records.headers[i] for i in idx],
        )  # fmt: skip
        return fmt.encode_batch(
            sub.values(), keys=sub.keys(), headers=sub.headers, timestamps=sub.timestamps,
            base_offset=base, compression=codec,
            timestamp_type=h.timestamp_type, producer_id=h.producer_id,
            producer_epoch=h.producer_epoch, base_sequence=seq,
            is_transactional=h.is_transactional, is_control=h.is_control,
            leader_epoch=h.leader_epoch, offset_deltas=sub.offsets - base,
            last_offset_delta=last - base, delete_horizon_ms=horizon,
            max_timestamp=h.max_timestamp if h.timestamp_type == 1 else None,
        )  # fmt: skip


def _parts(batch: bytes | memoryview) -> Iterator[tuple[fmt.BatchHeader, bytes | memoryview]]:
    """``(header, bytes)`` of each batch of ``batch``: one, or several in a row."""
    pos = 0
    while pos < len(batch):
        header = fmt.parse_header(batch, pos)
        yield header, batch if header.size == len(batch) else batch[pos: pos + header.size]
        pos += header.size


def clean_partition(
    partition: Partition,
    *,
    checkpoint: int | None,
    now: int,
    map_bytes: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> PassResult:
    """Run one cleaning pass (the caller serialises passes over a partition)."""
    return _Pass(partition, now=now, map_bytes=map_bytes, should_stop=should_stop).run(checkpoint)
