"""The producer: ``KafkaProducer``'s shape over an embedded :class:`~embedlog.Log`.

::

    with log.producer(linger_ms=5) as producer:
        meta = producer.send("events", b"payload", key=b"user-1")
        meta.partition, meta.offset          # known now: no futures

**Offsets at send time.** ``send()`` adds the record to an *open batch* of its partition (plain
Python lists of values, keys, timestamps and headers) and returns its
:class:`~embedlog.RecordMetadata` at once, offset included. The open batch reserves the
partition's tail: its base offset is the partition's end offset when it opened, and it is
registered as the partition's ``pending`` batch, so anything else that writes to the partition
(``Log.append``, another producer, ``Log.flush``/``close``) first writes it, under the partition
lock, before appending its own records. Offsets handed out can therefore never be given to
anyone else, and no lock is held between two ``send()`` calls.

An open batch is encoded by :func:`~embedlog.segment.format.encode_batch` into one v2 batch and
appended when it reaches ``batch_size`` bytes or ``max_batch_records`` records, when ``linger_ms``
has passed since its first record (a background thread), on :meth:`Producer.flush` /
:meth:`Producer.close`, or when anything else touches the partition.

**Trade-off.** A record becomes readable (and, with ``durability="none"``, reaches the page cache)
only when its batch is written: within ``linger_ms`` (at least 1 ms, plus the wait for Python's
interpreter lock, about 5 ms in a busy loop) of the batch's first record. That is what makes a
``send()`` loop fast; consumers in the same process see records after that delay, and
:meth:`Producer.flush` makes them visible immediately. A batch that fails to be written (an I/O
error) was already acknowledged record by record: the error is raised by the producer's next
call (Kafka reports it through the futures).

**Durability** ``"fsync"`` acknowledges a record only once it is on disk: ``send()`` writes its
record at once and waits for the partition's group commit, so concurrent senders share fsyncs.
The log's own ``durability`` is a floor.

**Idempotence.** ``idempotent=True`` allocates a producer id (a counter in
``<log>/embedlog.producer-ids``, replaced atomically), epoch 0, and numbers the records of each
partition from 0; the id, epoch and base sequence go into the batch header fields Kafka uses. The
partition's append path rejects out-of-order sequences and recognises a batch re-submitted with
the same sequences (a retry) as a duplicate: it is not written twice, and that holds across a
reopen (see :mod:`embedlog.producer_state`).

**Partitions.** An explicit ``partition`` wins; then a custom ``partitioner`` (kafka-python's
signature ``partitioner(key_bytes, all_partitions, available_partitions) -> int``); then Kafka's
murmur2 of the key; keyless records stick to one partition until ``batch_size`` bytes went to
it, then move to the next (Kafka's sticky partitioner, KIP-794, in round-robin order).

A producer is thread-safe and several may share a ``Log``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from . import _io
from .errors import (
    CorruptCheckpointError,
    EmbedlogError,
    InvalidConfigError,
    LogClosedError,
    ReadOnlyError,
    RecordTooLargeError,
    UnknownTopicError,
    UsageError,
)
from .partition import Partition
from .partitioner import partition_for_key
from .producer_state import next_sequence
from .records import Header, RecordMetadata
from .segment import format as fmt
from .segment.codecs import Compression, compression_from_name

if TYPE_CHECKING:
    from .log import Durability, Log

__all__ = ["DEFAULT_BATCH_SIZE", "PRODUCER_IDS", "Producer"]

DEFAULT_BATCH_SIZE: Final = 256 * 1024
"""Bytes per batch (Kafka's default is 16 KiB; larger batches make a Python send loop faster)."""
PRODUCER_IDS: Final = "embedlog.producer-ids"
"""File in the log directory: ``embedlog-producer-ids 1`` then the next free producer id."""
_RECORD_OVERHEAD: Final = 32
"""Upper bound of a record's framing (length, attributes, deltas, key/value lengths, headers
count), so that the estimated size of a batch never falls short of the encoded one."""
_MIN_LINGER_S: Final = 0.001
_IDLE_EXIT_S: Final = 1.0
_KEY_CACHE: Final = 1 << 14
_new = tuple.__new__
_pid_lock = threading.Lock()


class _Topic:
    """What ``send()`` needs of a topic, cached per producer."""

    __slots__ = ("all_partitions", "count", "key_cache", "name", "partitions", "sticky",
                 "sticky_bytes")

    def __init__(self, name: str, partitions: list[Partition]) -> None:
        self.name = name
        self.partitions = partitions
        self.count = len(partitions)
        self.all_partitions = list(range(self.count))
        self.key_cache: dict[bytes, int] = {}
        self.sticky = 0
        self.sticky_bytes = 0


class _OpenBatch:
    """Records accumulated for one partition, offsets ``base ..`` already handed out. Registered
    as ``Partition.pending``; calling it writes the batch (under the partition lock)."""

    __slots__ = ("append_time", "base", "codec", "compact", "headers", "keys", "limit",
                 "log_append", "max_bytes", "opened", "partition", "producer", "size",
                 "timestamps", "values")

    def __init__(self, producer: Producer, p: Partition, limit: int) -> None:
        cfg = p.config
        self.producer = producer
        self.partition = p
        self.base = p.end_offset
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Sequence[Header] | None] | None = None
        self.size = fmt.HEADER_SIZE
        self.max_bytes = cfg.max_message_bytes
        self.limit = min(limit, self.max_bytes)
        self.compact = cfg.compact
        self.codec = _codec(cfg.compression_type, producer.compression)
        self.log_append = cfg.message_timestamp_type == "LogAppendTime"
        self.append_time = p.clock() if self.log_append else -1
        self.opened = time.monotonic()

    def __call__(self) -> None:
        self.producer._write(self)


