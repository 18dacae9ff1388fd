"""Step 2 of a cleaning pass (:mod:`.cleaner`): the key map of the dirty section.

:meth:`KeyMapper.build` reads the dirty segments from the first dirty offset in offset order and
records, for each key digest (:mod:`.digest`), the latest offset (:class:`.OffsetMap`). Aborted
transactional batches and control batches are not mapped (:class:`.txn.CleanedTransactions`
follows the markers of the aborted transactions whose marker lies at or past the first dirty
offset; an older one was settled before the section starts). Batches are taken in chunks (at
most ``chunk_bytes`` bytes or ``chunk_records`` records): the uncompressed ones mapped by the
compiled walk (:mod:`.walk`), the others decoded together so the map is filled with vectorised
digests.

Invariants:

* the map only ends at a batch boundary: when the next batch's keys cannot fit (after growing
  the map within the byte budget), mapping stops there and the pass's *end offset* is that
  batch's base offset; a later pass continues from it. A fully mapped segment ends the section
  at the next segment's base (past any offset gap);
* the byte budget ``map_bytes`` covers the map, the sorted survivors (8 bytes a key) and the
  columns kept for the rewrite (:class:`KnownChunk`, ``KNOWN_BYTES_PER_RECORD`` a record); those
  columns are given up first when the map needs room (the rewrite then decodes those batches
  again);
* a map that cannot hold even one batch is a configuration error
  (:class:`~embedlog.errors.InvalidConfigError`), never a silent partial pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ..errors import InvalidConfigError
from ..segment import format as fmt
from ..segment.segment import Segment
from . import walk
from .columns import decode_batches
from .digest import Digester, padded
from .offset_map import SLOT_BYTES, OffsetMap
from .plan import Cleanable
from .txn import CleanedTransactions, ProducerLog, control_type
from .walk import Run

__all__ = ["KNOWN_BYTES_PER_RECORD", "KeyMapper", "Known", "KnownChunk"]

KNOWN_BYTES_PER_RECORD: Final = 17
"""Memory the map phase keeps per dirty record for the rewrite (see :class:`KnownChunk`)."""


@dataclass(frozen=True, slots=True)
class KnownChunk:
    """Columns of the dirty records of one decoded chunk, kept for the rewrite."""

    delta: npt.NDArray[np.int32]  # offset - batch base offset
    end: npt.NDArray[np.int32]  # where the record ends in its batch's records section
    timestamps: npt.NDArray[np.int64]
    tomb: npt.NDArray[np.bool_]  # null value


Known = dict[int, tuple[KnownChunk, int, int]]
"""Batch base offset -> the chunk holding its records' columns, and their ``[lo, hi)`` in it."""


