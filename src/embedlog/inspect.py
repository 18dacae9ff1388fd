"""Inspection of a log directory's files: the supported API behind ``embedlog verify`` and
``embedlog dump-log``, for tools that look at segments, indexes and checkpoints directly.

Everything here reads files as they are -- an embedlog directory or a Kafka broker's, open or
not -- and changes nothing, except :func:`rebuild_indexes`, which needs the writer lock
(:func:`writer_lock`).

* :class:`SegmentWalk` walks a ``.log`` file batch by batch like Kafka's ``DumpLogSegments``: it
  keeps going past a batch whose CRC-32C or records are bad (reporting it), and stops at the
  first batch whose framing is unreadable (bad length or magic, offsets out of order) or at an
  incomplete tail. While walking it keeps what the index checks need: every batch's position,
  last offset and the running maximum timestamp, in compact ``array('q')`` columns.
* :func:`check_offset_index` / :func:`check_time_index` compare an index with a completed walk.
  They accept both of Kafka's writers: an offset-index entry must point at the start of a batch
  and name the last offset of that batch or of a later one (an append of several batches is
  indexed by its largest offset); a time-index entry must name an offset of the segment with
  exactly the largest timestamp of the segment up to the batch holding that offset.
* :func:`offset_index_entries` / :func:`time_index_entries`, :func:`read_checkpoint`,
  :func:`read_segment_manifest` and :func:`read_producer_snapshot` (a ``.snapshot``, see
  :mod:`embedlog.producer_snapshot`) return the entries of the other files.

:class:`BatchHeader` is the codec's view of a v2 batch header (the fields of
``docs/format.md``'s table, plus ``size``, ``last_offset``, ``timestamp_type``,
``is_transactional``, ``is_control`` and ``delete_horizon_ms``).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import _io, checkpoint
from ._batch import record_batch
from ._platform import WriterLock
from .config import TopicConfig
from .errors import CorruptBatchError, CorruptIndexError, CorruptionError
from .index import OffsetIndex, TimeIndex
from .index.base import DEFAULT_MAX_BYTES
from .index.txn_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from .index.txn_index import TxnIndexEntry, decode_entries
from .manifest import read_manifest
from .metadata import read_metadata
from .naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    parse_partition_dir,
    parse_segment_file,
    segment_path,
)
from .producer_snapshot import SnapshotEntry
from .producer_state_store import read_snapshot, snapshot_offsets
from .records import RecordBatch, TopicPartition
from .segment import format as fmt
from .segment.header import max_batches
from .segment.rules import Bounds
from .segment.segment import Segment, SegmentSettings
from .transactions import control_type

__all__ = [
    "BatchHeader",
    "SegmentWalk",
    "WalkedBatch",
    "check_offset_index",
    "check_time_index",
    "check_txn_index",
    "codec_name",
    "control_record_type",
    "dense_topics",
    "offset_index_entries",
    "producer_snapshot_offsets",
    "read_checkpoint",
    "read_producer_snapshot",
    "read_segment_manifest",
    "rebuild_indexes",
    "regular_file_size",
    "segment_file",
    "segment_files",
    "time_index_entries",
    "txn_index_entries",
    "writer_lock",
]

BatchHeader = fmt.BatchHeader
MAX_BATCH_BYTES = 2**31 - 1
"""A walk accepts any batch size a v2 header can state; a reader's memory bound is the file."""
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL_TYPES = {fmt.CONTROL_ABORT: "ABORT", fmt.CONTROL_COMMIT: "COMMIT"}


def segment_file(path: str) -> tuple[str, int, str]:
    """``(directory, base offset, suffix)`` of a ``.log``/``.index``/``.timeindex``/``.txnindex``
    path, or ``(directory, offset, ".snapshot")`` of a producer snapshot; ValueError for
    anything else."""
    parsed = parse_segment_file(os.path.basename(path))
    if parsed is None or parsed[2] or parsed[1] not in (
            LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, SNAPSHOT_SUFFIX):
        raise ValueError(
            f"{path} is not a segment file (expected <20-digit base offset>.log, .index, "
            ".timeindex, .txnindex or .snapshot)"
        )
    return os.path.dirname(os.path.abspath(path)), parsed[0], parsed[1]


