"""The log directory: topics, their partitions, the writer lock and recovery on open.

A :class:`Log` is what :func:`embedlog.open` returns. As the writer it holds the directory's
``flock`` for its lifetime, recovers every partition on open (validating everything after the
recovery point when the last close was not clean), and keeps Kafka's checkpoint files. Opened
``read_only=True`` it takes no lock, never modifies a byte, sees the writer's new records and
segments as they appear, and also opens a plain Kafka log directory (topics discovered from the
``<topic>-<partition>`` folder names).

The folder's lifecycle (writer lock, recovery on open, close, forks, finding a topic's
partition, the transaction coordinator) is :class:`~embedlog.log_folder.LogFolder`'s; ``Log``
adds the public calls (hanging transactions: :mod:`~embedlog.txn_admin`) on top.

A ``Log`` is safe to share between threads: appends to one partition are serialised by that
partition's lock; reads run concurrently. It is not usable across ``fork()``
(:mod:`embedlog._fork`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, TypeVar

from . import _validate, partition_read, producer_state_store
from ._batch import record_batch
from ._client_api import Durability
from .batch_writer import choose_codec, spread, write_records, write_unchecked
from .compaction import CompactionStats, Compactor
from .compaction.background import CleanerThread
from .config import TopicConfig
from .errors import UsageError
from .log_append import Appender
from .metadata import LOG_START, METADATA, RECOVERY_POINT, parse_metadata
from .naming import validate_topic
from .partition import Partition, SegmentInfo
from .partitioner import partition_for_key
from .reader import Decode
from .records import Header, Record, RecordBatch, RecordMetadata
from .segment import _native
from .segment import format as fmt
from .segment.codecs import Compression
from .tiering.upload import drop_below
from .tiering.upload import enforce_retention as tiered_retention
from .topics import Topic
from .txn_admin import TransactionAdmin
from .upkeep import Upkeep

R = TypeVar("R", bound=Sized)

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["LOG_START", "METADATA", "RECOVERY_POINT", "Durability", "Log", "open",
           "parse_metadata"]


class Log(TransactionAdmin):
    """An open log directory. Use :func:`embedlog.open` to get one."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        durability: Durability = "none",
        create: bool = True,
        clock: Any = None,
        upkeep: bool | Mapping[str, Any] = True,
        adopt: bool = False,
        remote_uri: str | None = None,
    ) -> None:
        super().__init__(path, read_only=read_only, durability=durability, create=create,
                         clock=clock, remote_uri=remote_uri)
        self._round_robin = itertools.count()  # keyless records' partition
        self._appender = Appender()
        self._compactor: Compactor | None = None
        self._cleaner: CleanerThread | None = None
        self._upkeep = Upkeep(upkeep, self._topics.healthy,
                              lambda *a: self._compaction().clean_round(*a),
                              writable=not read_only, clock=self.clock,
                              tier_round=self._tier_round)
        self._expirations(self._upkeep.config.transactional_id_expiration_ms,
                          self._upkeep.config.producer_id_expiration_ms)
        self._open(adopt)
        self._track_forks()
        self._upkeep.start()

    def close(self) -> None:
        """Stop upkeep and compaction; flush, trim indexes, write the checkpoints and the
        clean-shutdown marker, release the lock (:meth:`LogFolder.close
        <embedlog.log_folder.LogFolder.close>`). Idempotent. In a ``fork()`` child it only
        drops the child's descriptors."""
        if not self._inherited:
            self._upkeep.stop()
            self.stop_cleaner()
            if self._compactor is not None:  # a compaction running in another thread stops first
                self._compactor.stop(self._topics.partitions())
        super().close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ topics

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None
    ) -> None:
        """Create ``name`` with ``partitions`` partitions and Kafka-named ``config``."""
        validate_topic(name)
        partitions = _validate.config_count(partitions, "partitions")
        cfg = TopicConfig.from_kafka(_validate.config_mapping(config))
        with self._lock:
            self._check_writer()
            self._topics.create(name, partitions, cfg)

    def delete_topic(self, name: str) -> None:
        """Remove a topic, its files; its remote data first, with no tiering round running."""
        with self._lock, self._tiering.paused() if self._tiering else contextlib.nullcontext():
            self._check_writer()
            for p in self._topic(name).partitions:
                drop_below(p, None)
            topic = self._topics.remove(name)
            self._compaction().forget(name, topic.partitions)
            self._topics.delete_files(topic)

    def alter_topic(self, name: str, config: Mapping[str, Any]) -> TopicConfig:
        """Change some of a topic's settings (Kafka names); returns the new config."""
        _validate.config_mapping(config, required=True)
        with self._lock:
            self._check_writer()
            return self._topics.alter(self._topic(name), config)

    def topics(self) -> list[str]:
        """Topic names, sorted."""
        with self._lock:
            self._check_open()
            if self.read_only:
                self._topics.load()
            return sorted(self._topics.by_name)

    def topic_config(self, topic: str) -> TopicConfig:
        return self._topic(topic).config

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic).partitions)

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
        """Append one record; returns where it landed. Durable on return in ``fsync`` mode,
        where concurrent appends share a batch and an fsync (:mod:`embedlog.log_append`)."""
        self._check_writer()
        value, key, headers = _validate.record(value, key, headers)
        t = self._topic(topic)
        p = self._choose(t, key, partition)
        ts = self.clock() if timestamp is None else _validate.timestamp_ms(timestamp)
        return self._appender.append(p, value, key, headers, ts)

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
        if headers is None and compression is None and _native.CORE is not None and (
                values.__class__ is list or values.__class__ is tuple):
            done = self._append_unchecked(t, values, keys, timestamps, partition)
            if done is not None:
                return done
        values, keys, headers = _validate.batch_args(values, keys, headers)
        n = len(values)
        if not n:
            return []
        ts = self.clock() if timestamps is None else _validate.timestamps_ms(timestamps, n)
        codec = choose_codec(t.config, compression)
        if partition is not None or keys is None or len(t.partitions) == 1:
            p = self._choose(t, None, partition) if partition is not None or keys is None else (
                t.partitions[0])
            written = write_records(p, values, keys, headers, ts, codec=codec)
            return [RecordMetadata(t.name, p.partition, h.base_offset, h.max_timestamp)
                    for h in written]
        out = []
        keyless = next(self._round_robin) % len(t.partitions)
        for part, idx in spread(keys, len(t.partitions), keyless):
            written = write_records(
                t.partitions[part],
                [values[i] for i in idx],
                [keys[i] for i in idx],
                [headers[i] for i in idx] if headers is not None else None,
                ts if isinstance(ts, int) else [ts[i] for i in idx],
                codec=codec,
            )
            out += [RecordMetadata(t.name, part, h.base_offset, h.max_timestamp) for h in written]
        return out

    def _append_unchecked(self, t: Topic, values: Sequence[Any], keys: object,
                          timestamps: object, partition: object) -> list[RecordMetadata] | None:
        """``append_batch``'s common case -- one target partition, no headers, uncompressed --
        with its values, keys and timestamps checked by the encoder as it reads them
        (:func:`~embedlog.batch_writer.write_unchecked`). None, with nothing written, when it
        is not that case: the caller checks every argument in order and raises what it finds,
        or writes through the general path."""
        parts, n = t.partitions, len(values)
        if partition is None and keys is not None and len(parts) == 1:
            partition = 0  # (keyless records go round-robin, keyed ones spread)
        if type(partition) is not int or not 0 <= partition < len(parts) or not n:
            return None
        if keys is not None and not ((type(keys) is list or type(keys) is tuple)
                                     and len(keys) == n):
            return None
        codec = choose_codec(t.config, None)
        if codec is not Compression.NONE:
            return None
        written = write_unchecked(parts[partition], values, keys,
                                  self.clock() if timestamps is None else timestamps, codec=codec)
        if written is None:
            return None
        return [RecordMetadata(t.name, partition, h.base_offset, h.max_timestamp)
                for h in written]

    def _append_encoded(self, topic: str, partition: int, batch: bytearray) -> fmt.BatchHeader:
        """Append a batch encoded by the caller (producers, the Spark writer). Its base offset
        is assigned here; its CRC is not recomputed (the base offset is outside the CRC)."""
        self._check_writer()
        return self._partition_of(topic, partition).append_encoded(batch)

    def _choose(self, t: Topic, key: bytes | None, partition: int | None) -> Partition:
        if partition is not None:
            return self._partition_of(t.name, partition)
        count = len(t.partitions)
        if key is not None:
            return t.partitions[partition_for_key(key, count)]
        return t.partitions[next(self._round_robin) % count]

    def flush(self) -> None:
        """fsync every partition's unflushed appends."""
        self._check_writer()
        for p in self._topics.healthy():
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
        """Records from ``offset`` (default: the log start when the scan begins, even if
        retention moved it meanwhile) in offset order.

        Raises :class:`~embedlog.errors.OffsetOutOfRangeError` for an offset below the log start
        or above the log end. Offsets may have gaps (compaction, control batches).
        """
        p = self._partition_of(topic, partition)
        offset, end_offset, max_records = _validate.read_range(offset, end_offset, max_records)
        return partition_read.read(p, offset, end_offset, max_records)

    def read_batches(
        self, topic: str, partition: int, start_offset: int | None = None,
        end_offset: int | None = None, *, control: bool = False,
    ) -> Iterator[RecordBatch]:
        """Columnar read: one :class:`~embedlog.RecordBatch` per data batch, its records
        restricted to ``[start_offset, end_offset)``; with ``control``, transaction markers'
        batches too (``is_control``)."""
        p = self._partition_of(topic, partition)
        start_offset, end_offset, _ = _validate.read_range(start_offset, end_offset, None)
        found = p.batches(start_offset, end_offset, control=control)
        return (record_batch(topic, partition, header, records) for header, records in found)

    def decoded_batches(
        self, topic: str, partition: int, start_offset: int, end_offset: int,
        decode: Decode[R],
    ) -> Iterator[tuple[fmt.BatchHeader, R]]:
        """:meth:`read_batches` for the Arrow export: each stored data batch in ``[start_offset,
        end_offset)`` made into records by ``decode`` (:data:`embedlog.reader.Decode`), which
        appends them to the Arrow columns being built without a ``RecordBatch`` per batch."""
        p = self._partition_of(topic, partition)
        start, end, _ = _validate.read_range(start_offset, end_offset, None)
        return partition_read.decoded(p, start, end, False, None, decode)

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
        p = self._partition_of(topic, partition)
        return p.offset_for_timestamp(_validate.timestamp_ms(timestamp_ms, "timestamp_ms"))

    def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        p = self._partition_of(topic, partition)
        p.refresh()
        return p.segment_infos()

    # ------------------------------------------------------------------ deletion

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Records below ``before_offset`` unreadable, whole segments below it freed; returns the
        new log start (Kafka's DeleteRecords: cleanup.policy must include ``delete``)."""
        self._check_writer()
        p = self._partition_of(topic, partition)
        start = p.delete_records(_validate.offset(before_offset, "before_offset"))
        drop_below(p, start)  # a tiered partition: the remote segments below it go too
        return start

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply ``retention.ms`` and ``retention.bytes`` to every partition; returns the number
        of segments deleted."""
        self._check_writer()
        now_ms = _validate.optional(_validate.timestamp_ms, now_ms, "now_ms")
        return sum(tiered_retention(p, p.clock() if now_ms is None else now_ms)
                   for p in self._topics.healthy())

    def _tier_round(self, partitions: list[Partition], now: int
                    ) -> tuple[int, dict[str, int]]:
        """One tiering round (:mod:`embedlog.tiering`): nothing when the log has no remote."""
        if self._tiering is None:
            return 0, {}
        return self._tiering.run(partitions, now)

    @property
    def upkeep(self) -> Upkeep:
        """Retention and the cleaner on their own (:mod:`embedlog.upkeep`)."""
        return self._upkeep
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
        now_ms, map_bytes = _validate.compact_args(now_ms, map_bytes)
        if not t.config.compact:
            raise UsageError(
                f"topic {topic!r} has cleanup.policy={t.config.cleanup_policy}; "
                "only compacted topics can be compacted"
            )
        compactor = self._compaction()
        total = CompactionStats()
        for p in t.partitions:
            if p.damage is not None:
                continue  # quarantined: never rewritten before it is salvaged
            with p.poison_on_error():
                total += compactor.clean(p, now=now_ms, map_bytes=map_bytes)
        return total

    def start_cleaner(self, interval_s: float = 15.0, *, map_bytes: int | None = None) -> None:
        """A cleaner thread of its own, every ``interval_s`` seconds (the writer's upkeep already
        runs one every ``log.cleaner.backoff.ms``): one pass over each compacted partition that
        is due (``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``). Stopped by
        :meth:`stop_cleaner` and :meth:`close`."""
        self._check_writer()
        interval_s, map_bytes = _validate.cleaner_args(interval_s, map_bytes)
        with self._lock:
            if self._cleaner is not None:
                return
            compactor = self._compaction()
            if map_bytes is not None:
                compactor.map_bytes = map_bytes

            def partitions() -> list[Partition]:
                return [p for p in self._topics.healthy() if p.config.compact]

            self._cleaner = CleanerThread(compactor, partitions, interval_s)
            self._cleaner.start()

    def stop_cleaner(self) -> None:
        """Stop the background cleaner (interrupting a pass between two batches) and wait."""
        with self._lock:
            cleaner, self._cleaner = self._cleaner, None
        if cleaner is not None:
            cleaner.stop()

    # ------------------------------------------------------------------ clients

    def producer(self, **kwargs: Any) -> Any:
        """A :class:`~embedlog.producer.Producer` writing to this log (keyword arguments as
        documented there); with ``transactional_id=``, a
        :class:`~embedlog.txn_producer.TransactionalProducer`."""
        self._check_open()
        if "transactional_id" in kwargs:
            from .txn_producer import TransactionalProducer

            self._check_writer()
            return TransactionalProducer(self, **kwargs)
        from .producer import Producer

        return Producer(self, **kwargs)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """Where ``read_committed`` readers stop: the first offset of the oldest transaction
        without a marker (at least the log start, as in Kafka), else the end offset."""
        p = self._partition_of(topic, partition)
        p.refresh()
        return producer_state_store.last_stable_offset(p)

    def consumer(self, *topics: str, **kwargs: Any) -> Consumer:
        """A :class:`~embedlog.consumer.Consumer` of this log, subscribed to ``topics``
        (keyword arguments as documented there)."""
        self._check_open()
        from .consumer import Consumer

        return Consumer(self, *topics, **kwargs)


def open(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    durability: Durability = "none",
    create: bool = True,
    upkeep: bool | Mapping[str, Any] = True,
    adopt: bool = False,
    remote_uri: str | None = None,
) -> Log:
    """Open (creating it if needed) the log directory at ``path``.

    ``durability="fsync"`` makes every append return only after its data is on disk (concurrent
    appenders share one fsync); ``"none"`` hands data to the OS page cache and leaves syncing to
    :meth:`Log.flush` and :meth:`Log.close`. Only one process may open a directory for writing;
    any number may open it ``read_only=True``.

    A writer runs retention and the cleaner on its own (:mod:`embedlog.upkeep`; ``upkeep``:
    Kafka's broker settings, or ``False``). A folder that is not a log raises ``NotALogError``
    (:mod:`embedlog.folder_check`); writing into a Kafka directory needs ``adopt=True``.

    ``remote_uri`` (``s3://bucket/prefix``, ``file:///path``...) makes the folder tiered
    (:mod:`embedlog.tiering`): topics with ``remote.storage.enable=true`` copy their sealed
    segments there. The folder records it for readers; a writer must be given it again.
    """
    return Log(path, read_only=read_only, durability=durability, create=create, upkeep=upkeep,
               adopt=adopt, remote_uri=remote_uri)
