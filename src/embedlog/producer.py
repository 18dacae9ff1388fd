"""The producer: ``KafkaProducer``'s shape over an embedded :class:`~embedlog.Log`.

::

    with log.producer(linger_ms=5) as producer:
        meta = producer.send("events", b"payload", key=b"user-1")
        meta.partition, meta.offset          # known now: no futures

**Offsets at send time.** ``send()`` adds the record to an *open batch* of its partition
(:class:`~embedlog.batch_writer.OpenBatch`: plain Python lists of values, keys, timestamps and
headers) and returns its :class:`~embedlog.RecordMetadata` at once, offset included. The open
batch reserves the partition's tail (:meth:`Partition.reserve
<embedlog.partition.Partition.reserve>`): its base offset is the partition's end offset when it
opened, and anything else that writes to the partition (``Log.append``, another producer,
``Log.flush``/``close``) first writes it, under the partition lock, before appending its own
records. Offsets handed out can therefore never be given to anyone else, and no lock is held
between two ``send()`` calls.

**The lane.** A plain record (an explicit partition whose batch is open, bytes key and value,
no headers, no serializers) is one call into the batch's lane (:mod:`embedlog.producer_lane`;
compiled unless ``EMBEDLOG_PURE=1``): it checks the record, appends it to the batch's lists
and returns its metadata, or declines without appending (with ``durability="fsync"`` the
sender then waits for the group commit, as on the Python path). The
first record of a batch, the one that fills it, and every other record take the Python path,
which makes every check and raises every error; both store the same records and bytes.

An open batch is written by the one batch writer (:func:`~embedlog.batch_writer.write_records`:
the topic's codec, timestamp type and size rules) when it reaches ``batch_size`` bytes or
``max_batch_records`` records, when ``linger_ms`` has passed since its first record (a
background thread, :mod:`embedlog.producer_linger`), on :meth:`Producer.flush` /
:meth:`Producer.close`, or when anything else touches the partition.

**Trade-off.** The alternatives were writing every record at once (a batch per record: exact
but several times slower) or filling in offsets when the batch is written (futures, which the
embedded API avoids). Reserving the tail costs this: a record becomes readable (and, with
``durability="none"``, reaches the page cache) only when its batch is written -- within
``linger_ms`` (at least 1 ms, plus the wait for Python's interpreter lock, up to about 5 ms in a
busy loop) of the batch's first record -- and other writers of the partition write the open
batch first. :meth:`Producer.flush` makes records visible immediately. Without ``fsync``, a
batch that fails to be written (an I/O error) was already acknowledged record by record: the
error is raised by the producer's next call (Kafka reports it through the futures).

**Durability** ``"fsync"`` acknowledges a record only once it is on disk: ``send()`` adds its
record to the open batch and waits for the partition's group commit
(:meth:`~embedlog.batch_writer.OpenBatch.sync_through`): while one fsync runs, the records of
every other sender gather in the batch, and the next leader writes them all with one write and
one fsync. Each sender takes its batch's :class:`~embedlog.batch_writer.Ticket` with its record
(through the lane's ``join``, atomically) and is acknowledged only once that batch was
written; a batch that fails raises its error in each of its senders (not kept for a next
call). The log's own ``durability`` is a floor.

**Idempotence.** ``idempotent=True`` allocates a producer id (a counter in
``<log>/embedlog.producer-ids``: :func:`~embedlog.producer_state.allocate_producer_id`), epoch
0, and numbers the records of each partition from 0; the id, epoch and base sequence go into
the batch header fields Kafka uses. The partition's append path rejects out-of-order sequences
and recognises a batch re-submitted with the same sequences (a retry) as a duplicate: it is not
written twice, and that holds across a reopen for the last batch of each producer (Kafka's
producer snapshot keeps only that one; see :mod:`embedlog.producer_state`).

**Partitions.** An explicit ``partition`` wins; then a custom ``partitioner`` (the callable of
kafka-python 2: ``partitioner(key_bytes, all_partitions, available_partitions) -> int``); then
Kafka's murmur2 of the key; keyless records stick to one partition until ``batch_size`` bytes
went to it, then move to the next (Kafka's sticky partitioner, KIP-794, in round-robin order).

A producer is thread-safe and several may share a ``Log``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from . import _fork, _validate
from ._client_api import Durability, ProducerLog
from .batch_writer import DEFAULT_BATCH_RECORDS, DEFAULT_BATCH_SIZE, OpenBatch, Ticket, key_required
from .batch_writer import RECORD_OVERHEAD as _RECORD_OVERHEAD
from .batch_writer import headers_size as _headers_size
from .errors import (
    InvalidArgumentError,
    InvalidConfigError,
    LogClosedError,
    ReadOnlyError,
    UnknownTopicError,
    UsageError,
)
from .naming import PRODUCER_IDS_FILE
from .partitioner import TopicChooser
from .producer_lane import LaneBatch
from .producer_linger import Linger
from .producer_state import ProducerStamp, allocate_producer_id
from .records import Header, RecordMetadata
from .segment.codecs import compression_from_name

__all__ = ["DEFAULT_BATCH_SIZE", "PRODUCER_IDS", "Producer"]

PRODUCER_IDS: Final = PRODUCER_IDS_FILE
"""File in the log directory holding the next free producer id (:mod:`.producer_state`)."""
_new = tuple.__new__
_INT64_LIMIT: Final = _validate.INT64_LIMIT


def _as_bytes(data: object, what: str, serializer: object) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    hint = f" (or set a {what}_serializer)" if serializer is None else (
        f" ({what}_serializer returned it)")
    raise InvalidArgumentError(f"{what} must be bytes{hint}, not {type(data).__name__}")


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

    _forked = False  # a fork() child's copy: never touches the parent's batches

    def __init__(
        self,
        log: ProducerLog,
        *,
        durability: Durability | None = None,
        compression: str | None = None,
        linger_ms: float = 0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_records: int = DEFAULT_BATCH_RECORDS,
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
        try:
            _validate.seconds(linger_ms, "linger_ms")
            batch_size = _validate.count(batch_size, "batch_size")
            max_batch_records = _validate.count(max_batch_records, "max_batch_records")
        except UsageError as exc:
            raise InvalidConfigError(str(exc)) from None
        self.log = log
        self.durability: Durability = durability
        self.compression = compression
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.max_batch_records = max_batch_records
        self._fsync = durability == "fsync"
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner = partitioner
        self._plain = key_serializer is None and value_serializer is None
        self._fast = self._plain  # _plain and not _trouble: send's fast path applies
        self._lane = self._fast  # send may try the batch's lane first
        self._clock = log.clock
        self._topics: dict[str, TopicChooser] = {}
        self._slots: dict[tuple[str, int], LaneBatch] = {}
        self._open: dict[OpenBatch, None] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._closing = False  # set first by close(): sends racing it write nothing and raise
        self._trouble = False  # _error is set, the producer is closed, or in a fork() child
        _fork.track(self)
        self._linger = Linger(self._open, linger_ms)
        self.producer_id = -1
        self.producer_epoch = -1
        if idempotent:
            self.producer_id = allocate_producer_id(log.path, self._max_producer_id)
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
        # The common case (an explicit partition with an open batch, bytes key and value, no
        # headers, no serializers) is one call into the batch's lane: this loop body is the
        # producer's throughput. The lane declines anything else, appending nothing.
        now = None
        if self._lane and headers is None and partition.__class__ is int:
            try:
                slot = self._slots.get((topic, partition))
            except TypeError:  # an unhashable topic: _slot names the problem
                slot = None
            if slot is not None:
                ts = timestamp
                if ts is None:
                    now = ts = self._clock()
                if self._fsync:  # (a record the lane takes never fills its batch)
                    joined = slot.lane.join(topic, value, key, ts)
                    if joined is not None:
                        slot.sync_through(joined[0].offset, joined[1])
                        return joined[0]  # type: ignore[no-any-return]
                else:
                    meta = slot.lane.add(topic, value, key, ts)
                    if meta is not None:
                        return meta
        return self._send(topic, value, key, headers, partition, timestamp, now)

    def _send(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[Header] | None,
        partition: int | None,
        timestamp: int | None,
        now: int | None,
    ) -> RecordMetadata:
        """``send`` when the lane declined: every check, and a write when the batch is full.
        ``now``: the clock's reading ``send`` already took (for ``timestamp=None``)."""
        if self._fast and value.__class__ is bytes and key.__class__ is bytes and headers is None:
            size = _RECORD_OVERHEAD + len(value) + len(key)
        else:
            value, key, headers, size = self._prepare(topic, value, key, headers)
        if partition is None:
            partition = self._topic(topic).choose(key, size, self.batch_size,
                                                  self._partitioner)
        elif partition.__class__ is not int:
            partition = _validate.partition(partition)
        try:
            slot = self._slots.get((topic, partition))
        except TypeError:  # an unhashable topic: _slot names the problem
            slot = None
        if slot is None:
            slot = self._slot(topic, partition)
        if size > slot.max_record:
            raise slot.too_large(size)
        if timestamp is None:
            timestamp = self._clock() if now is None else now
        elif timestamp.__class__ is not int or not 0 <= timestamp < _INT64_LIMIT:
            timestamp = _validate.timestamp_ms(timestamp)
        refused = False
        while True:
            with slot.lock:  # (not acquire/try: an interrupt could land between the two)
                if slot.open:
                    refused = self._closing or (key is None and slot.compact)
                    if refused:
                        break
                    lane = slot.lane
                    if headers is not None or slot.headers is not None:
                        lane.disarm()  # the headers column must follow every record now
                        n = lane.push(value, key, timestamp, size)
                        slot.add_headers(n, headers)
                    else:
                        n = lane.push(value, key, timestamp, size)
                    offset, ticket = slot.base + n, slot.ticket
                    full = lane.size >= slot.limit or n >= slot.last
                    if slot.log_append:
                        timestamp = slot.append_time
                    break
            self._reopen(slot)
        if refused:
            self._refuse(slot)
        return self._sent(slot, offset, timestamp, full, ticket)

    def _sent(self, slot: LaneBatch, offset: int, timestamp: int, full: bool,
              ticket: Ticket) -> RecordMetadata:
        """The slow path's record was added at ``offset``: write its batch if it is ``full``,
        wait for the group commit in ``fsync`` mode; its metadata."""
        if full:
            slot.settle()
        if self._fsync:
            slot.sync_through(offset, ticket)
        return _new(RecordMetadata, (slot.topic, slot.index, offset, timestamp))  # type: ignore[no-any-return]

    def _refuse(self, slot: LaneBatch) -> NoReturn:
        """A send that met ``close()`` (which may have flushed already: add nothing it would not
        write): write the batch it may have opened (with any record a racing lane call added to
        it), then raise. Or a keyless one to a topic compacted since this producer looked."""
        if not self._closing:
            raise key_required(slot.topic, self.log.topic_config(slot.topic))
        slot.settle()
        self._check()
        raise LogClosedError("the producer is closed")

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
                value = _as_bytes(value, "value", self._value_serializer)
            size += len(value)
        if key is not None:
            if self._key_serializer is not None:
                key = self._key_serializer(key)
            if key.__class__ is not bytes:
                key = _as_bytes(key, "key", self._key_serializer)
            size += len(key)
        elif self._topic(topic).compact:
            raise key_required(topic, self.log.topic_config(topic))
        headers = _validate.headers(headers)
        if headers:
            size += _headers_size(headers)
        return value, key, headers, size

    def _topic(self, name: str) -> TopicChooser:
        t = self._topics.get(name) if name.__class__ is str else None
        if t is None:
            count = self.log.partition_count(name)
            t = self._topics[name] = TopicChooser(name, count, self.log.topic_config(name).compact)
        return t

    def _slot(self, topic: str, partition: int) -> LaneBatch:
        t = self._topic(topic)
        if partition.__class__ is not int or not 0 <= partition < t.count:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{t.count - 1}, not {partition!r}"
            )
        stamp = None
        if self.producer_id >= 0:
            stamp = ProducerStamp(self.producer_id, self.producer_epoch)
        slot = self._slots[(topic, partition)] = LaneBatch(
            self.log._partition_of(topic, partition),
            overhead=_RECORD_OVERHEAD,
            batch_size=self.batch_size,
            max_batch_records=self.max_batch_records,
            compression=self.compression,
            stamp=stamp,
            on_open=self._opened,
            on_close=self._closed_batch,
            waited=self._fsync,
        )
        return slot

    def _reopen(self, slot: LaneBatch) -> None:
        """Open the slot's batch (no-op if open; another producer's batch goes first). Raises
        when the partition cannot take a batch: the log was closed or the topic deleted."""
        if not slot.reserve():
            self._forget(slot.topic)
            self.log._partition_of(slot.topic, slot.index)
            raise UsageError(f"topic {slot.topic!r} was deleted and created again; send again")

    def _opened(self, slot: OpenBatch) -> None:
        """A batch opened (under its partition's lock): the linger thread will write it."""
        self._open[slot] = None
        if not self._fsync:
            self._linger.wake()

    def _closed_batch(self, slot: OpenBatch, error: BaseException | None) -> None:
        """A batch was written (under its partition's lock). Without ``fsync`` its error is
        kept for this producer's next call rather than raised into whoever triggered the write;
        with ``fsync`` each sender of the batch raises it (its ticket's)."""
        self._open.pop(slot, None)
        if error is not None and not self._fsync:
            self._error = error
            self._set_trouble(True)

    def _max_producer_id(self) -> int:
        """The largest producer id any partition of the log holds, or -1."""
        return max((self.log._partition_of(t, i).max_producer_id()
                    for t in self.log.topics() for i in range(self.log.partition_count(t))),
                   default=-1)

    def _forget(self, topic: str) -> None:
        self._topics.pop(topic, None)
        for key in [k for k in self._slots if k[0] == topic]:
            del self._slots[key]

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> None:
        """Write every open batch now (durable on return with ``durability="fsync"``)."""
        if self._forked:
            self._check()  # refuses before touching a lock another process's thread held
        for slot in list(self._open):
            slot.settle()
        if self._fsync:
            for slot in list(self._slots.values()):
                slot.sync()
        if self._error is not None:
            self._check()

    def close(self) -> None:
        """Flush and stop the background writer. Idempotent. A ``send`` in another thread
        meanwhile is written by it, or refused with :class:`~embedlog.LogClosedError`."""
        if self._closed or self._forked:  # a child's close: its locks may be held by no one
            self._closed = True
            return
        self._closing = True
        try:
            if not self.log.closed:
                self.flush()
        finally:
            self._closed = True
            self._set_trouble(True)
            self._linger.stop()

    def _on_fork_child(self) -> None:
        self._forked = True
        self._set_trouble(True)  # off the fast path: _check asks the log, which refuses

    def _check(self) -> None:
        if self.log.closed:  # raises InheritedLogError in a fork() child
            raise LogClosedError(f"the log at {self.log.path} is closed")
        if self._error is not None:
            error, self._error = self._error, None
            self._set_trouble(self._closed)
            raise error
        if self._closed:
            raise LogClosedError("the producer is closed")

    def _set_trouble(self, trouble: bool) -> None:
        self._trouble = trouble
        self._fast = self._plain and not trouble
        self._lane = self._fast

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (a set, as kafka-python's and AsyncProducer's)."""
        return set(range(self.log.partition_count(topic)))

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