def segment_files(path: str) -> list[str]:
    """``path`` itself if it is a file or has a segment file's name; else the ``.log`` files of
    a partition folder, or of every partition folder of a log directory, in (topic, partition,
    offset) order. Only ``path`` itself may be a symbolic link: a partition folder that is one
    is a :class:`~embedlog.errors.CorruptionError`, never followed."""
    if _is_segment_name(path) or not os.path.isdir(path):
        if not os.path.lexists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return [path]
    name = os.path.basename(os.path.normpath(path))
    if parse_partition_dir(name) is not None:
        return sorted(os.path.join(path, f) for f in os.listdir(path) if _is_log(f))
    folders = []
    with os.scandir(path) as entries:
        for entry in entries:
            parsed = parse_partition_dir(entry.name)
            if parsed is not None and entry.is_symlink():
                raise CorruptionError("expected a folder, found a symbolic link",
                                      path=entry.path)
            if parsed is not None and entry.is_dir(follow_symlinks=False):
                folders.append((parsed, entry.path))
    return [f for _, folder in sorted(folders) for f in segment_files(folder)]


def _is_segment_name(path: str) -> bool:
    try:
        segment_file(path)
    except ValueError:
        return False
    return True


def _is_log(name: str) -> bool:
    try:
        return segment_file(name)[2] == LOG_SUFFIX
    except ValueError:
        return False


def codec_name(header: BatchHeader) -> str:
    """``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd`` or ``unknown``."""
    return _CODECS.get(header.attributes & fmt.COMPRESSION_MASK, "unknown")


def control_record_type(key: bytes | None) -> str:
    """``ABORT``, ``COMMIT``, ``type <n>`` (KRaft and unknown markers) or ``invalid`` for the
    key of a record in a control batch."""
    try:
        _, kind = fmt.decode_control_record(key)
    except CorruptBatchError:
        return "invalid"
    return _CONTROL_TYPES.get(kind, f"type {kind}")


@dataclass(frozen=True, slots=True)
class WalkedBatch:
    """One batch as found in the file. ``error`` names a CRC or record-level problem;
    ``records`` is set when the walk decodes and the batch decoded."""

    position: int
    header: BatchHeader
    crc_valid: bool
    records: RecordBatch | None
    error: str | None


class SegmentWalk:
    """Iterate the batches of ``<directory>/<base>.log``; afterwards ``valid_bytes``,
    ``trailing_bytes`` (an incomplete tail) and ``error`` (unreadable framing) describe how
    the walk ended, and ``bad_batches`` counts batches with a CRC or record problem. With
    ``decode``, each batch's records are decoded (as :class:`~embedlog.RecordBatch`, topic and
    partition from the folder name, or ``""`` and -1)."""

    def __init__(self, directory: str, base_offset: int, *, decode: bool, dense: bool = False
                 ) -> None:
        """``dense``: the segment is the active one of a topic embedlog created, so a gap
        between its batches is damage (:mod:`embedlog.segment.rules`)."""
        self.directory = directory
        self.dense = dense
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
        self.base_offsets = array("q")
        self.last_offsets = array("q")
        self.running_max_ts = array("q")
        self.aborts: dict[int, int] = {}
        """Offset -> producer id of each ABORT marker (with a valid CRC) of the segment."""
        parsed = parse_partition_dir(os.path.basename(os.path.normpath(directory)))
        self._tp = TopicPartition(*parsed) if parsed else TopicPartition("", -1)

    @property
    def next_offset(self) -> int:
        return self.last_offsets[-1] + 1 if self.last_offsets else self.base_offset

    def __iter__(self) -> Iterator[WalkedBatch]:
        seg = Segment(self.directory, self.base_offset,
                      SegmentSettings(max_batch_bytes=MAX_BATCH_BYTES), writable=False)
        seg.bounds = Bounds(None, self.dense)
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
                    self.base_offsets.append(header.base_offset)
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

    def _check(self, buf: bytes, p: int, header: BatchHeader, position: int) -> WalkedBatch:
        error = None
        crc_valid = True
        try:
            fmt.verify_crc(buf, p, header)
        except CorruptBatchError as exc:
            crc_valid, error = False, exc.reason
        records = None
        if self.decode and header.records_count and crc_valid:
            try:
                decoded = fmt.decode_records(buf, p, header)
                records = record_batch(self._tp.topic, self._tp.partition, header, decoded)
            except CorruptBatchError as exc:
                error = exc.reason
        if error:
            self.bad_batches += 1
        elif header.is_control and header.producer_id >= 0 and header.records_count:
            with contextlib.suppress(CorruptBatchError):
                if control_type(buf[p : p + header.size], header) == fmt.CONTROL_ABORT:
                    self.aborts[header.base_offset] = header.producer_id
        self.records += header.records_count
        return WalkedBatch(position, header, crc_valid, records, error)

    def holds(self, offset: int) -> bool:
        """Whether a batch of the segment spans ``offset`` (not a gap compaction left)."""
        i = self.batch_index(offset)
        return i is not None and self.base_offsets[i] <= offset

    def batch_index(self, offset: int) -> int | None:
        """Index (into the columns) of the batch holding ``offset``, if any."""
        i = bisect.bisect_left(self.last_offsets, offset)
        return i if i < len(self.last_offsets) else None


