"""Is this folder a log? The check :func:`embedlog.open` makes before touching anything.

A path is accepted when it does not exist yet (a writer creates it), or is a folder that is

* an embedlog log: it has ``embedlog.json``, or holds nothing but the root files a log without
  topics has (``.lock``, checkpoints, ``.kafka_cleanshutdown``, ``__groups/``...), which
  includes an empty folder;
* a Kafka broker's log directory: it has ``meta.properties`` or
  ``replication-offset-checkpoint``, or a ``<topic>-<partition>`` folder holding a segment
  file. Readers open it freely; a writer only with ``adopt=True``, because writing adds
  embedlog's files and rewrites the broker's checkpoints.

Anything else -- a regular file, a folder of someone else's files -- raises
:class:`~embedlog.errors.NotALogError` before a single byte is written. The check only lists
folders (the root and the partition folders until one holds a segment); it reads no file.
"""

from __future__ import annotations

import os

from . import _io
from .errors import NotALogError, UsageError
from .naming import (
    CLEAN_SHUTDOWN_FILE,
    GROUPS_DIR,
    LOCK_FILE,
    LOST_FOUND_DIR,
    METADATA_FILE,
    PRODUCER_IDS_FILE,
    REPLICATION_CHECKPOINT,
    ROOT_CHECKPOINTS,
    SPARK_STAGING_DIR,
    TIERING_FILE,
    TMP_SUFFIX,
    TXN_STATE_FILE,
    parse_partition_dir,
    parse_segment_file,
)

__all__ = ["KAFKA_MARKERS", "check_folder", "classify", "prepare_folder"]

KAFKA_MARKERS = ("meta.properties", REPLICATION_CHECKPOINT)
"""Root files only a Kafka broker writes."""

_LOG_ROOT_FILES = frozenset(
    {LOCK_FILE, CLEAN_SHUTDOWN_FILE, PRODUCER_IDS_FILE, GROUPS_DIR, SPARK_STAGING_DIR,
     TXN_STATE_FILE, LOST_FOUND_DIR, TIERING_FILE, *ROOT_CHECKPOINTS} - {REPLICATION_CHECKPOINT}
)


def classify(path: str) -> str:
    """``"missing"``, ``"embedlog"``, ``"kafka"``, ``"partition"`` (a folder of segment
    files), ``"file"`` or ``"foreign"``."""
    if not os.path.lexists(path):
        return "missing"
    if not os.path.isdir(path):
        return "file"
    try:
        names = os.listdir(path)
    except OSError:
        return "embedlog"  # unreadable: the open itself reports the operating system's error
    if METADATA_FILE in names:
        return "embedlog"
    if any(name in names for name in KAFKA_MARKERS) or _has_kafka_partition(path, names):
        return "kafka"
    if all(name in _LOG_ROOT_FILES or name.endswith(TMP_SUFFIX) for name in names):
        return "embedlog"
    if any(parse_segment_file(name) is not None for name in names):
        return "partition"
    return "foreign"


def _has_kafka_partition(root: str, names: list[str]) -> bool:
    for name in names:
        if parse_partition_dir(name) is None:
            continue
        try:
            entries = os.listdir(os.path.join(root, name))
        except OSError:  # not a folder, or unreadable
            continue
        if any(parse_segment_file(entry) is not None for entry in entries):
            return True
    return False


def check_folder(path: str, *, writing: bool, adopt: bool) -> None:
    """Raise :class:`NotALogError` unless ``path`` may be opened as described above."""
    kind = classify(path)
    if kind == "file":
        raise NotALogError(f"{path} is a file, not a log directory")
    if kind == "partition":
        raise NotALogError(f"{path} is a partition folder; open the log directory above it")
    if kind == "foreign":
        raise NotALogError(
            f"{path} is not a log: it is neither an embedlog log nor a Kafka log directory "
            "(open a new or empty folder to create a log)"
        )
    if kind == "kafka" and writing and not adopt:
        raise NotALogError(
            f"{path} is a Kafka broker's log directory: open it read_only=True, or pass "
            "adopt=True (--adopt) to write into it (embedlog adds its own files and rewrites "
            "the checkpoints)"
        )


def prepare_folder(path: str, *, writing: bool, create: bool, adopt: bool) -> None:
    """The first step of an open: :func:`check_folder`, then create a missing log folder for a
    writer with ``create`` (its parent must exist; both are fsynced), and refuse a symlink."""
    check_folder(path, writing=writing, adopt=adopt)
    if not os.path.isdir(path):
        parent = os.path.dirname(path)
        if not (writing and create and os.path.isdir(parent)):
            raise UsageError(f"no log directory at {path}")
        _io.mkdir(path)
        _io.fsync_dir(parent)
    if os.path.islink(path):
        raise UsageError(f"{path} is a symlink; open the real directory")