class KeyMapper:
    """Builds one pass's key map (see the module docstring); ``check_stop`` raises to cancel
    the pass between two batches, ``where`` names the partition in errors."""

    def __init__(self, *, map_bytes: int, chunk_bytes: int, chunk_records: int,
                 digester: Digester, check_stop: Callable[[], None], where: str) -> None:
        self.map_bytes = map_bytes
        self.chunk_bytes = chunk_bytes
        self.chunk_records = chunk_records
        self.digester = digester
        self._check_stop = check_stop
        self.where = where
        self.known_bytes = 0

    def build(
        self, dirty: Sequence[Segment], plan: Cleanable, plog: ProducerLog
    ) -> tuple[OffsetMap, int, Known]:
        """The key map of ``dirty`` (the segments overlapping ``[first dirty, first
        uncleanable)`` of ``plan``), the pass's end offset, and the columns kept for the rewrite."""
        first_dirty = plan.first_dirty
        omap = OffsetMap(self.map_bytes)
        self.known_bytes = 0
        known: Known = {}
        # only the aborted transactions that reach the dirty section (Kafka's
        # collectAbortedTransactions(start, end)): the markers of older ones are not read
        # here, so they would stay open and make the producer's next batches look aborted
        txn = CleanedTransactions([t for t in plog.aborted if t.last_offset >= first_dirty])
        pending: Run = []
        pending_records = pending_bytes = 0
        latest = -1

        def flush() -> None:
            nonlocal pending_records, pending_bytes
            if pending:
                self._map_chunk(omap, pending, first_dirty, known)
            pending.clear()
            pending_records = pending_bytes = 0

        full = False
        ends = [s.base_offset for s in dirty[1:]] + [plan.first_uncleanable]
        for seg, seg_end in zip(dirty, ends, strict=True):
            for buf, pos, h in seg.batches(seg.find_position(first_dirty) or 0):
                self._check_stop()
                if h.last_offset < first_dirty:
                    continue
                if h.base_offset >= plan.first_uncleanable:
                    break
                if h.is_control:
                    txn.on_control_batch(h, control_type(memoryview(buf)[pos : pos + h.size], h))
                elif h.records_count and not txn.on_data_batch(h):
                    if omap.size + pending_records + h.records_count > omap.max_entries:
                        flush()  # first see how many of the pending keys are new
                        if not self._make_room(omap, omap.size + h.records_count, known):
                            full = True
                            break
                    pending.append((buf, pos, h))
                    pending_records += h.records_count
                    pending_bytes += h.size
                    if (pending_records >= self.chunk_records
                            or pending_bytes >= self.chunk_bytes):
                        flush()
                latest = h.last_offset
            if full:
                break
            latest = max(latest, seg_end - 1)  # a fully mapped segment: past any offset gap
        flush()
        if latest < first_dirty:
            raise InvalidConfigError(
                f"the compaction key map ({self.map_bytes} bytes, room for {omap.max_entries} "
                f"keys) cannot hold one batch of {self.where}; give compaction more memory"
            )
        return omap, latest + 1, known

    def _make_room(self, omap: OffsetMap, entries: int, known: Known) -> bool:
        """Grow the map to hold ``entries`` keys within the byte budget, which also has to cover
        the sorted survivors (8 bytes a key) and the data kept for the rewrite (given up first:
        the rewrite then decodes those batches again)."""
        if entries <= omap.max_entries:
            return True
        per_slot = SLOT_BYTES + 8 * omap.load_factor
        for spare in (self.known_bytes, 0):
            if omap.grow(entries, max_bytes=int((self.map_bytes - spare) / per_slot) * SLOT_BYTES):
                return True
            known.clear()
            self.known_bytes = 0
        return False

    def _map_chunk(self, omap: OffsetMap, chunk: Run, first_dirty: int, known: Known) -> None:
        """Put the keys of the batches of ``chunk`` in the map: the compiled walk for the
        batches it reads (:mod:`.walk`), the decoded columns for the others."""
        left = [b for b in chunk if not walk.readable(b[2])]
        for run in walk.runs([b for b in chunk if walk.readable(b[2])]):
            left += walk.map_run(omap, self.digester, run, first_dirty)
        if left:
            self._map_decoded(omap, [(memoryview(buf)[pos : pos + h.size], h)
                                     for buf, pos, h in left], first_dirty, known)

    def _map_decoded(
        self,
        omap: OffsetMap,
        batches: list[tuple[memoryview, fmt.BatchHeader]],
        first_dirty: int,
        known: Known,
    ) -> None:
        cols = decode_batches(batches)
        r = cols.records
        mapped = np.flatnonzero((r.offsets >= first_dirty) & (r.key_len >= 0))
        lane0, lane1 = self.digester.digests(
            padded(r.data), r.key_pos[mapped], r.key_len[mapped].astype(np.int64)
        )
        omap.put(lane0, lane1, r.offsets[mapped])
        cost = len(r) * KNOWN_BYTES_PER_RECORD
        free = self.map_bytes - omap.nbytes - 8 * omap.max_entries - self.known_bytes
        if cols.bounds is None or cost > free:
            return
        counts = np.diff(cols.first)
        bases = np.fromiter((h.base_offset for _, h in batches), np.int64, len(batches))
        section_start = np.repeat(cols.sections[:-1], counts)
        chunk = KnownChunk(
            (r.offsets - np.repeat(bases, counts)).astype(np.int32),
            (cols.bounds[1:] - section_start).astype(np.int32),
            r.timestamps,
            r.value_len < 0,
        )
        self.known_bytes += cost
        for b, (_, h) in enumerate(batches):
            lo, hi = cols.of_batch(b)
            if h.base_offset >= first_dirty and cols.exact(lo):
                known[h.base_offset] = (chunk, lo, hi)
