"""Names on disk: every file and folder name embedlog reads or writes, topic validation,
partition folders and segment files.

Layout of a log directory (Kafka's, so Kafka tools read it)::

    <log dir>/
      .lock                              LOCK_FILE: writer lock (flock), empty
      embedlog.json                      METADATA_FILE: topics, partition counts, configs
      recovery-point-offset-checkpoint   RECOVERY_POINT_CHECKPOINT: topic partition offset
      log-start-offset-checkpoint        LOG_START_CHECKPOINT: topic partition offset
      cleaner-offset-checkpoint          CLEANER_CHECKPOINT (compacted topics)
      replication-offset-checkpoint      REPLICATION_CHECKPOINT (a broker's; read, not written)
      .kafka_cleanshutdown               CLEAN_SHUTDOWN_FILE: present only after a clean close
      embedlog.producer-ids              PRODUCER_IDS_FILE: next idempotent producer id
      embedlog.transactions              TXN_STATE_FILE: the transaction coordinator's state
                                         log (embedlog.txn_state_log)
      .spark-staging/<job>/              SPARK_STAGING_DIR: rows of a Spark write not yet
                                         committed
      __groups/<group>/                  GROUPS_DIR: consumer groups
        lock                             GROUP_LOCK_FILE: flock while membership/offsets change
        state.json                       GROUP_STATE_FILE: generation, assignor, members
        offsets                          GROUP_OFFSETS_FILE: committed offsets (checkpoint)
        members/<member id>              GROUP_MEMBERS_DIR: a live member's lock and heartbeat
        leases/<topic>-<partition>       GROUP_LEASES_DIR: the consuming member's lease
      <topic>-<partition>/
        00000000000000000000.log         LOG_SUFFIX: record batches back to back
        00000000000000000000.index       INDEX_SUFFIX: sparse offset index
        00000000000000000000.timeindex   TIMEINDEX_SUFFIX: sparse time index
        00000000000000000000.txnindex    TXNINDEX_SUFFIX: aborted transactions whose ABORT
                                         marker is in the segment (embedlog.index.txn_index)
        embedlog.segments                SEGMENT_MANIFEST: sizes of sealed segments
        00000000000000000042.snapshot    SNAPSHOT_SUFFIX: Kafka's producer-state snapshot of
                                         every batch below offset 42 (the newest two kept;
                                         embedlog.producer_state_store)
        embedlog.remote-manifest         REMOTE_MANIFEST: the segments published to the
                                         remote store (tiered storage; a copy of the remote's)

A tiered log (:mod:`embedlog.tiering`) has a root file ``embedlog.tiering``
(TIERING_FILE: the remote URI) and mirrors its partition folders on the remote::

    <remote root>/embedlog.json                        the topic table, copied
    <remote root>/<topic>-<partition>/<20 digits>.log|.index|.timeindex|.txnindex
    <remote root>/<topic>-<partition>/embedlog.remote-manifest   the published segments

Transient suffixes: ``.cleaned`` (a compaction's output), ``.swap`` (an output being swapped
in), ``.deleted`` (a segment being removed), ``.tmp`` (a small file being replaced, see
:func:`embedlog._io.write_atomic`), ``.aborted`` (the marker of an aborted Spark job next to its
staging folder).

Topic names are checked before any path is built from them: ``[a-zA-Z0-9._-]``, 1 to 249
characters, neither ``.`` nor ``..`` -- so a name can never climb out of the log directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Final

from .errors import InvalidTopicError

__all__ = [
    "ABORTED_SUFFIX",
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "DAMAGED_SUFFIX",
    "DELETED_SUFFIX",
    "GROUPS_DIR",
    "GROUP_LEASES_DIR",
    "GROUP_LOCK_FILE",
    "GROUP_MEMBERS_DIR",
    "GROUP_OFFSETS_FILE",
    "GROUP_STATE_FILE",
    "INDEX_SUFFIX",
    "LOCK_FILE",
    "LOG_START_CHECKPOINT",
    "LOG_SUFFIX",
    "LOST_FOUND_DIR",
    "MAX_TOPIC_LENGTH",
    "METADATA_FILE",
    "PRODUCER_IDS_FILE",
    "RECOVERY_POINT_CHECKPOINT",
    "REMOTE_MANIFEST",
    "REPLICATION_CHECKPOINT",
    "ROOT_CHECKPOINTS",
    "SEGMENT_MANIFEST",
    "SNAPSHOT_SUFFIX",
    "SPARK_STAGING_DIR",
    "SWAP_SUFFIX",
    "TIERING_FILE",
    "TIMEINDEX_SUFFIX",
    "TMP_SUFFIX",
    "TXNINDEX_SUFFIX",
    "TXN_STATE_FILE",
    "damaged_path",
    "filename_prefix",
    "parse_partition_dir",
    "parse_segment_file",
    "partition_dir_name",
    "segment_bases",
    "segment_path",
    "segment_paths",
    "validate_topic",
]

# -- files of the log directory
LOCK_FILE: Final = ".lock"
METADATA_FILE: Final = "embedlog.json"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
REPLICATION_CHECKPOINT: Final = "replication-offset-checkpoint"
ROOT_CHECKPOINTS: Final = (RECOVERY_POINT_CHECKPOINT, LOG_START_CHECKPOINT, CLEANER_CHECKPOINT,
                           REPLICATION_CHECKPOINT)
"""Kafka's checkpoint files at the root of a log directory (the last one a broker's only)."""
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
PRODUCER_IDS_FILE: Final = "embedlog.producer-ids"
TXN_STATE_FILE: Final = "embedlog.transactions"
SPARK_STAGING_DIR: Final = ".spark-staging"
GROUPS_DIR: Final = "__groups"

# -- files of a group folder (``<log dir>/__groups/<group>/``)
GROUP_LOCK_FILE: Final = "lock"
GROUP_STATE_FILE: Final = "state.json"
GROUP_OFFSETS_FILE: Final = "offsets"
GROUP_MEMBERS_DIR: Final = "members"
GROUP_LEASES_DIR: Final = "leases"

# -- files of a partition folder
SEGMENT_MANIFEST: Final = "embedlog.segments"
REMOTE_MANIFEST: Final = "embedlog.remote-manifest"
"""Tiered storage: the published segments of a partition, on the remote and copied locally."""
TIERING_FILE: Final = "embedlog.tiering"
"""Tiered storage: the root file naming the remote URI of a log folder."""
LOST_FOUND_DIR: Final = "lost+found"
"""Root folder where ``embedlog recover --truncate-damaged`` moves damaged bytes; ``+`` keeps
it out of the ``<topic>-<partition>`` namespace."""
DAMAGED_SUFFIX: Final = ".damaged"
LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIMEINDEX_SUFFIX: Final = ".timeindex"
TXNINDEX_SUFFIX: Final = ".txnindex"
SNAPSHOT_SUFFIX: Final = ".snapshot"

# -- transient suffixes
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
DELETED_SUFFIX: Final = ".deleted"
TMP_SUFFIX: Final = ".tmp"
ABORTED_SUFFIX: Final = ".aborted"

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
    """``<directory>/<20-digit base offset><suffix>``."""
    return os.path.join(directory, filename_prefix(base_offset) + suffix)


def segment_paths(folder: str, base_offsets: list[int], suffix: str) -> list[str]:
    """:func:`segment_path` of each of ``base_offsets`` in the folder ``folder`` (in one pass:
    planning names a partition's segments at once)."""
    prefix = os.path.join(folder, "")
    return [f"{prefix}{base:020d}{suffix}" for base in base_offsets]


def damaged_path(root: str, partition_dir: str, base_offset: int, position: int) -> str:
    """Where salvage moves the damaged bytes of a segment, from byte ``position`` on:
    ``<root>/lost+found/<topic>-<partition>/<20-digit base>.log.<position>.damaged``."""
    return os.path.join(root, LOST_FOUND_DIR, partition_dir,
                        f"{filename_prefix(base_offset)}{LOG_SUFFIX}.{position}{DAMAGED_SUFFIX}")


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``(base_offset, kind, extra_suffix)`` for e.g. ``00..05.log.swap`` → ``(5, ".log",
    ".swap")``; ``None`` for files that are not segment files."""
    m = _SEGMENT_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3)


def segment_bases(names: Iterable[str]) -> list[int]:
    """Sorted base offsets of the plain ``.log`` files among ``names`` (a folder listing)."""
    return sorted(
        p[0] for n in names if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and not p[2]
    )
