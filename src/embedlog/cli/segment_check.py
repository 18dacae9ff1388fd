"""Read-only inspection of segment files, shared by ``dump-log`` and ``verify``.

:class:`LogWalk` walks a ``.log`` file batch by batch like Kafka's ``DumpLogSegments``: it keeps
going past a batch whose CRC-32C or records are bad (reporting it), and stops at the first batch
whose framing is unreadable (bad length or magic, offsets out of order: the segment's walk
checks those) or at an incomplete tail. While walking it keeps
what the index checks need: every batch's position, last offset and the running maximum
timestamp, in compact ``array('q')`` columns.

The index checks accept both of Kafka's writers: an offset-index entry must point at the start
of a batch and name the last offset of that batch or of a later one (an append of several
batches is indexed by its largest offset); a time-index entry must name an offset of the segment
with exactly the largest timestamp of the segment up to the batch holding that offset.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import CorruptBatchError, CorruptIndexError
from ..index import OffsetIndex, TimeIndex
from ..naming import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, parse_segment_file, segment_path
from ..segment import format as fmt
from ..segment.segment import Segment, SegmentSettings

__all__ = ["Batch", "LogWalk", "check_offset_index", "check_time_index", "segment_file"]

MAX_BATCH_BYTES = 2**31 - 1
"""The walk accepts any batch size a v2 header can state; a reader's memory bound is the file."""


def segment_file(path: str) -> tuple[str, int, str]:
    """``(directory, base offset, suffix)`` of a ``.log``/``.index``/``.timeindex`` path;
    ValueError for anything else."""
    parsed = parse_segment_file(os.path.basename(path))
    if parsed is None or parsed[2] or parsed[1] not in (LOG_SUFFIX, INDEX_SUFFIX,
                                                           TIMEINDEX_SUFFIX):
        raise ValueError(
            f"{path} is not a segment file (expected <20-digit base offset>.log, .index or "
            ".timeindex)"
        )
    return os.path.dirname(os.path.abspath(path)), parsed[0], parsed[1]


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch as found in the file. ``error`` names a CRC or record-level problem."""

    position: int
    header: fmt.BatchHeader
    crc_valid: bool
    records: fmt.DecodedRecords | None
    error: str | None


class LogWalk:
    """Iterate the batches of ``<directory>/<base>.log``; afterwards ``valid_bytes``,
    ``trailing_bytes`` (an incomplete tail) and ``error`` (unreadable framing) describe how
    the walk ended, and ``bad_batches`` counts batches with a CRC or record problem."""

    def __init__(self, directory: str, base_offset: int, *, decode: bool) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.decode = decode
        self.path = segment_path(directory, base_offset, LOG_SUFFIX)
        self.size = 0
        self.valid_bytes = 0
        self.trailing_bytes = 0
        self.error: CorruptBatchError | None = None
        self.bad_batches = 0
        self.records = 0
        self.first_offset: int | None = None
        self.positions = array("q")
        self.last_offsets = array("q")
        self.running_max_ts = array("q")

    @property
    def next_offset(self) -> int:
        return self.last_offsets[-1] + 1 if self.last_offsets else self.base_offset

    def __iter__(self) -> Iterator[Batch]:
        seg = Segment(self.directory, self.base_offset,
                      SegmentSettings(max_batch_bytes=MAX_BATCH_BYTES), writable=False)
        try:
            self.size = seg.size
            position = 0
            max_ts = -1
            try:
                for buf, p, header in seg.batches(0, verify=False, partial_tail=True):
                    batch = self._check(buf, p, header, position)
                    if self.first_offset is None:
                        self.first_offset = header.base_offset
                    max_ts = max(max_ts, header.max_timestamp)
                    self.positions.append(position)
                    self.last_offsets.append(header.last_offset)
                    self.running_max_ts.append(max_ts)
                    position += header.size
                    self.valid_bytes = position
                    yield batch
            except CorruptBatchError as exc:
                self.error = exc
            if self.error is None:
                self.trailing_bytes = self.size - self.valid_bytes
        finally:
            seg.close()

    def _check(self, buf: bytes, p: int, header: fmt.BatchHeader, position: int) -> Batch:
        error = None
        crc_valid = True
        try:
            fmt.verify_crc(buf, p, header)
        except CorruptBatchError as exc:
            crc_valid, error = False, exc.reason
        records = None
        if self.decode and header.records_count and crc_valid:
            try:
                records = fmt.decode_records(buf, p, header)
            except CorruptBatchError as exc:
                error = exc.reason
        if error:
            self.bad_batches += 1
        self.records += header.records_count
        return Batch(position, header, crc_valid, records, error)

    def batch_index(self, offset: int) -> int | None:
        """Index (into the columns) of the batch holding ``offset``, if any."""
        i = bisect.bisect_left(self.last_offsets, offset)
        return i if i < len(self.last_offsets) else None


def check_offset_index(path: str, walk: LogWalk) -> list[str]:
    """Problems of the ``.index`` at ``path`` against a completed walk of its log."""
    with OffsetIndex(path, walk.base_offset, writable=False) as index:
        try:
            index.sanity_check(walk.size)
        except CorruptIndexError as exc:
            return [str(exc)]
        entries = index.entries()
    problems = []
    positions = walk.positions
    for i, (rel, pos) in enumerate(zip(entries["rel"].tolist(), entries["pos"].tolist(),
                                       strict=True)):
        offset = walk.base_offset + rel
        k = bisect.bisect_left(positions, pos)
        if k == len(positions) or positions[k] != pos:
            problems.append(f"entry {i} (offset {offset}) points to byte {pos}, "
                            "which is not the start of a batch")
            continue
        j = bisect.bisect_left(walk.last_offsets, offset)
        if j < k or j == len(walk.last_offsets) or walk.last_offsets[j] != offset:
            problems.append(f"entry {i} maps offset {offset} to byte {pos}, but the "
                            f"batch there ends at offset {walk.last_offsets[k]}")
    return problems


def check_time_index(path: str, walk: LogWalk) -> list[str]:
    """Problems of the ``.timeindex`` at ``path`` against a completed walk of its log."""
    with TimeIndex(path, walk.base_offset, writable=False) as index:
        try:
            index.sanity_check(walk.size)
        except CorruptIndexError as exc:
            return [str(exc)]
        entries = index.entries()
    problems = []
    for i, (ts, rel) in enumerate(zip(entries["ts"].tolist(), entries["rel"].tolist(),
                                      strict=True)):
        offset = walk.base_offset + rel
        k = walk.batch_index(offset)
        if k is None:
            problems.append(f"entry {i} names offset {offset}, past the end of the "
                            f"log ({walk.next_offset})")
        elif walk.running_max_ts[k] != ts:
            problems.append(f"entry {i} says timestamp {ts} at offset {offset}, but the "
                            f"largest timestamp up to that batch is {walk.running_max_ts[k]}")
    return problems