def _codec(topic_setting: str, producer_setting: str | None) -> Compression:
    if topic_setting != "producer":
        return compression_from_name(topic_setting)
    return compression_from_name(producer_setting)


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(
        f"{what} must be bytes (or set a {what}_serializer), not {type(data).__name__}"
    )


def _headers_size(headers: Sequence[Header]) -> int:
    size = 0
    for item in headers:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"a header must be a (str, bytes | None) tuple, not {item!r}")
        k, v = item
        if v is not None and not isinstance(v, bytes):
            raise TypeError(f"header {k!r} value must be bytes or None, not {type(v).__name__}")
        size += 10 + len(k.encode()) + (len(v) if v is not None else 0)
    return size


class Producer:
    """Sends records to the topics of a writable :class:`~embedlog.Log`; see the module notes.

    Args:
        durability: ``"none"`` or ``"fsync"``; default: the log's.
        compression: ``None``/``"none"``, ``"gzip"``, ``"snappy"``, ``"lz4"`` or ``"zstd"`` (used
            when the topic's ``compression.type`` is ``producer``).
        linger_ms: how long a batch may wait for more records before it is written.
        batch_size: bytes at which a batch is written (capped by ``max.message.bytes``).
        max_batch_records: records at which a batch is written.
        idempotent: stamp producer id, epoch and sequence numbers (see the module notes).
        key_serializer, value_serializer: applied to non-``None`` keys and values.
        partitioner: ``f(key_bytes, all_partitions, available_partitions) -> int``.
    """

    def __init__(
        self,
        log: Log,
        *,
        durability: Durability | None = None,
        compression: str | None = None,
        linger_ms: float = 0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_records: int = 2000,
        idempotent: bool = False,
        key_serializer: Callable[[Any], bytes] | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        partitioner: Callable[[bytes | None, list[int], list[int]], int] | None = None,
    ) -> None:
        if log.closed:
            raise LogClosedError(f"the log at {log.path} is closed")
        if log.read_only:
            raise ReadOnlyError(f"the log at {log.path} was opened read-only; producers write")
        durability = log.durability if durability is None else durability
        if durability not in ("none", "fsync"):
            raise InvalidConfigError(f"durability must be 'none' or 'fsync', not {durability!r}")
        compression_from_name(compression)  # validate now
        if linger_ms < 0 or batch_size < 1 or max_batch_records < 1:
            raise InvalidConfigError("linger_ms must be >= 0, batch_size and "
                                     "max_batch_records >= 1")
        self.log = log
        self.durability: Durability = durability
        self.compression = compression
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.max_batch_records = max_batch_records
        self._fsync = durability == "fsync"
        self._linger_s = max(linger_ms / 1000, _MIN_LINGER_S)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner = partitioner
        self._clock = log.clock
        self._topics: dict[str, _Topic] = {}
        self._open: dict[Partition, _OpenBatch] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._cv = threading.Condition(threading.Lock())
        self._flusher: threading.Thread | None = None
        self._stopping = False
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[Partition, int] = {}
        if idempotent:
            self.producer_id = _allocate_producer_id(log)
            self.producer_epoch = 0

    # ------------------------------------------------------------------ sending

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """Queue one record (``value=None`` with a key is a tombstone) and return where it goes.

        The record is written with its batch (see the module notes); with ``durability="fsync"``
        it is on disk when this returns. ``timestamp`` is epoch ms (default: now).
        """
        if self._error is not None or self._closed:
            self._check()
        t = self._topics.get(topic)
        if t is None:
            t = self._topic(topic)
        if value is not None:
            if self._value_serializer is not None:
                value = self._value_serializer(value)
            if value.__class__ is not bytes:
                value = _as_bytes(value, "value")
            size = _RECORD_OVERHEAD + len(value)
        else:
            size = _RECORD_OVERHEAD
        if key is not None:
            if self._key_serializer is not None:
                key = self._key_serializer(key)
            if key.__class__ is not bytes:
                key = _as_bytes(key, "key")
            size += len(key)
        if headers:
            size += _headers_size(headers)
        if partition is None:
            if self._partitioner is not None:
                partition = self._custom_partition(t, key)
            elif key is None:
                partition = t.sticky
                t.sticky_bytes += size
                if t.sticky_bytes >= self.batch_size:
                    t.sticky = (partition + 1) % t.count
                    t.sticky_bytes = 0
            elif t.count == 1:
                partition = 0
            else:
                partition = t.key_cache.get(key)
                if partition is None:
                    partition = partition_for_key(key, t.count)
                    if len(t.key_cache) < _KEY_CACHE:
                        t.key_cache[key] = partition
        elif partition.__class__ is not int or not 0 <= partition < t.count:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{t.count - 1}, not {partition!r}"
            )
        p = t.partitions[partition]
        ts = self._clock() if timestamp is None else timestamp
        with p.lock:
            ob = self._open.get(p)
            if ob is None or p.pending is not ob:
                ob = self._open_batch(t, p)
            elif ob.size + size > ob.limit:
                p.drain_pending()
                ob = self._open_batch(t, p)
            if key is None and ob.compact:
                raise UsageError(f"topic {topic!r} is compacted: every record needs a key")
            if size + fmt.HEADER_SIZE > ob.max_bytes:
                raise RecordTooLargeError(
                    f"a record of about {size} bytes exceeds max.message.bytes={ob.max_bytes} "
                    f"of topic {topic!r}"
                )
            values = ob.values
            offset = ob.base + len(values)
            values.append(value)
            ob.keys.append(key)
            ob.timestamps.append(ts)
            if headers:
                if ob.headers is None:
                    ob.headers = [None] * len(ob.keys)
                    ob.headers[-1] = headers
                else:
                    ob.headers.append(headers)
            elif ob.headers is not None:
                ob.headers.append(None)
            ob.size += size
            if self._fsync or ob.size >= ob.limit or len(values) >= self.max_batch_records:
                p.drain_pending()
            if ob.log_append:
                ts = ob.append_time
        if self._fsync:
            if self._error is not None:
                self._check()
            p.sync()
        return _new(RecordMetadata, (topic, partition, offset, ts))  # type: ignore[no-any-return]

    def _custom_partition(self, t: _Topic, key: bytes | None) -> int:
        assert self._partitioner is not None
        chosen = self._partitioner(key, t.all_partitions, t.all_partitions)
        if chosen.__class__ is not int or not 0 <= chosen < t.count:
            raise UsageError(
                f"the partitioner returned {chosen!r} for topic {t.name!r} "
                f"(partitions 0..{t.count - 1})"
            )
        return chosen

    def _topic(self, name: str) -> _Topic:
        count = self.log.partition_count(name)
        t = _Topic(name, [self.log.partition(name, i) for i in range(count)])
        self._topics[name] = t
        return t

    def _open_batch(self, t: _Topic, p: Partition) -> _OpenBatch:
        """Open a batch at the partition's tail (caller holds ``p.lock``)."""
        if p.pending is not None:
            p.drain_pending()
        if not p.segments:  # the log was closed or the topic deleted
            self._topics.pop(t.name, None)
            self.log.partition(t.name, p.partition)
            raise UsageError(f"topic {t.name!r} was deleted and created again; send again")
        p.check_writable()
        ob = _OpenBatch(self, p, self.batch_size)
        p.pending = ob
        self._open[p] = ob
        if not self._fsync:
            with self._cv:
                if self._flusher is None:
                    self._flusher = threading.Thread(
                        target=self._linger_loop, name="embedlog-producer-linger", daemon=True
                    )
                    self._flusher.start()
                self._cv.notify()
        return ob

    def _write(self, ob: _OpenBatch) -> None:
        """Encode and append an open batch (called through ``Partition.drain_pending``, so under
        the partition lock with ``pending`` already cleared). Errors are kept for the next
        call of this producer rather than raised into whoever triggered the write."""
        p = ob.partition
        if self._open.get(p) is ob:
            del self._open[p]
        if not ob.values:
            return
        try:
            self._append(ob, 0, len(ob.values))
        except EmbedlogError as exc:
            self._error = exc

    def _append(self, ob: _OpenBatch, lo: int, hi: int) -> None:
        p = ob.partition
        whole = lo == 0 and hi == len(ob.values)
        pid = self.producer_id
        seq = self._sequences.get(p, 0) if pid >= 0 else -1
        batch = fmt.encode_batch(
            ob.values if whole else ob.values[lo:hi],
            keys=ob.keys if whole else ob.keys[lo:hi],
            headers=ob.headers if whole or ob.headers is None else ob.headers[lo:hi],
            timestamps=ob.timestamps if whole else ob.timestamps[lo:hi],
            compression=ob.codec,
            timestamp_type=1 if ob.log_append else 0,
            max_timestamp=ob.append_time if ob.log_append else None,
            producer_id=pid,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
        )
        if len(batch) > ob.max_bytes and hi - lo > 1:  # compression made it grow: split
            mid = (lo + hi) // 2
            self._append(ob, lo, mid)
            self._append(ob, mid, hi)
            return
        header = p.append_encoded(bytearray(batch))
        if header.base_offset != ob.base + lo:
            raise AssertionError(
                f"{p.topic}-{p.partition}: batch landed at {header.base_offset}, "
                f"offset {ob.base + lo} was promised"
            )
        if pid >= 0:
            self._sequences[p] = next_sequence(seq, hi - lo)

    # ------------------------------------------------------------------ linger

    def _linger_loop(self) -> None:
        """Background writer of batches older than ``linger_ms``; exits when idle."""
        linger = self._linger_s
        while True:
            with self._cv:
                if self._stopping:
                    self._flusher = None
                    return
                if not self._open:
                    self._cv.wait(_IDLE_EXIT_S)
                    if not self._open:
                        self._flusher = None
                        return
                    continue
            now = time.monotonic()
            wait = linger
            for p, ob in list(self._open.items()):
                left = ob.opened + linger - now
                if left > 0:
                    wait = min(wait, left)
                    continue
                with p.lock:
                    if p.pending is ob:
                        p.drain_pending()
            with self._cv:
                if not self._stopping:
                    self._cv.wait(wait)

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> None:
        """Write every open batch now (durable on return with ``durability="fsync"``)."""
        for p, ob in list(self._open.items()):
            with p.lock:
                if p.pending is ob:
                    p.drain_pending()
            if self._fsync:
                p.sync()
        self._check()

    def close(self) -> None:
        """Flush and stop the background writer. Idempotent."""
        if self._closed:
            return
        try:
            if not self.log.closed:
                self.flush()
        finally:
            self._closed = True
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
                flusher = self._flusher
            if flusher is not None and flusher is not threading.current_thread():
                flusher.join()

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._closed:
            raise LogClosedError("the producer is closed")

    def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``."""
        return list(range(self.log.partition_count(topic)))

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<embedlog.Producer {self.log.path!r} durability={self.durability}{state}>"


def _allocate_producer_id(log: Log) -> int:
    """The next free producer id, made durable before it is used. Without the counter file
    (a new log, or a Kafka directory) ids start above the largest one found in the log."""
    path = os.path.join(log.path, PRODUCER_IDS)
    with _pid_lock:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read(4096)
        except FileNotFoundError:
            text = None
        if text is None:
            found = -1
            for topic in log.topics():
                for i in range(log.partition_count(topic)):
                    p = log.partition(topic, i)
                    with p.lock:
                        found = max(found, p.producer_states().max_producer_id)
            next_id = found + 1
        else:
            lines = text.split("\n")
            if len(lines) < 2 or lines[0] != "embedlog-producer-ids 1" or not lines[1].isdigit():
                raise CorruptCheckpointError("malformed producer id counter", path=path)
            next_id = int(lines[1])
        _io.write_atomic(path, f"embedlog-producer-ids 1\n{next_id + 1}\n".encode())
    return next_id
