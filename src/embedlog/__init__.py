"""embedlog: SQLite for logs.

An in-process, file-backed, partitioned commit log whose files are byte-compatible with Apache
Kafka's log format::

    import embedlog

    with embedlog.open("data") as log:
        log.create_topic("events", partitions=4)
        meta = log.append("events", b"hello", key=b"user-1")
        for record in log.read("events", meta.partition):
            print(record.offset, record.key, record.value)

Everything exported here is the supported surface; :mod:`embedlog.inspect` is the supported
API for looking at segment, index and checkpoint files directly. Other modules are internal.
"""

from . import inspect
from .compaction.stats import CompactionStats
from .config import TopicConfig, UpkeepConfig
from .consumer import Consumer, OffsetAndTimestamp
from .errors import (
    ArgumentOutOfRangeError,
    CorruptBatchError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptionError,
    EmbedlogError,
    GroupError,
    InheritedLogError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidTopicError,
    LogClosedError,
    LogPoisonedError,
    NotALogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionQuarantinedError,
    PolicyViolationError,
    ProducerFencedError,
    ReadOnlyError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    TransactionStateError,
    UnknownTopicError,
    UnsupportedFormatError,
    UsageError,
    WriterLockedError,
)
from .log import Durability, Log
from .opener import open
from .partition import SegmentInfo
from .producer import Producer
from .records import Header, Record, RecordBatch, RecordMetadata, TopicPartition
from .segment._native import codec_implementation
from .txn_admin import HangingTransaction, ProducerInfo
from .txn_producer import TransactionalProducer
from .upkeep import UpkeepRun

__version__ = "0.1.0"

__all__ = [
    "ArgumentOutOfRangeError",
    "CompactionStats",
    "Consumer",
    "CorruptBatchError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptionError",
    "Durability",
    "EmbedlogError",
    "GroupError",
    "HangingTransaction",
    "Header",
    "InheritedLogError",
    "InvalidArgumentError",
    "InvalidConfigError",
    "InvalidTopicError",
    "Log",
    "LogClosedError",
    "LogPoisonedError",
    "NotALogError",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionQuarantinedError",
    "PolicyViolationError",
    "Producer",
    "ProducerFencedError",
    "ProducerInfo",
    "ReadOnlyError",
    "Record",
    "RecordBatch",
    "RecordMetadata",
    "RecordTooLargeError",
    "SegmentInfo",
    "StorageError",
    "TopicConfig",
    "TopicExistsError",
    "TopicPartition",
    "TransactionStateError",
    "TransactionalProducer",
    "UnknownTopicError",
    "UnsupportedFormatError",
    "UpkeepConfig",
    "UpkeepRun",
    "UsageError",
    "WriterLockedError",
    "__version__",
    "codec_implementation",
    "inspect",
    "open",
]
