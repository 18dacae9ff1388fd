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

**Trade-off.** The alternatives were writing every record at once (a batch per record: exact
but several times slower) or filling in offsets when the batch is written (futures, which the
embedded API avoids). Reserving the tail costs this: a record becomes readable (and, with
``durability="none"``, reaches the page cache) only when its batch is written -- within
``linger_ms`` (at least 1 ms, plus the wait for Python's interpreter lock, up to about 5 ms in a
busy loop) of the batch's first record -- and other writers of the partition write the open
batch first. :meth:`Producer.flush` makes records visible immediately. A batch that fails to be
written (an I/O error) was already acknowledged record by record: the error is raised by the
producer's next call (Kafka reports it through the futures).

**Durability** ``"fsync"`` acknowledges a record only once it is on disk: ``send()`` adds its
record to the open batch and waits for the partition's group commit
(:meth:`~embedlog.partition.Partition.sync_through`): while one fsync runs, the records of every
other sender gather in the batch, and the next leader writes them all with one write and one
fsync.
The log's own ``durability`` is a floor.

**Idempotence.** ``idempotent=True`` allocates a producer id (a counter in
``<log>/embedlog.producer-ids``, replaced atomically), epoch 0, and numbers the records of each
partition from 0; the id, epoch and base sequence go into the batch header fields Kafka uses. The
partition's append path rejects out-of-order sequences and recognises a batch re-submitted with
the same sequences (a retry) as a duplicate: it is not written twice, and that holds across a
reopen (see :mod:`embedlog.producer_state`).

