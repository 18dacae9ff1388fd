"""The transactional producer: Kafka's ``KafkaProducer`` with a ``transactional_id``.

::

    producer = log.producer(transactional_id="etl-1")
    producer.init_transactions()          # fences older producers of "etl-1"
    producer.begin_transaction()
    producer.send("out", b"value", key=b"k")
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 42}, "etl")
    producer.commit_transaction()         # or abort_transaction()

Records sent in a transaction are buffered per partition and written (as transactional,
idempotent batches of the producer id and epoch) by :meth:`flush`, by
:meth:`send_offsets_to_transaction` and by :meth:`commit_transaction`; each partition is
recorded with the coordinator (:mod:`embedlog.txn_coordinator`) before its first batch. Before
the commit decision every written partition is fsynced, so a committed transaction is always
durable. :class:`~embedlog.errors.ProducerFencedError` from any call means a newer producer
with the same id took over (or the transaction timed out): the producer is unusable. A record
is checked when it is sent; a write that fails later (a record too large, an I/O error) leaves
the transaction abortable only (:class:`~embedlog.errors.TransactionStateError` until
:meth:`TransactionalProducer.abort_transaction`), as Kafka's abortable errors do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from . import _paths, _validate
from .batch_writer import RECORD_OVERHEAD, choose_codec, headers_size, key_required, write_records
from .errors import (
    EmbedlogError,
    InvalidConfigError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionStateError,
    UsageError,
)
from .partition import Partition
from .partitioner import partition_for_key
from .producer_state import ProducerStamp
from .records import Header, RecordMetadata, TopicPartition
from .segment import format as fmt
from .txn_coordinator import TxnCoordinator

__all__ = ["TransactionalProducer"]


class _Log(Protocol):
    path: str

    def clock(self) -> int: ...
    def partition_count(self, topic: str) -> int: ...
    def _partition_of(self, topic: str, partition: int) -> Partition: ...
    def _transactions(self) -> TxnCoordinator: ...


class _Pending:
    __slots__ = ("headers", "keys", "timestamps", "values")

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Sequence[Header] | None] = []


def _owned(data: object, what: str) -> bytes | None:
    """A key or value to buffer: ``None`` or a copy of its bytes (the caller may reuse a
    buffer before the commit writes it)."""
    checked = _validate.optional_bytes(data, what)
    return None if checked is None else bytes(checked)


class TransactionalProducer:
    """A producer whose records become visible to ``read_committed`` readers atomically.

    Args:
        transactional_id: the id that survives restarts; a new producer with the same id
            fences the old one.
        transaction_timeout_ms: a transaction open longer than this is aborted (and its
            producer fenced) by the coordinator.
        compression: codec for topics whose ``compression.type`` is ``producer``.
        key_serializer, value_serializer: callables to bytes.
    """

    def __init__(
        self,
        log: _Log,
        *,
        transactional_id: str,
        transaction_timeout_ms: int = 60000,
        compression: str | None = None,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise UsageError("transactional_id must be a non-empty string")
        if type(transaction_timeout_ms) is not int or transaction_timeout_ms <= 0:
            raise UsageError("transaction_timeout_ms must be a positive int")
        self.log = log
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.compression = compression
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self.producer_id = -1
        self.producer_epoch = -1
        self._stamps: dict[tuple[str, int], ProducerStamp] = {}
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._added: set[tuple[str, int]] = set()
        self._in_txn = False
        self._fenced = False
        self._closed = False
        self._failed: BaseException | None = None  # a write of this transaction failed

    # ------------------------------------------------------------------ state

    def _check(self, *, in_txn: bool | None = None) -> None:
        if self._closed:
            raise UsageError("the producer is closed")
        if self._fenced:
            raise ProducerFencedError(f"producer of {self.transactional_id!r} was fenced")
        if self.producer_id < 0:
            raise UsageError("call init_transactions() first")
        if in_txn is not None and in_txn != self._in_txn:
            raise UsageError("no transaction in progress" if in_txn
                             else "a transaction is already in progress")

    def _check_writable(self) -> None:
        """Refuse to go on with a transaction a write of which failed: some of its records
        are lost, so it may only be aborted (Kafka's abortable error state)."""
        self._check(in_txn=True)
        if self._failed is not None:
            raise TransactionStateError(
                f"a write of this transaction failed ({self._failed}); abort it: "
                "abort_transaction()") from self._failed

    def _coordinated(self, fn: Any, *args: Any) -> Any:
        """Call a coordinator method; a fence makes this producer unusable."""
        try:
            return fn(self.transactional_id, self.producer_id, self.producer_epoch, *args)
        except ProducerFencedError:
            self._fenced = True
            raise

    def init_transactions(self) -> None:
        """Register the id with the coordinator: settle what an older producer of the id left
        open and fence it."""
        if self._closed:
            raise UsageError("the producer is closed")
        coord = self.log._transactions()
        self.producer_id, self.producer_epoch = coord.init_producer(
            self.transactional_id, self.transaction_timeout_ms)
        self._stamps.clear()
        self._in_txn = self._fenced = False
        self._failed = None

    def begin_transaction(self) -> None:
        self._check(in_txn=False)
        self._in_txn = True
        self._added.clear()

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
    ) -> TopicPartition:
        """Buffer one record of the transaction; returns the partition it goes to (its offset
        is known once it is written by :meth:`flush` or the commit)."""
        self._check_writable()
        k = key if key is None or self._key_serializer is None else self._key_serializer(key)
        v = (value if value is None or self._value_serializer is None
             else self._value_serializer(value))
        # Checked now, as Producer.send does: what is buffered is written only at the commit.
        k, v = _owned(k, "key"), _owned(v, "value")
        checked_headers = _validate.headers(headers)
        timestamp = self.log.clock() if timestamp is None else _validate.timestamp_ms(timestamp)
        count = self.log.partition_count(topic)
        if partition is None:
            partition = (partition_for_key(k, count) if k is not None
                         else len(self._pending) % count)
        elif type(partition) is not int or not 0 <= partition < count:
            raise UsageError(f"topic {topic!r} has no partition {partition!r}")
        config = self.log._partition_of(topic, partition).config
        if k is None and config.compact:
            raise key_required(topic, config)
        size = RECORD_OVERHEAD + len(k or b"") + len(v or b"") + headers_size(checked_headers or ())
        if size > config.max_message_bytes - fmt.HEADER_SIZE:  # as Producer.send: refused now
            raise RecordTooLargeError(f"a record of about {size} bytes exceeds "
                                      f"max.message.bytes={config.max_message_bytes} of topic "
                                      f"{topic!r}")
        pend = self._pending.setdefault((topic, partition), _Pending())
        pend.values.append(v)
        pend.keys.append(k)
        pend.timestamps.append(timestamp)
        pend.headers.append(checked_headers)
        return TopicPartition(topic, partition)

    def flush(self) -> list[RecordMetadata]:
        """Write the buffered records of the transaction (not yet durable).

        The transaction is checked with the coordinator (new partitions recorded) and the
        records written under the coordinator's lock: a timeout or a newer producer of the id
        cannot settle the transaction in between, whose markers would come before this data
        and leave it open for good (a fenced producer writes nothing). If a write fails (a
        record too large, an I/O error) the transaction can only be aborted from then on."""
        self._check_writable()
        pending, self._pending = self._pending, {}
        if not pending:
            return []
        coord = self.log._transactions()
        with coord.lock:
            self._coordinated(coord.add_partitions, list(pending))
            self._added.update(pending)
            try:
                return self._write(pending)
            except Exception as exc:
                self._failed = exc
                raise

    def _write(self, pending: dict[tuple[str, int], _Pending]) -> list[RecordMetadata]:
        out: list[RecordMetadata] = []
        for tp, pend in pending.items():
            p = self.log._partition_of(*tp)
            stamp = self._stamps.setdefault(
                tp, ProducerStamp(self.producer_id, self.producer_epoch, 0, True))
            headers = pend.headers if any(h for h in pend.headers) else None
            written = write_records(p, pend.values, pend.keys, headers, pend.timestamps,
                                    codec=choose_codec(p.config, self.compression),
                                    stamp=stamp)
            out += [RecordMetadata(tp[0], tp[1], h.base_offset, h.max_timestamp)
                    for h in written]
        return out

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: str
    ) -> None:
        """Commit ``offsets`` (next offsets to read) for ``group`` when the transaction
        commits, and never if it aborts."""
        self._check_writable()
        _paths.component(group, "group name", InvalidConfigError)
        rows: dict[tuple[str, int], int] = {}
        for key, off in _validate.mapping(offsets, "offsets", "TopicPartition to offset").items():
            tp = _validate.topic_partition(key, "offsets key")
            rows[tp] = _validate.offset(getattr(off, "offset", off),
                                        f"offset of {tp.topic}-{tp.partition}")
        self._coordinated(self.log._transactions().add_offsets, group, rows)

    def commit_transaction(self) -> None:
        """Write what is buffered, make it durable, and commit."""
        self._check(in_txn=True)
        self.flush()
        for tp in self._added:
            self.log._partition_of(*tp).sync()
        self._coordinated(self.log._transactions().end, True)
        self._in_txn = False

    def abort_transaction(self) -> None:
        """Drop what is buffered and abort what was written."""
        self._check(in_txn=True)
        self._pending = {}
        self._coordinated(self.log._transactions().end, False)
        self._in_txn, self._failed = False, None

    def close(self) -> None:
        """Abort an open transaction (best effort) and close."""
        if self._closed:
            return
        if self._in_txn and not self._fenced:
            with contextlib.suppress(EmbedlogError):
                self.abort_transaction()
        self._closed = True

    def __enter__(self) -> TransactionalProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
