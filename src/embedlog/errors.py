"""The exception hierarchy: every error embedlog raises on purpose is an :class:`EmbedlogError`.

Two branches, so callers can tell misuse from damage:

* :class:`UsageError` -- the caller asked for something impossible (unknown topic, offset out of
  range, closed or read-only log, a second writer, a bad name or config value).
* :class:`CorruptionError` -- bytes on disk or handed to a decoder are not valid. Messages carry
  the file path and byte position when they are known.

:class:`StorageError` wraps an operating-system failure (EIO, ENOSPC, a failed fsync); after one
the log refuses further writes until it is reopened (:class:`LogPoisonedError`, also a
:class:`StorageError`), because Linux may already have dropped the dirty pages that a retried
fsync would claim to have written. A write cut short by an interrupt (``KeyboardInterrupt``
between the write and the bookkeeping of what it wrote) does the same: reopening recovers the
partition from its files.
"""

from __future__ import annotations

__all__ = [
    "ArgumentOutOfRangeError",
    "CorruptBatchError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptionError",
    "EmbedlogError",
    "GroupError",
    "InheritedLogError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidTopicError",
    "LogClosedError",
    "LogPoisonedError",
    "NotALogError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionQuarantinedError",
    "PolicyViolationError",
    "ProducerFencedError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "StorageError",
    "TopicExistsError",
    "TransactionStateError",
    "UnknownTopicError",
    "UnsupportedFormatError",
    "UsageError",
    "WriterLockedError",
]


class EmbedlogError(Exception):
    """Base class of every error embedlog raises deliberately."""


class UsageError(EmbedlogError):
    """The request cannot be served as asked; nothing on disk is wrong."""


class InvalidTopicError(UsageError, ValueError):
    """A topic name breaks Kafka's rule: ``[a-zA-Z0-9._-]{1,249}``, not ``.`` or ``..``."""


class InvalidArgumentError(UsageError, TypeError):
    """An argument of a public call has the wrong type (a ``str`` where bytes are expected, a
    ``float`` or ``bool`` where an integer is expected...). The message names the argument."""


class ArgumentOutOfRangeError(UsageError, ValueError):
    """An argument of a public call has the right type but a value outside its range (a
    negative count, a timestamp beyond 64 bits...). The message names the argument."""


class InvalidConfigError(UsageError, ValueError):
    """A configuration key is unknown or its value is out of range."""


class UnknownTopicError(UsageError, KeyError):
    """The topic (or partition) does not exist in this log directory."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(UsageError):
    """``create_topic`` was called for a topic that already exists."""


class OffsetOutOfRangeError(UsageError, IndexError):
    """An offset below the log start offset or above the log end offset."""


class LogClosedError(UsageError):
    """The :class:`~embedlog.Log` (or a producer/consumer on it) was closed."""


class InheritedLogError(LogClosedError):
    """The :class:`~embedlog.Log` was opened by another process and inherited through
    ``fork()``: a log is not usable across ``fork()`` (open it again in the child). Closing it in
    the child releases nothing the parent holds."""


class ReadOnlyError(UsageError):
    """A write was attempted through a log opened with ``read_only=True``."""


class WriterLockedError(UsageError):
    """Another process (or another open in this one) holds the log's writer lock."""


class NotALogError(UsageError):
    """The path is a file, or a folder that is neither an embedlog log nor a Kafka log
    directory, or a Kafka log directory opened for writing without ``adopt=True``."""


class RecordTooLargeError(UsageError, ValueError):
    """A batch would exceed the topic's ``max.message.bytes``."""


class PolicyViolationError(UsageError):
    """The topic's configuration forbids the operation: deleting records of a topic whose
    ``cleanup.policy`` does not include ``delete`` (Kafka's ``PolicyViolationException``)."""


class GroupError(UsageError):
    """A consumer-group operation is not allowed (e.g. committing a partition not assigned)."""


class ProducerFencedError(UsageError):
    """A batch carries an older epoch of a producer id than one already written (a zombie)."""


class OutOfOrderSequenceError(UsageError):
    """An idempotent producer's batch does not continue its sequence numbers (a gap or a stale
    retry that is not one of the producer's last batches)."""


class TransactionStateError(UsageError):
    """A transaction cannot be changed as asked: no transaction is open at the given offset of
    the partition, or the coordinator still has it ongoing (its producer, or its
    ``transaction.timeout.ms``, ends it); or a transactional producer is asked to go on with
    a transaction a write of which failed (only ``abort_transaction`` is allowed then)."""


class StorageError(EmbedlogError, OSError):
    """The operating system failed a file operation (EIO, ENOSPC, failed fsync...), or a write
    was cut short (by an interrupt) so that what it stored is unknown."""


class LogPoisonedError(StorageError):
    """An earlier I/O error, or a write cut short by an interrupt, left the log in an unknown
    state; close and reopen it. The message names the original error (``errno`` is unset: this
    call itself did no I/O)."""


def poisoning(exc: BaseException, where: str) -> StorageError | None:
    """What a mutation of ``where`` that raised ``exc`` poisons it with: a
    :class:`StorageError` itself; None for embedlog's own refusals (raised before any change);
    anything else (an interrupt: ``KeyboardInterrupt`` from a signal handler lands between any
    two bytecodes, so between a write and the bookkeeping of what it wrote) as a
    :class:`StorageError` naming it, since the files may no longer match what is known of
    them."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, EmbedlogError):
        return None
    return cut_short(exc, where)


def cut_short(exc: BaseException, where: str) -> StorageError:
    """The error of a write of ``where`` that ``exc`` (an interrupt) cut short."""
    return StorageError(f"{where}: a write was cut short ({exc!r}); what it stored is unknown")


class CorruptionError(EmbedlogError):
    """Stored or supplied bytes are invalid.

    Attributes:
        reason: the message without the location.
        path: the file the bytes came from, if known.
        position: byte position of the problem inside that file, if known.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if position is not None:
            where.append(f"byte {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.path = path
        self.position = position


class CorruptBatchError(CorruptionError):
    """A record batch fails validation: length, magic, CRC-32C, varints, codec or record layout."""


class UnsupportedFormatError(CorruptBatchError):
    """A batch in a format embedlog does not read (message format v0/v1, unknown codec)."""


class CorruptIndexError(CorruptionError):
    """An ``.index`` / ``.timeindex`` / ``.txnindex`` file is inconsistent (with itself or with
    the log); indexes are rebuilt from the log."""


class CorruptCheckpointError(CorruptionError):
    """A checkpoint or metadata file cannot be parsed, or contradicts the segments."""


class PartitionQuarantinedError(CorruptionError):
    """An append to a partition that was opened *quarantined*: opening it found damage that
    recovery must not hide (a damaged or missing sealed segment, a checkpoint contradicting the
    segments). Its records before the damage stay readable and the log's other partitions work
    normally; ``embedlog recover --truncate-damaged`` salvages it.

    Attributes:
        damage: the :class:`CorruptionError` found when the partition was opened.
    """

    def __init__(self, message: str, damage: CorruptionError) -> None:
        super().__init__(message, path=damage.path, position=damage.position)
        self.damage = damage
