"""Value types handed to and returned by the public API (immutable, slotted)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP_TYPE",
    "Header",
    "Record",
    "RecordMetadata",
    "TopicPartition",
]

Header = tuple[str, "bytes | None"]
"""A record header: a UTF-8 key and a value that may be ``None``."""

NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    """A partition of a topic; hashable, so it keys dicts like Kafka clients' ``TopicPartition``."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """What an append returns: where the record landed and the timestamp it was stored with."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Record(NamedTuple):
    """One stored record.

    ``timestamp`` is epoch milliseconds; ``timestamp_type`` is 0 (CreateTime) or 1
    (LogAppendTime). ``key`` and ``value`` are ``None`` when null; a keyed record with a ``None``
    value is a tombstone. ``headers`` is a tuple of ``(str, bytes | None)``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
