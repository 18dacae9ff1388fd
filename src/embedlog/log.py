"""The log directory: topics, their partitions, the writer lock and recovery on open.

A :class:`Log` is what :func:`embedlog.open` returns. As the writer it holds the directory's
``flock`` for its lifetime, recovers every partition on open (validating everything after the
recovery point when the last close was not clean), and keeps Kafka's checkpoint files. Opened
``read_only=True`` it takes no lock, never modifies a byte, sees the writer's new records and
segments as they appear, and also opens a plain Kafka log directory (topics discovered from the
``<topic>-<partition>`` folder names).

A ``Log`` is safe to share between threads: appends to one partition are serialised by that
partition's lock; reads run concurrently.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import _io, checkpoint
from ._batch import record_batch
from ._platform import WriterLock
from .compaction import CompactionStats, Compactor
from .compaction.background import CleanerThread
from .config import TopicConfig
from .errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    LogClosedError,
    ReadOnlyError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicError,
    UsageError,
)
from .naming import parse_partition_dir, partition_dir_name, validate_topic
from .partition import Partition, SegmentInfo, now_ms
from .partitioner import partition_for_key, partitions_for_keys
from .records import Header, Record, RecordBatch, RecordMetadata, TopicPartition
from .segment import format as fmt
from .segment.codecs import Compression, compression_from_name

if TYPE_CHECKING:
    from .consumer import Consumer
    from .producer import Producer

__all__ = ["Durability", "Log", "open"]

Durability = Literal["none", "fsync"]

METADATA = "embedlog.json"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"


class _Topic:
    __slots__ = ("config", "name", "partitions")

    def __init__(self, name: str, config: TopicConfig, partitions: list[Partition]):
        self.name = name
        self.config = config
        self.partitions = partitions


class Log:
    """An open log directory. Use :func:`embedlog.open` to get one."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        durability: Durability = "none",
        create: bool = True,
        clock: Any = None,
    ) -> None:
        if durability not in ("none", "fsync"):
            raise InvalidConfigError(f"durability must be 'none' or 'fsync', not {durability!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.read_only = read_only
        self.durability: Durability = durability
        self.clock = clock or now_ms
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()  # one writer of the root checkpoint files
        self._topics: dict[str, _Topic] = {}
        self._closed = False
        self._writer_lock: WriterLock | None = None
        self._round_robin = itertools.count()
        self._create = create
        self._start_stamp: tuple[int, int, int] | None = None
        self._start_cache: dict[TopicPartition, int] = {}
        self._compactor: Compactor | None = None
        self._cleaner: CleanerThread | None = None
        self._open()

    # ------------------------------------------------------------------ open / close

    def _open(self) -> None:
        if not os.path.isdir(self.path) and (
            self.read_only or not self._create or not self._create_root()
        ):
            raise UsageError(f"no log directory at {self.path}")
        if os.path.islink(self.path):
            raise UsageError(f"{self.path} is a symlink; open the real directory")
        if self.read_only:
            self._load_topics()
            return
        self._writer_lock = WriterLock(self.path)
        self._writer_lock.acquire()
        try:
            clean_marker = os.path.join(self.path, CLEAN_SHUTDOWN)
            clean = os.path.exists(clean_marker)
            if clean:
                _io.unlink(clean_marker)
                _io.fsync_dir(self.path)
            self._load_topics()
            points = checkpoint.read_offsets(os.path.join(self.path, RECOVERY_POINT))
            starts = checkpoint.read_offsets(os.path.join(self.path, LOG_START))
            for topic in self._topics.values():
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    if not os.path.isdir(p.directory):
                        raise CorruptCheckpointError(
                            f"topic metadata lists {tp.topic}-{tp.partition}, whose folder is "
                            "missing", path=p.directory)
                    p.load(recovery_point=points.get(tp), start_offset=starts.get(tp, 0),
                           clean=clean)
        except BaseException:
            # The open's own error is what the caller must see; releasing what it left half
            # open may fail too (e.g. a segment whose index could not be opened), but the
            # writer lock must be released whatever happens.
            try:
                with contextlib.suppress(Exception):
                    self._close_partitions()
            finally:
                self._writer_lock.release()
            raise

    def _create_root(self) -> bool:
        parent = os.path.dirname(self.path)
        if not os.path.isdir(parent):
            return False
        _io.mkdir(self.path)
        _io.fsync_dir(parent)
        return True

    def _load_topics(self) -> None:
        meta = self._read_metadata()
        if meta is None:
            meta = self._discover_topics()
        for name, (count, config) in meta.items():
            if name in self._topics:
                continue
            parts = [self._partition(name, i, config) for i in range(count)]
            self._topics[name] = _Topic(name, config, parts)
        if self.read_only:
            starts = checkpoint.read_offsets(os.path.join(self.path, LOG_START))
            for topic in self._topics.values():
                for p in topic.partitions:
                    if not p.segments and os.path.isdir(p.directory):
                        tp = TopicPartition(topic.name, p.partition)
                        p.load(recovery_point=None, start_offset=starts.get(tp, 0), clean=True)

    def _read_metadata(self) -> dict[str, tuple[int, TopicConfig]] | None:
        path = os.path.join(self.path, METADATA)
        try:
            with builtins.open(path, "rb") as f:
                raw = f.read(_MAX_METADATA_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptCheckpointError(f"unreadable topic metadata: {exc}", path=path) from exc
        return parse_metadata(raw, path=path)

    def _discover_topics(self) -> dict[str, tuple[int, TopicConfig]]:
        """Topics of a plain Kafka directory, from its ``<topic>-<partition>`` folders."""
        found: dict[str, int] = {}
        for entry in os.scandir(self.path):
            parsed = parse_partition_dir(entry.name)
            if parsed and entry.is_dir(follow_symlinks=False):
                found[parsed[0]] = max(found.get(parsed[0], 0), parsed[1] + 1)
        return {name: (n, TopicConfig()) for name, n in sorted(found.items())}

    def _partition(self, topic: str, index: int, config: TopicConfig) -> Partition:
        return Partition(
            os.path.join(self.path, partition_dir_name(topic, index)),
            topic,
            index,
            config,
            writable=not self.read_only,
            fsync=self.durability == "fsync",
            clock=self.clock,
            on_start_offset=self._checkpoint_start_offsets,
            on_roll=self._checkpoint_recovery_points,
            start_offset_source=self._persisted_start_offset if self.read_only else None,
        )

    def _persisted_start_offset(self, p: Partition) -> int | None:
        """Read-only views: the writer's ``log-start-offset-checkpoint`` entry for ``p``, re-read
        only when the file changed (so a ``delete_records`` inside a segment is seen)."""
        path = os.path.join(self.path, LOG_START)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._start_stamp:
            try:
                self._start_cache = checkpoint.read_offsets(path)
            except CorruptCheckpointError:
                return None  # being replaced right now, or damaged: keep what we know
            self._start_stamp = stamp
        return self._start_cache.get(TopicPartition(p.topic, p.partition))

    def _write_metadata(self) -> None:
        doc = {
            "version": 1,
            "topics": {
                t.name: {"partitions": len(t.partitions), "config": _non_default(t.config)}
                for t in list(self._topics.values())
            },
        }
        _io.write_atomic(
            os.path.join(self.path, METADATA), json.dumps(doc, indent=1, sort_keys=True).encode()
        )

    def _checkpoint_start_offsets(self, _: Partition | None = None) -> None:
        with self._checkpoint_lock:
            self._write_start_offsets()

    def _write_start_offsets(self) -> None:
        offsets = {
            TopicPartition(t.name, p.partition): p.start_offset
            for t in list(self._topics.values())
            for p in t.partitions
            if p.start_offset > 0
        }
        checkpoint.write_offsets(os.path.join(self.path, LOG_START), offsets)

    def _checkpoint_recovery_points(self, _: Partition | None = None, *, final: bool = False
                                    ) -> None:
        with self._checkpoint_lock:
            self._write_recovery_points(final)

    def _write_recovery_points(self, final: bool) -> None:
        offsets = {
            TopicPartition(t.name, p.partition): (
                p.end_offset if final else p.active.base_offset
            )
            for t in list(self._topics.values())
            for p in t.partitions
            if p.segments
        }
        checkpoint.write_offsets(os.path.join(self.path, RECOVERY_POINT), offsets)

    def close(self) -> None:
        """Flush, trim indexes, write the checkpoints and the clean-shutdown marker, release the
        lock. Idempotent."""
        self.stop_cleaner()
        if self._compactor is not None:  # a compaction running in another thread stops first
            self._compactor.stop(p for t in list(self._topics.values()) for p in t.partitions)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if not self.read_only and not self._poisoned():
                    for t in self._topics.values():
                        for p in t.partitions:
                            p.flush()
                    self._checkpoint_recovery_points(final=True)
                    self._close_partitions()
                    marker = _io.open_file(
                        os.path.join(self.path, CLEAN_SHUTDOWN), os.O_WRONLY | os.O_CREAT
                    )
                    _io.fsync(marker)
                    _io.close(marker)
                    _io.fsync_dir(self.path)
                else:
                    self._close_partitions()
            finally:
                if self._writer_lock is not None:
                    self._writer_lock.release()

    def _poisoned(self) -> bool:
        return any(p.poisoned is not None for t in self._topics.values() for p in t.partitions)

    def _close_partitions(self) -> None:
        for t in self._topics.values():
            for p in t.partitions:
                p.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the log at {self.path} is closed")

    def _check_writer(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError(f"the log at {self.path} was opened read-only")

    # ------------------------------------------------------------------ topics

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None
    ) -> None:
        """Create ``name`` with ``partitions`` partitions and Kafka-named ``config``."""
        validate_topic(name)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidConfigError(f"partitions must be a positive int, not {partitions!r}")
        cfg = TopicConfig.from_kafka(config)
        with self._lock:
            self._check_writer()
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            for i in range(partitions):
                d = os.path.join(self.path, partition_dir_name(name, i))
                if os.path.lexists(d):
                    raise TopicExistsError(f"{d} already exists")
            parts = [self._partition(name, i, cfg) for i in range(partitions)]
            for p in parts:
                _io.mkdir(p.directory)
            _io.fsync_dir(self.path)
            for p in parts:
                p.load(recovery_point=None, start_offset=0, clean=True)
            self._topics[name] = _Topic(name, cfg, parts)
            self._write_metadata()

    def delete_topic(self, name: str) -> None:
        """Remove a topic and all its files."""
        with self._lock:
            self._check_writer()
            topic = self._topic(name)
            del self._topics[name]
            self._write_metadata()
            self._compaction().forget(name, topic.partitions)
            for p in topic.partitions:
                p.close()
                for entry in os.listdir(p.directory):
                    _io.unlink(os.path.join(p.directory, entry))
                _io.rmdir(p.directory)
            _io.fsync_dir(self.path)
            self._checkpoint_start_offsets()

    def alter_topic(self, name: str, config: Mapping[str, Any]) -> TopicConfig:
        """Change some of a topic's settings (Kafka names); returns the new config."""
        with self._lock:
            self._check_writer()
            topic = self._topic(name)
            topic.config = topic.config.merged(config)
            for p in topic.partitions:
                p.config = topic.config
            self._write_metadata()
            return topic.config

    def topics(self) -> list[str]:
        """Topic names, sorted."""
        with self._lock:
            self._check_open()
            if self.read_only:
                self._load_topics()
            return sorted(self._topics)

    def topic_config(self, topic: str) -> TopicConfig:
        return self._topic(topic).config

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic).partitions)

    def _topic(self, name: str) -> _Topic:
        self._check_open()
        topic = self._topics.get(name)
        if topic is None and self.read_only:
            validate_topic(name)
            with self._lock:
                self._load_topics()
            topic = self._topics.get(name)
        if topic is None:
            validate_topic(name)
            raise UnknownTopicError(f"unknown topic {name!r} in {self.path}")
        return topic

    def _partition_of(self, topic: str, partition: int) -> Partition:
        parts = self._topic(topic).partitions
        if not isinstance(partition, int) or not 0 <= partition < len(parts):
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{len(parts) - 1}, not {partition!r}"
            )
        return parts[partition]

    # ------------------------------------------------------------------ appending

    def append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> RecordMetadata:
        """Append one record; returns where it landed. Durable on return in ``fsync`` mode."""
        self._check_writer()
        t = self._topic(topic)
        p = self._choose(t, key, partition)
        ts = self.clock() if timestamp is None else timestamp
        header = self._write(
            t, p, [value], [key], [headers] if headers else None, ts, None
        )
        return RecordMetadata(topic, p.partition, header.base_offset, header.max_timestamp
                              if header.timestamp_type == 1 else ts)

    def append_batch(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
        timestamps: int | Sequence[int] | None = None,
        partition: int | None = None,
        compression: str | None = None,
    ) -> list[RecordMetadata]:
        """Append many records in one call, one v2 batch per partition touched.

        Returns one :class:`RecordMetadata` per batch written: the partition, the offset of the
        batch's first record (the batch's records have consecutive offsets from there) and the
        batch timestamp. With keys and no partition, records go where Kafka's default
        partitioner puts them.
        """
        self._check_writer()
        t = self._topic(topic)
        n = len(values)
        if keys is not None and len(keys) != n:
            raise UsageError("keys and values have different lengths")
        if headers is not None and len(headers) != n:
            raise UsageError("headers and values have different lengths")
        if not n:
            return []
        ts: int | Sequence[int] = self.clock() if timestamps is None else timestamps
        if not isinstance(ts, int) and len(ts) != n:
            raise UsageError("timestamps and values have different lengths")
        codec = self._codec(t, compression)
        if partition is not None or keys is None or len(t.partitions) == 1:
            p = self._choose(t, None, partition) if partition is not None or keys is None else (
                t.partitions[0])
            return self._write_split(t, p, values, keys, headers, ts, codec)
        return self._append_keyed(t, values, keys, headers, ts, codec)

    def _append_keyed(self, t: _Topic, values: Sequence[bytes | None],
                      keys: Sequence[bytes | None], headers: Sequence[Sequence[Header] | None]
                      | None, ts: int | Sequence[int], codec: Compression
                      ) -> list[RecordMetadata]:
        count = len(t.partitions)
        rr = next(self._round_robin)
        # Keyless records (allowed outside compacted topics) go together to one partition.
        targets = np.full(len(keys), rr % count, np.int64)
        keyed = [i for i, k in enumerate(keys) if k is not None]
        if keyed:
            present = [k for k in keys if k is not None]
            targets[keyed] = partitions_for_keys(present, count)
        order = np.argsort(targets, kind="stable")
        bounds = np.searchsorted(targets[order], np.arange(count + 1))
        out = []
        for part in range(count):
            idx = order[bounds[part] : bounds[part + 1]].tolist()
            if not idx:
                continue
            out += self._write_split(
                t,
                t.partitions[part],
                [values[i] for i in idx],
                [keys[i] for i in idx],
                [headers[i] for i in idx] if headers is not None else None,
                ts if isinstance(ts, int) else [ts[i] for i in idx],
                codec,
            )
        return out

    def _write_split(self, t: _Topic, p: Partition, values: Sequence[bytes | None],
                     keys: Sequence[bytes | None] | None,
                     headers: Sequence[Sequence[Header] | None] | None,
                     ts: int | Sequence[int], codec: Compression) -> list[RecordMetadata]:
        try:
            header = self._write(t, p, values, keys, headers, ts, codec)
        except RecordTooLargeError:
            if len(values) < 2:
                raise
            half = len(values) // 2
            out: list[RecordMetadata] = []
            for lo, hi in ((0, half), (half, len(values))):
                out += self._write_split(
                    t, p, values[lo:hi], _cut(keys, lo, hi), _cut(headers, lo, hi),
                    ts if isinstance(ts, int) else ts[lo:hi], codec,
                )
            return out
        return [RecordMetadata(t.name, p.partition, header.base_offset, header.max_timestamp)]

    def _write(self, t: _Topic, p: Partition, values: Sequence[bytes | None],
               keys: Sequence[bytes | None] | None,
               headers: Sequence[Sequence[Header] | None] | None,
               ts: int | Sequence[int], codec: Compression | None) -> fmt.BatchHeader:
        if codec is None:
            codec = self._codec(t, None)
        if t.config.compact and (keys is None or any(k is None for k in keys)):
            raise UsageError(
                f"topic {t.name!r} is compacted (cleanup.policy={t.config.cleanup_policy}): "
                "every record needs a key"
            )
        log_append = t.config.message_timestamp_type == "LogAppendTime"
        batch = bytearray(
            fmt.encode_batch(
                values,
                keys=keys,
                headers=headers,
                timestamps=ts,
                compression=codec,
                timestamp_type=1 if log_append else 0,
                max_timestamp=self.clock() if log_append else None,
            )
        )
        return p.append_encoded(batch)

    def _append_encoded(self, topic: str, partition: int, batch: bytearray) -> fmt.BatchHeader:
        """Append a batch encoded by the caller (producers, the Spark writer). Its base offset
        is assigned here; its CRC is not recomputed (the base offset is outside the CRC)."""
        self._check_writer()
        return self._partition_of(topic, partition).append_encoded(batch)

    def _choose(self, t: _Topic, key: bytes | None, partition: int | None) -> Partition:
        if partition is not None:
            return self._partition_of(t.name, partition)
        count = len(t.partitions)
        if key is not None:
            return t.partitions[partition_for_key(key, count)]
        return t.partitions[next(self._round_robin) % count]

    def _codec(self, t: _Topic, name: str | None) -> Compression:
        configured = t.config.compression_type
        if configured != "producer":
            return compression_from_name(configured)
        return compression_from_name(name) if name is not None else Compression.NONE

    def flush(self) -> None:
        """fsync every partition's unflushed appends."""
        self._check_writer()
        for t in list(self._topics.values()):
            for p in t.partitions:
                p.flush()

    def roll(self, topic: str, partition: int) -> None:
        """Seal the active segment of a partition now."""
        self._check_writer()
        self._partition_of(topic, partition).roll()

    # ------------------------------------------------------------------ reading

    def read(
        self,
        topic: str,
        partition: int,
        offset: int | None = None,
        *,
        max_records: int | None = None,
        end_offset: int | None = None,
    ) -> Iterator[Record]:
        """Records from ``offset`` (default: the log start) in offset order.

        Raises :class:`~embedlog.errors.OffsetOutOfRangeError` for an offset below the log start
        or above the log end. Offsets may have gaps (compaction, control batches).
        """
        p = self._partition_of(topic, partition)
        return p.read(p.start_offset if offset is None else offset, end_offset, max_records)

    def read_batches(
        self, topic: str, partition: int, start_offset: int | None = None,
        end_offset: int | None = None, *, control: bool = False,
    ) -> Iterator[RecordBatch]:
        """Columnar read: one :class:`~embedlog.RecordBatch` per data batch, its records
        restricted to ``[start_offset, end_offset)``; with ``control``, transaction markers'
        batches too (``is_control``)."""
        p = self._partition_of(topic, partition)
        found = p.batches(p.start_offset if start_offset is None else start_offset, end_offset,
                          control=control)
        return (record_batch(topic, partition, header, records) for header, records in found)

    def read_arrow(self, topics: str | Sequence[str] | None = None, **options: Any) -> Any:
        """A ``pyarrow.RecordBatchReader``: see :func:`embedlog.arrow.read_arrow`."""
        from .arrow import read_arrow
        return read_arrow(self, topics, **options)

    def read_table(self, topics: str | Sequence[str] | None = None, **options: Any) -> Any:
        """A ``pyarrow.Table``: see :func:`embedlog.arrow.read_table`."""
        from .arrow import read_table
        return read_table(self, topics, **options)

    def start_offset(self, topic: str, partition: int) -> int:
        p = self._partition_of(topic, partition)
        p.refresh()
        return p.start_offset

    def end_offset(self, topic: str, partition: int) -> int:
        p = self._partition_of(topic, partition)
        p.refresh()
        return p.end_offset

    def offsets_for_times(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= ``timestamp_ms``, or ``None``."""
        return self._partition_of(topic, partition).offset_for_timestamp(timestamp_ms)

    def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        p = self._partition_of(topic, partition)
        p.refresh()
        return p.segment_infos()

    # ------------------------------------------------------------------ deletion

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Make every record below ``before_offset`` unreadable and free whole segments below
        it (Kafka's DeleteRecords). Returns the new log start offset."""
        self._check_writer()
        return self._partition_of(topic, partition).delete_records(before_offset)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply ``retention.ms`` and ``retention.bytes`` to every partition; returns the number
        of segments deleted."""
        self._check_writer()
        return sum(
            p.enforce_retention(now_ms) for t in list(self._topics.values()) for p in t.partitions
        )

    # ------------------------------------------------------------------ compaction

    def _compaction(self) -> Compactor:
        with self._lock:
            if self._compactor is None:
                self._compactor = Compactor(self.path, self.clock)
            return self._compactor

    def compact(
        self, topic: str, *, now_ms: int | None = None, map_bytes: int | None = None
    ) -> CompactionStats:
        """Compact every partition of a ``cleanup.policy=compact`` topic now, whatever its
        dirty ratio: for each key only the latest record stays (offsets unchanged), tombstones
        go ``delete.retention.ms`` after a pass first kept them, and small segments are merged.
        The active segment and records younger than ``min.compaction.lag.ms`` are left alone.

        ``now_ms`` (default: the log's clock) is the time tombstone horizons are measured with;
        ``map_bytes`` bounds the key map of a pass (default 128 MiB; a dirty section with more
        keys than fit is cleaned in several passes)."""
        self._check_writer()
        t = self._topic(topic)
        if not t.config.compact:
            raise UsageError(
                f"topic {topic!r} has cleanup.policy={t.config.cleanup_policy}; "
                "only compacted topics can be compacted"
            )
        compactor = self._compaction()
        total = CompactionStats()
        for p in t.partitions:
            with p.poison_on_error():
                total += compactor.clean(p, now=now_ms, map_bytes=map_bytes)
        return total

    def start_cleaner(self, interval_s: float = 15.0, *, map_bytes: int | None = None) -> None:
        """Compact in a background thread: every ``interval_s`` seconds, one pass over each
        compacted partition whose dirty ratio exceeds ``min.cleanable.dirty.ratio`` or whose
        oldest uncompacted record is older than ``max.compaction.lag.ms``. Stopped by
        :meth:`stop_cleaner` and :meth:`close`."""
        self._check_writer()
        with self._lock:
            if self._cleaner is not None:
                return
            compactor = self._compaction()
            if map_bytes is not None:
                compactor.map_bytes = map_bytes

            def partitions() -> list[Partition]:
                return [p for t in list(self._topics.values()) for p in t.partitions
                        if t.config.compact]

            self._cleaner = CleanerThread(compactor, partitions, interval_s)
            self._cleaner.start()

    def stop_cleaner(self) -> None:
        """Stop the background cleaner (interrupting a pass between two batches) and wait."""
        with self._lock:
            cleaner, self._cleaner = self._cleaner, None
        if cleaner is not None:
            cleaner.stop()

    # ------------------------------------------------------------------ clients

    def producer(self, **kwargs: Any) -> Producer:
        """A :class:`~embedlog.producer.Producer` writing to this log (keyword arguments as
        documented there)."""
        from .producer import Producer

        return Producer(self, **kwargs)

    def consumer(self, *topics: str, **kwargs: Any) -> Consumer:
        """A :class:`~embedlog.consumer.Consumer` of this log, subscribed to ``topics``
        (keyword arguments as documented there)."""
        from .consumer import Consumer

        return Consumer(self, *topics, **kwargs)

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"<embedlog.Log {self.path!r} {mode}{' closed' if self._closed else ''}>"


def _cut(seq: Sequence[Any] | None, lo: int, hi: int) -> Any:
    return None if seq is None else seq[lo:hi]


_MAX_METADATA_BYTES = 64 * 1024 * 1024
_MAX_PARTITIONS = 1 << 20


def parse_metadata(raw: bytes, *, path: str | None = None) -> dict[str, tuple[int, TopicConfig]]:
    """``{topic: (partition count, config)}`` from the bytes of ``embedlog.json``.

    Layout: ``{"version": 1, "topics": {"<name>": {"partitions": <int>, "config": {<Kafka
    name>: <value>}}}}``. Anything else -- bad JSON, wrong types, an invalid topic name, a
    partition count outside ``1..2**20``, a config Kafka would reject -- raises
    :class:`~embedlog.errors.CorruptCheckpointError`.
    """

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"topic metadata: {msg}", path=path)

    if len(raw) > _MAX_METADATA_BYTES:
        raise bad("file is too large")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise bad(f"unreadable: {exc}") from None
    topics = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(topics, dict):
        raise bad("unknown layout")
    out: dict[str, tuple[int, TopicConfig]] = {}
    for name, info in topics.items():
        try:
            validate_topic(name)
        except UsageError as exc:
            raise bad(str(exc)) from None
        count = info.get("partitions") if isinstance(info, dict) else None
        config = info.get("config", {}) if isinstance(info, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or not (
                0 < count <= _MAX_PARTITIONS):
            raise bad(f"topic {name!r} has an invalid partition count {count!r}")
        if not isinstance(config, dict):
            raise bad(f"topic {name!r} has a config that is not an object")
        try:
            out[name] = (count, TopicConfig.from_kafka(config))
        except (UsageError, OverflowError) as exc:
            raise bad(f"topic {name!r}: {exc}") from None
    return out


def _non_default(config: TopicConfig) -> dict[str, Any]:
    default = TopicConfig().to_kafka()
    return {k: v for k, v in config.to_kafka().items() if default[k] != v}


def open(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    durability: Durability = "none",
    create: bool = True,
) -> Log:
    """Open (creating it if needed) the log directory at ``path``.

    ``durability="fsync"`` makes every append return only after its data is on disk (concurrent
    appenders share one fsync); ``"none"`` hands data to the OS page cache and leaves syncing to
    :meth:`Log.flush` and :meth:`Log.close`. Only one process may open a directory for writing;
    any number may open it ``read_only=True``.
    """
    return Log(path, read_only=read_only, durability=durability, create=create)