def offset_index_entries(path: str, base_offset: int) -> list[tuple[int, int]]:
    """``(offset, position)`` of each entry of the ``.index`` at ``path``: at most as many as
    the segment's ``.log`` beside it justifies (one per 61-byte batch; none without a log)."""
    rows = _index_rows(OffsetIndex, path, base_offset)
    return [(base_offset + rel, pos)
            for rel, pos in zip(rows["rel"].tolist(), rows["pos"].tolist(), strict=True)]


def time_index_entries(path: str, base_offset: int) -> list[tuple[int, int]]:
    """``(timestamp, offset)`` of each entry of the ``.timeindex`` at ``path``, bounded as
    :func:`offset_index_entries` is."""
    rows = _index_rows(TimeIndex, path, base_offset)
    return [(ts, base_offset + rel)
            for ts, rel in zip(rows["ts"].tolist(), rows["rel"].tolist(), strict=True)]


def txn_index_entries(path: str, base_offset: int) -> list[TxnIndexEntry]:
    """The entries of the ``.txnindex`` at ``path`` (:class:`CorruptIndexError` as the codec
    raises it): at most one per 61-byte batch of the ``.log`` beside it, none without one."""
    log_size = _io.regular_size(segment_path(os.path.dirname(os.path.abspath(path)),
                                             base_offset, LOG_SUFFIX)) or 0
    limit = max_batches(log_size) * TXN_ENTRY_SIZE
    data = _io.read_regular(path, limit + 1)
    if data is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    if len(data) > limit:
        raise CorruptIndexError(f"transaction index larger than the {limit} bytes its log "
                                "justifies", path=path, position=limit)
    return decode_entries(data, path=path, base_offset=base_offset)


def check_txn_index(path: str, walk: SegmentWalk) -> list[str]:
    """Problems of the ``.txnindex`` at ``path`` against a completed walk of its log: an entry
    whose offset holds a marker of another producer, or something else than an ABORT marker,
    and an ABORT marker without an entry (a ``read_committed`` reader trusting the file would
    return that transaction's records). An entry whose marker compaction removed is kept, as
    Kafka keeps it."""
    try:
        entries = txn_index_entries(path, walk.base_offset)
    except (CorruptionError, OSError) as exc:
        return [str(exc)]
    problems = []
    for i, e in enumerate(entries):
        pid = walk.aborts.get(e.last_offset)
        if pid is not None and pid != e.producer_id:
            problems.append(f"entry {i} names producer {e.producer_id}, but the ABORT marker "
                            f"at offset {e.last_offset} is producer {pid}'s")
        elif pid is None and walk.holds(e.last_offset):
            problems.append(f"entry {i} names offset {e.last_offset}, which is not an ABORT "
                            "marker")
    indexed = {e.last_offset for e in entries}
    problems += [f"the ABORT marker of producer {pid} at offset {offset} has no entry"
                 for offset, pid in sorted(walk.aborts.items()) if offset not in indexed]
    return problems


def _index_rows(cls: type[OffsetIndex | TimeIndex], path: str, base_offset: int
                ) -> npt.NDArray[np.void]:
    log_size = _io.regular_size(segment_path(os.path.dirname(os.path.abspath(path)),
                                             base_offset, LOG_SUFFIX)) or 0
    with cls(path, base_offset, writable=False,
             entry_limit=max_batches(log_size)) as index:
        return index.entries()