**Partitions.** An explicit ``partition`` wins; then a custom ``partitioner`` (the callable of
kafka-python 2: ``partitioner(key_bytes, all_partitions, available_partitions) -> int``); then
Kafka's murmur2 of the key; keyless records stick to one partition until ``batch_size`` bytes
went to it, then move to the next (Kafka's sticky partitioner, KIP-794, in round-robin order).

A producer is thread-safe and several may share a ``Log``.
"""

from __future__ import annotations

import operator
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from . import checkpoint
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
from .naming import PRODUCER_IDS_FILE
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
PRODUCER_IDS: Final = PRODUCER_IDS_FILE
"""File in the log directory: ``embedlog-producer-ids 1`` then the next free producer id."""
_RECORD_OVERHEAD: Final = 32
"""Upper bound of a record's framing (length, attributes, deltas, key/value lengths, headers
count), so that the estimated size of a batch never falls short of the encoded one."""
_MIN_LINGER_S: Final = 0.001
_IDLE_EXIT_S: Final = 1.0
_KEY_CACHE: Final = 1 << 14
_new = tuple.__new__
_pid_lock = threading.Lock()

_GATHER_ROUNDS = 50  # GIL hand-offs a group-commit leader grants senders still on their way


class _Topic:
    """What partition choice needs of a topic, cached per producer."""

    __slots__ = ("all_partitions", "compact", "count", "key_cache", "name", "sticky",
                 "sticky_bytes")

    def __init__(self, name: str, count: int, compact: bool) -> None:
        self.name = name
        self.count = count
        self.compact = compact
        self.all_partitions = list(range(count))
        self.key_cache: dict[bytes, int] = {}
        self.sticky = 0
        self.sticky_bytes = 0


class _Slot:
    """This producer's open batch for one partition: records whose offsets ``base ..`` are
    already handed out.

    ``lock`` (a plain lock, cheaper than the partition's) guards the lists and ``open``. While
    ``open``, the slot is the partition's ``pending`` batch; calling it (``drain_pending``,
    under the partition lock) writes it. Lock order: partition lock, then slot lock.
    """

    __slots__ = ("append_time", "base", "codec", "headers", "index", "keys", "last", "limit",
                 "lock", "log_append", "max_bytes", "max_record", "open", "opened", "p",
                 "producer", "size", "timestamps", "topic", "values")

    def __init__(self, producer: Producer, topic: str, p: Partition) -> None:
        self.producer = producer
        self.topic = topic
        self.index = p.partition
        self.p = p
        self.lock = threading.Lock()
        self.open = False
        self.base = 0
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Sequence[Header] | None] | None = None
        self.size = 0
        self.opened = 0.0
        self.limit = self.last = 0
        self.codec = Compression.NONE
        self.log_append = False
        self.append_time = -1
        self.max_bytes = self.max_record = p.config.max_message_bytes

    def configure(self, base: int) -> None:
        """Open at ``base`` with the topic's current settings (caller holds both locks)."""
        producer, cfg = self.producer, self.p.config
        self.base = base
        self.size = fmt.HEADER_SIZE
        self.max_bytes = cfg.max_message_bytes
        self.max_record = self.max_bytes - fmt.HEADER_SIZE
        self.limit = min(producer.batch_size, self.max_bytes)
        self.last = producer.max_batch_records - 1
        self.codec = _codec(cfg.compression_type, producer.compression)
        self.log_append = cfg.message_timestamp_type == "LogAppendTime"
        self.append_time = self.p.clock() if self.log_append else -1
        self.opened = time.monotonic()
        self.open = True

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
        self._committing = 0  # senders waiting for their record's fsync
        self._committing_lock = threading.Lock()
        self._linger_s = max(linger_ms / 1000, _MIN_LINGER_S)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner = partitioner
        self._plain = key_serializer is None and value_serializer is None
        self._fast = self._plain  # _plain and not _trouble: send's fast path applies
        self._clock = log.clock
        self._topics: dict[str, _Topic] = {}
        self._slots: dict[tuple[str, int], _Slot] = {}
        self._open: dict[_Slot, None] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._trouble = False  # _error is set or the producer is closed
        self._cv = threading.Condition(threading.Lock())
        self._flusher: threading.Thread | None = None
        self._flusher_idle = False
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
        # The common case (bytes key and value, no headers, no serializers) takes the fewest
        # steps: this loop body is the producer's throughput.
        if self._fast and value.__class__ is bytes and key.__class__ is bytes and headers is None:
            size = _RECORD_OVERHEAD + len(value) + len(key)
        else:
            value, key, headers, size = self._prepare(topic, value, key, headers)
        if partition is None:
            partition = self._choose(topic, key, size)
        slot = self._slots.get((topic, partition))
        if slot is None:
            slot = self._slot(topic, partition)
        if size > slot.max_record:
            raise RecordTooLargeError(
                f"a record of about {size} bytes exceeds max.message.bytes={slot.max_bytes} "
                f"of topic {topic!r}"
            )
        if timestamp is None:
            timestamp = self._clock()
        elif timestamp.__class__ is not int:
            timestamp = operator.index(timestamp)
        lock = slot.lock
        lock.acquire()
        if not slot.open:
            self._reopen(slot)
        values = slot.values
        n = len(values)
        values.append(value)
        slot.keys.append(key)
        slot.timestamps.append(timestamp)
        if headers is not None or slot.headers is not None:
            _add_headers(slot, n, headers)
        slot.size += size
        offset = slot.base + n
        full = slot.size >= slot.limit or n >= slot.last
        if slot.log_append:
            timestamp = slot.append_time
        lock.release()
        if self._fsync:
            self._commit(slot, offset, full)
        elif full:
            self._write_now(slot)
        return _new(RecordMetadata, (topic, slot.index, offset, timestamp))  # type: ignore[no-any-return]

    def _prepare(
        self, topic: str, value: Any, key: Any, headers: Sequence[Header] | None
    ) -> tuple[bytes | None, bytes | None, Sequence[Header] | None, int]:
        """Serialise and check what the fast path of ``send`` does not handle."""
        if self._trouble:
            self._check()
        size = _RECORD_OVERHEAD
        if value is not None:
            if self._value_serializer is not None:
                value = self._value_serializer(value)
            if value.__class__ is not bytes:
                value = _as_bytes(value, "value")
            size += len(value)
        if key is not None:
            if self._key_serializer is not None:
                key = self._key_serializer(key)
            if key.__class__ is not bytes:
                key = _as_bytes(key, "key")
            size += len(key)
        elif self._topic(topic).compact:
            raise UsageError(f"topic {topic!r} is compacted: every record needs a key")
        if headers:
            size += _headers_size(headers)
        return value, key, headers or None, size

    def _choose(self, topic: str, key: bytes | None, size: int) -> int:
        t = self._topic(topic)
        if self._partitioner is not None:
            chosen = self._partitioner(key, t.all_partitions, t.all_partitions)
            if chosen.__class__ is not int or not 0 <= chosen < t.count:
                raise UsageError(
                    f"the partitioner returned {chosen!r} for topic {topic!r} "
                    f"(partitions 0..{t.count - 1})"
                )
            return chosen
        if key is None:
            chosen = t.sticky
            t.sticky_bytes += size
            if t.sticky_bytes >= self.batch_size:
                t.sticky = (chosen + 1) % t.count
                t.sticky_bytes = 0
            return chosen
        if t.count == 1:
            return 0
        chosen = t.key_cache.get(key, -1)
        if chosen < 0:
            chosen = partition_for_key(key, t.count)
            if len(t.key_cache) < _KEY_CACHE:
                t.key_cache[key] = chosen
        return chosen

    def _topic(self, name: str) -> _Topic:
        t = self._topics.get(name)
        if t is None:
            count = self.log.partition_count(name)
            t = self._topics[name] = _Topic(name, count, self.log.topic_config(name).compact)
        return t

    def _slot(self, topic: str, partition: int) -> _Slot:
        t = self._topic(topic)
        if partition.__class__ is not int or not 0 <= partition < t.count:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{t.count - 1}, not {partition!r}"
            )
        slot = self._slots[(topic, partition)] = _Slot(
            self, topic, self.log._partition_of(topic, partition)
        )
        return slot

    def _reopen(self, slot: _Slot) -> None:
        """Called holding ``slot.lock`` with the slot closed; returns holding it, open. Raises
        (without the lock) when the partition cannot take a batch."""
        while not slot.open:
            slot.lock.release()
            p = slot.p
            with p.lock:
                if not slot.open:
                    if p.pending is not None:
                        p.drain_pending()  # another producer's batch goes first
                    if not p.segments:  # the log was closed or the topic deleted
                        self._forget(slot.topic)
                        self.log._partition_of(slot.topic, slot.index)
                        raise UsageError(
                            f"topic {slot.topic!r} was deleted and created again; send again"
                        )
                    p.check_writable()
                    with slot.lock:
                        slot.configure(p.end_offset)
                    p.pending = slot
                    self._open[slot] = None
                    if not self._fsync:
                        self._wake_flusher()
            slot.lock.acquire()

    def _forget(self, topic: str) -> None:
        self._topics.pop(topic, None)
        for key in [k for k in self._slots if k[0] == topic]:
            del self._slots[key]

    def _commit(self, slot: _Slot, offset: int, full: bool) -> None:
        """``durability="fsync"``: return once the record at ``offset`` is on disk, sharing one
        write and one fsync with every sender whose record joined the batch meanwhile."""
        p = slot.p
        if full:
            with p.lock:
                if p.pending is slot:
                    p.drain_pending()
        with self._committing_lock:
            self._committing += 1
        try:
            covered = p.sync_through(offset, lambda: self._gather(slot))
        finally:
            with self._committing_lock:
                self._committing -= 1
        if not covered:
            self._check()
            raise UsageError(f"{p.topic}-{p.partition}: the record at offset {offset} was not "
                             "written")
        if self._trouble:
            self._check()

    def _gather(self, slot: _Slot) -> None:
        """The group-commit leader's pause: yield the GIL (a few microseconds each time) while
        other senders are still on their way to put their record in this batch."""
        for _ in range(_GATHER_ROUNDS):
            if len(slot.values) >= self._committing or not slot.open:
                return
            time.sleep(0)

    def _write_now(self, slot: _Slot) -> None:
        p = slot.p
        with p.lock:
            if p.pending is slot:
                p.drain_pending()
        if self._fsync:
            if self._trouble:
                self._check()
            p.sync()

    def _write(self, slot: _Slot) -> None:
        """Encode and append the slot's batch. Called through ``Partition.drain_pending``, so
        under the partition lock with ``pending`` already cleared. Errors are kept for this
        producer's next call rather than raised into whoever triggered the write."""
        with slot.lock:
            values, keys, timestamps, headers = (slot.values, slot.keys, slot.timestamps,
                                                 slot.headers)
            base = slot.base
            slot.values, slot.keys, slot.timestamps, slot.headers = [], [], [], None
            slot.open = False
        self._open.pop(slot, None)
        if not values:
            return
        try:
            self._append(slot, base, values, keys, timestamps, headers)
        except (EmbedlogError, ValueError, TypeError) as exc:
            self._error = exc
            self._set_trouble(True)

    def _append(self, slot: _Slot, base: int, values: list[bytes | None],
                keys: list[bytes | None], timestamps: list[int],
                headers: list[Sequence[Header] | None] | None) -> None:
        p = slot.p
        pid = self.producer_id
        seq = self._sequences.get(p, 0) if pid >= 0 else -1
        batch = fmt.encode_batch(
            values,
            keys=keys,
            headers=headers,
            timestamps=timestamps,
            compression=slot.codec,
            timestamp_type=1 if slot.log_append else 0,
            max_timestamp=slot.append_time if slot.log_append else None,
            producer_id=pid,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
        )
        n = len(values)
        if len(batch) > slot.max_bytes and n > 1:  # compression made it grow: split
            mid = n // 2
            self._append(slot, base, values[:mid], keys[:mid], timestamps[:mid],
                         headers[:mid] if headers is not None else None)
            self._append(slot, base + mid, values[mid:], keys[mid:], timestamps[mid:],
                         headers[mid:] if headers is not None else None)
            return
        header = p.append_encoded(bytearray(batch))
        if header.base_offset != base:
            raise AssertionError(
                f"{p.topic}-{p.partition}: batch landed at {header.base_offset}, "
                f"offset {base} was promised"
            )
        if pid >= 0:
            self._sequences[p] = next_sequence(seq, n)

    # ------------------------------------------------------------------ linger

    def _wake_flusher(self) -> None:
        """A batch opened: make sure the background writer will look at it. It is woken only
        when idle (every wake costs a switch of the interpreter lock); otherwise it is already
        due to wake at the deadline of an older batch and will see this one then."""
        with self._cv:
            if self._flusher is None and not self._stopping:
                self._flusher = threading.Thread(
                    target=self._linger_loop, name="embedlog-producer-linger", daemon=True
                )
                self._flusher.start()
            elif self._flusher_idle:
                self._cv.notify()

    def _linger_loop(self) -> None:
        """Background writer of batches older than ``linger_ms``; exits when idle."""
        linger = self._linger_s
        while True:
            with self._cv:
                if self._stopping:
                    self._flusher = None
                    return
                if not self._open:
                    self._flusher_idle = True
                    self._cv.wait(_IDLE_EXIT_S)
                    self._flusher_idle = False
                    if not self._open:
                        self._flusher = None
                        return
                    continue
            now = time.monotonic()
            wait = linger
            for slot in list(self._open):
                left = slot.opened + linger - now
                if left > 0:
                    wait = min(wait, left)
                    continue
                with slot.p.lock:
                    if slot.p.pending is slot:
                        slot.p.drain_pending()
            with self._cv:
                if not self._stopping:
                    self._cv.wait(wait)

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> None:
        """Write every open batch now (durable on return with ``durability="fsync"``)."""
        for slot in list(self._open):
            with slot.p.lock:
                if slot.p.pending is slot:
                    slot.p.drain_pending()
        if self._fsync:
            for slot in list(self._slots.values()):
                slot.p.sync()
        if self._error is not None:
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
            self._set_trouble(True)
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
                flusher = self._flusher
            if flusher is not None and flusher is not threading.current_thread():
                flusher.join()

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._set_trouble(self._closed)
            raise error
        if self._closed:
            raise LogClosedError("the producer is closed")

    def _set_trouble(self, trouble: bool) -> None:
        self._trouble = trouble
        self._fast = self._plain and not trouble

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


def _add_headers(slot: _Slot, n: int, headers: Sequence[Header] | None) -> None:
    """Record ``headers`` for record ``n`` of the slot (the column appears with the first
    record that has headers)."""
    if slot.headers is None:
        slot.headers = [None] * n
    slot.headers.append(headers)


def _allocate_producer_id(log: Log) -> int:
    """The next free producer id, made durable before it is used. Without the counter file
    (a new log, or a Kafka directory) ids start above the largest one found in the log."""
    path = os.path.join(log.path, PRODUCER_IDS)
    with _pid_lock:
        rows = checkpoint.PRODUCER_IDS.read(path)
        if rows is None:
            found = -1
            for topic in log.topics():
                for i in range(log.partition_count(topic)):
                    p = log._partition_of(topic, i)
                    with p.lock:
                        found = max(found, p.producer_states().max_producer_id)
            next_id = found + 1
        elif len(rows) != 1:
            raise CorruptCheckpointError("malformed producer id counter: one id expected",
                                         path=path)
        else:
            next_id = int(rows[0][0])
        checkpoint.PRODUCER_IDS.write(path, [(next_id + 1,)])
    return next_id
