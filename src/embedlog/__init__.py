"""embedlog: SQLite for logs.

An in-process, file-backed, partitioned commit log whose files are byte-compatible with Apache
Kafka's log format::

    import embedlog

    with embedlog.open("data") as log:
        log.create_topic("events", partitions=4)
        meta = log.append("events", b"hello", key=b"user-1")
        for record in log.read("events", meta.partition):
            print(record.offset, record.key, record.value)
"""

from .config import TopicConfig
from .consumer import Consumer
from .errors import (
    CorruptBatchError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptionError,
    EmbedlogError,
    GroupError,
    InvalidConfigError,
    InvalidTopicError,
    LogClosedError,
    LogPoisonedError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ReadOnlyError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
    UnsupportedFormatError,
    UsageError,
    WriterLockedError,
)
from .log import Log, open
from .producer import Producer
from .records import Record, RecordMetadata, TopicPartition

__version__ = "0.1.0"

__all__ = [
    "Consumer",
    "CorruptBatchError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptionError",
    "EmbedlogError",
    "GroupError",
    "InvalidConfigError",
    "InvalidTopicError",
    "Log",
    "LogClosedError",
    "LogPoisonedError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "Producer",
    "ProducerFencedError",
    "ReadOnlyError",
    "Record",
    "RecordMetadata",
    "RecordTooLargeError",
    "StorageError",
    "TopicConfig",
    "TopicExistsError",
    "TopicPartition",
    "UnknownTopicError",
    "UnsupportedFormatError",
    "UsageError",
    "WriterLockedError",
    "__version__",
    "open",
]