def _index_problems(cls: type[OffsetIndex | TimeIndex], path: str, walk: SegmentWalk,
                    max_bytes: int) -> tuple[list[str], npt.NDArray[np.void] | None]:
    """The index's own problems (none: its entries). Bounded as a writer bounds it: what the
    log justifies or the pre-allocated ``max_bytes`` (``segment.index.bytes``) of a live or
    crashed writer's active index, whichever is larger; anything longer is a problem, and so
    is something that is not a regular file."""
    limit = max(max_batches(walk.size), max_bytes // cls.ENTRY_SIZE)
    try:
        index = cls(path, walk.base_offset, writable=False, entry_limit=limit)
    except CorruptIndexError as exc:
        return [str(exc)], None
    with index:
        try:
            index.sanity_check(walk.size)
        except CorruptIndexError as exc:
            return [str(exc)], None
        return [], index.entries()


def check_offset_index(path: str, walk: SegmentWalk, *,
                       max_bytes: int = DEFAULT_MAX_BYTES) -> list[str]:
    """Problems of the ``.index`` at ``path`` against a completed walk of its log;
    ``max_bytes``: the topic's ``segment.index.bytes`` (a writer pre-allocates that much)."""
    problems, rows = _index_problems(OffsetIndex, path, walk, max_bytes)
    if rows is None:
        return problems
    positions = walk.positions
    pairs = zip(rows["rel"].tolist(), rows["pos"].tolist(), strict=True)
    for i, (rel, pos) in enumerate(pairs):
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


def check_time_index(path: str, walk: SegmentWalk, *,
                     max_bytes: int = DEFAULT_MAX_BYTES) -> list[str]:
    """Problems of the ``.timeindex`` at ``path`` against a completed walk of its log
    (``max_bytes`` as for :func:`check_offset_index`)."""
    problems, rows = _index_problems(TimeIndex, path, walk, max_bytes)
    if rows is None:
        return problems
    pairs = zip(rows["ts"].tolist(), rows["rel"].tolist(), strict=True)
    for i, (ts, rel) in enumerate(pairs):
        offset = walk.base_offset + rel
        k = walk.batch_index(offset)
        if k is None:
            problems.append(f"entry {i} names offset {offset}, past the end of the "
                            f"log ({walk.next_offset})")
        elif walk.running_max_ts[k] != ts:
            problems.append(f"entry {i} says timestamp {ts} at offset {offset}, but the "
                            f"largest timestamp up to that batch is {walk.running_max_ts[k]}")
    return problems


def read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """Entries of a Kafka checkpoint file (a missing file has none); see
    :mod:`embedlog.checkpoint`."""
    return checkpoint.read_offsets(path)


def regular_file_size(path: str) -> int | None:
    """The size of the regular file ``path``, ``None`` if there is none; measured on a
    descriptor, so a symbolic link is never followed and a FIFO never opened blocking:
    something other than a regular file is a :class:`~embedlog.errors.CorruptionError`."""
    return _io.regular_size(path)


def dense_topics(log_dir: str) -> frozenset[str]:
    """The topics of ``log_dir`` that embedlog created (``"dense"`` in ``embedlog.json``): their
    active segments have no offset gap. Empty for a Kafka folder or unreadable metadata."""
    dense: set[str] = set()
    try:
        read_metadata(log_dir, dense=dense)
    except CorruptionError:
        return frozenset()
    return frozenset(dense)


def read_segment_manifest(directory: str) -> dict[int, int]:
    """``{base offset: size}`` of the sealed segments listed in a partition folder's
    ``embedlog.segments`` (empty when there is none)."""
    return read_manifest(directory)


@contextlib.contextmanager
def writer_lock(log_dir: str) -> Iterator[None]:
    """Hold the writer lock of ``log_dir`` inside the ``with`` block;
    :class:`~embedlog.errors.WriterLockedError` if a writer has the log open."""
    lock = WriterLock(log_dir)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def rebuild_indexes(directory: str, base_offset: int, config: TopicConfig | None = None) -> None:
    """Rebuild the ``.index`` and ``.timeindex`` of one segment from its log, with the index
    settings of ``config`` (Kafka's defaults when ``None``). The caller holds the writer lock
    (:func:`writer_lock`); the log is validated but never truncated. The ``.txnindex`` is
    removed (its entries need the segments before; readers then decide this segment by its
    markers, and recovery rebuilds it where it validates)."""
    config = config or TopicConfig()
    settings = SegmentSettings(
        index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes,
        max_batch_bytes=max(config.max_message_bytes, 64 * 1024 * 1024),
    )
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
        path = segment_path(directory, base_offset, suffix)
        if os.path.lexists(path):  # a link or a FIFO in its place goes too, unfollowed
            _io.unlink(path)
    seg = Segment(directory, base_offset, settings, writable=True)
    try:
        seg.open_indexes_for_append()
        seg.recover(truncate=False)
    finally:
        seg.close()
    _io.fsync_dir(directory)


def producer_snapshot_offsets(directory: str) -> list[int]:
    """The offsets of the producer snapshots (``<offset>.snapshot``) of a partition folder."""
    return snapshot_offsets(directory)


def read_producer_snapshot(path: str) -> list[SnapshotEntry]:
    """The entries of a producer snapshot file; :class:`~embedlog.errors.CorruptionError` when
    it is corrupt, too large, missing or not a regular file."""
    entries = read_snapshot(path)
    if entries is None:
        raise CorruptionError("producer snapshot is missing", path=path)
    return entries
