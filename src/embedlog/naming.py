"""Names on disk: topic validation, partition folders and segment files.

Layout of a log directory (Kafka's, so Kafka tools read it)::

    <log dir>/
      .lock                              writer lock (flock), empty
      embedlog.json                      topics, partition counts, configs (embedlog only)
      recovery-point-offset-checkpoint   Kafka checkpoint: topic partition offset
      log-start-offset-checkpoint        Kafka checkpoint: topic partition offset
      cleaner-offset-checkpoint          Kafka checkpoint (compacted topics)
      .kafka_cleanshutdown               present only after a clean close
      <topic>-<partition>/
        00000000000000000000.log         record batches back to back
        00000000000000000000.index       sparse offset index
        00000000000000000000.timeindex   sparse time index
        embedlog.segments                sizes of sealed segments (embedlog only)

Topic names are checked before any path is built from them: ``[a-zA-Z0-9._-]``, 1 to 249
characters, neither ``.`` nor ``..`` -- so a name can never climb out of the log directory.
"""

from __future__ import annotations

import os
import re

from .errors import InvalidTopicError

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_TOPIC_LENGTH",
    "SWAP_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "filename_prefix",
    "parse_partition_dir",
    "parse_segment_file",
    "partition_dir_name",
    "segment_path",
    "validate_topic",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+\Z")
_SEGMENT_RE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)((?:\.\w+)?)\Z")
# Kafka renames partitions scheduled for deletion, moving or stray replicas; readers skip them.
_IGNORED_DIR_RE = re.compile(r".*\.[0-9a-f]{32}-(delete|stray)\Z|.*-future\Z")


def validate_topic(name: object) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise
    :class:`~embedlog.errors.InvalidTopicError`. Runs before any file-system call."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is empty")
    if len(name) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters; the limit is 249")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _TOPIC_RE.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
        )
    return name


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>`` for a validated topic and a non-negative partition number."""
    if not isinstance(partition, int) or partition < 0:
        raise InvalidTopicError(f"partition must be a non-negative int, not {partition!r}")
    return f"{validate_topic(topic)}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a partition folder name, or ``None`` for anything else
    (split at the last ``-``, as Kafka does; ``-delete``/``-future``/``-stray`` are skipped)."""
    if _IGNORED_DIR_RE.match(name) or name == "__cluster_metadata-0":
        return None
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        return None
    if len(topic) > MAX_TOPIC_LENGTH:
        return None
    return topic, int(number)


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded base offset, so ``ls`` sorts segments numerically."""
    return f"{offset:020d}"


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, filename_prefix(base_offset) + suffix)


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``(base_offset, kind, extra_suffix)`` for e.g. ``00..05.log.swap`` → ``(5, ".log",
    ".swap")``; ``None`` for files that are not segment files."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3)
