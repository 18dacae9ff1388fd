"""The files at the root of a log folder, other than the writer lock and the partitions.

::

    embedlog.json                      topics, partition counts, configs (embedlog only)
    recovery-point-offset-checkpoint   Kafka checkpoint: below this offset a partition is on disk
    log-start-offset-checkpoint        Kafka checkpoint: each partition's log start offset
    .kafka_cleanshutdown               present only after a clean close

``embedlog.json`` layout: ``{"version": 1, "topics": {"<name>": {"partitions": <int>,
"config": {<Kafka name>: <value set explicitly or differing from the default>},
"dense": true, "id": "<32 hex digits>"}}}``, replaced atomically. ``"id"`` (Kafka's topic id,
KIP-516; a random UUID given at creation, absent from topics created by an older embedlog)
tells a topic from one deleted before under the same name: a read-only view that finds
another id (or fewer partitions) opens the topic anew (:class:`embedlog.topics.TopicTable`).
``"dense"`` marks a topic embedlog created, so its active segments have no offset gap
(:mod:`embedlog.segment.rules`); a topic found in a Kafka folder, or written by an older
embedlog, has none and keeps Kafka's rules. A Kafka folder
has no ``embedlog.json``: its topics are discovered from the ``<topic>-<partition>`` folder
names (:func:`discover_topics`). Everything read here is
untrusted input; a bad file raises :class:`~embedlog.errors.CorruptCheckpointError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from typing import Any, Final

from . import _io, checkpoint
from ._json import load_untrusted
from .config import TopicConfig
from .errors import CorruptCheckpointError, UsageError
from .naming import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_CHECKPOINT,
    METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT,
    parse_partition_dir,
    validate_topic,
)
from .records import TopicPartition

__all__ = [
    "CLEAN_SHUTDOWN",
    "LOG_START",
    "MAX_PARTITIONS",
    "METADATA",
    "RECOVERY_POINT",
    "StartOffsetWatch",
    "discover_topics",
    "parse_metadata",
    "partition_folder_count",
    "read_metadata",
    "read_root_checkpoint",
    "read_topics",
    "take_clean_marker",
    "write_clean_marker",
    "write_metadata",
]

METADATA: Final = METADATA_FILE
RECOVERY_POINT: Final = RECOVERY_POINT_CHECKPOINT
LOG_START: Final = LOG_START_CHECKPOINT
CLEAN_SHUTDOWN: Final = CLEAN_SHUTDOWN_FILE

Topics = dict[str, tuple[int, TopicConfig]]


def read_metadata(root: str, *, dense: set[str] | None = None,
                  ids: dict[str, str] | None = None) -> Topics | None:
    """``{topic: (partition count, config)}`` from ``embedlog.json``; None without the file.
    ``dense`` receives the topics marked ``"dense"``, ``ids`` the topics' ids."""
    path = os.path.join(root, METADATA)
    try:  # a regular file only: a FIFO would block, a symlink could point anywhere
        raw = _io.read_regular(path, _MAX_METADATA_BYTES + 1, error=CorruptCheckpointError)
    except OSError as exc:
        raise CorruptCheckpointError(f"unreadable topic metadata: {exc}", path=path) from exc
    if raw is None:
        return None
    return parse_metadata(raw, path=path, dense=dense, ids=ids)


def read_topics(root: str, *, dense: set[str] | None = None,
                ids: dict[str, str] | None = None) -> Topics:
    """``{topic: (partition count, config)}`` of the log folder ``root``: ``embedlog.json``
    (:func:`read_metadata`, which fills ``dense``), or in a Kafka folder, which has none, its
    partition folders (:func:`discover_topics`)."""
    meta = read_metadata(root, dense=dense, ids=ids)
    return discover_topics(root) if meta is None else meta


def discover_topics(root: str) -> Topics:
    """Topics of a plain Kafka directory, from its ``<topic>-<partition>`` folders."""
    found: dict[str, int] = {}
    for entry in os.scandir(root):
        parsed = parse_partition_dir(entry.name)
        if parsed and entry.is_dir(follow_symlinks=False):
            found[parsed[0]] = max(found.get(parsed[0], 0), parsed[1] + 1)
    return {name: (n, TopicConfig()) for name, n in sorted(found.items())}


def partition_folder_count(root: str) -> int:
    """How many ``<topic>-<partition>`` entries ``root`` holds (folders, or whatever else
    wears such a name: the open judges those later): the most entries a root checkpoint can
    justify, as entries leave the checkpoints before their folders go."""
    return sum(1 for name in os.listdir(root) if parse_partition_dir(name))


def read_root_checkpoint(root: str, name: str, max_entries: int
                         ) -> dict[TopicPartition, tuple[int, int]]:
    """``{partition: (offset, line number)}`` of the root checkpoint ``name`` (none if it does
    not exist), refusing -- :class:`~embedlog.errors.CorruptCheckpointError` -- a file with
    more than ``max_entries`` entries before parsing them, or larger than they can be."""
    rows = checkpoint.OFFSETS.read(os.path.join(root, name), max_entries=max_entries)
    return {TopicPartition(str(topic), int(part)): (int(offset), line)
            for line, (topic, part, offset) in enumerate(rows or (), start=3)}


def write_metadata(root: str, topics: Mapping[str, tuple[int, TopicConfig]],
                   dense: Collection[str] = (), ids: Mapping[str, str] | None = None) -> None:
    """Replace ``embedlog.json`` with ``topics``, atomically; the topics in ``dense`` are
    marked ``"dense": true``, those in ``ids`` get their ``"id"``."""
    ids = ids or {}
    doc = {
        "version": 1,
        "topics": {
            name: {"partitions": count, "config": _non_default(config)}
            | ({"dense": True} if name in dense else {})
            | ({"id": ids[name]} if name in ids else {})
            for name, (count, config) in topics.items()
        },
    }
    _io.write_atomic(
        os.path.join(root, METADATA), json.dumps(doc, indent=1, sort_keys=True).encode()
    )


def take_clean_marker(root: str) -> bool:
    """Whether the last close was clean; the marker is removed (durably) so that a crash from
    now on is seen as one."""
    marker = os.path.join(root, CLEAN_SHUTDOWN)
    clean = os.path.exists(marker)
    if clean:
        _io.unlink(marker)
        _io.fsync_dir(root)
    return clean


def write_clean_marker(root: str) -> None:
    """The last step of a clean close: create the marker, durably."""
    marker = _io.open_file(os.path.join(root, CLEAN_SHUTDOWN), os.O_WRONLY | os.O_CREAT)
    _io.fsync(marker)
    _io.close(marker)
    _io.fsync_dir(root)


class StartOffsetWatch:
    """Read-only views: the writer's ``log-start-offset-checkpoint``, re-read only when the file
    changed (so a ``delete_records`` inside a segment is seen)."""

    def __init__(self, root: str) -> None:
        self._path = os.path.join(root, LOG_START)
        self._stamp: tuple[int, int, int] | None = None
        self._cache: dict[TopicPartition, int] = {}

    def get(self, tp: TopicPartition) -> int | None:
        try:
            st = os.lstat(self._path)
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                self._cache = checkpoint.read_offsets(self._path)
            except CorruptCheckpointError:
                return None  # being replaced right now, or damaged: keep what we know
            self._stamp = stamp
        return self._cache.get(tp)


_MAX_METADATA_BYTES = 64 * 1024 * 1024
MAX_PARTITIONS: Final = 1 << 20
"""The most partitions a topic can have (embedlog.json naming more is damage)."""


def parse_metadata(raw: bytes, *, path: str | None = None, dense: set[str] | None = None,
                   ids: dict[str, str] | None = None) -> dict[str, tuple[int, TopicConfig]]:
    """``{topic: (partition count, config)}`` from the bytes of ``embedlog.json``; ``dense``
    (when given) receives the names of the topics marked ``"dense": true``, ``ids`` the ids
    of the topics that have one.

    Layout: ``{"version": 1, "topics": {"<name>": {"partitions": <int>, "config": {<Kafka
    name>: <value>}, "dense": <bool, optional>, "id": <32 lowercase hex digits, optional>}}}``.
    Anything else -- bad JSON, wrong types, an invalid topic name, a partition count outside
    ``1..2**20``, a config Kafka would reject, an id that is not one -- raises
    :class:`~embedlog.errors.CorruptCheckpointError`.
    """

    def bad(msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"topic metadata: {msg}", path=path)

    doc = load_untrusted(raw, limit=_MAX_METADATA_BYTES, fail=lambda why: bad(f"unreadable: {why}"))
    topics = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(topics, dict):
        raise bad("unknown layout")
    out: dict[str, tuple[int, TopicConfig]] = {}
    for name, info in topics.items():
        try:
            validate_topic(name)
        except UsageError as exc:
            raise bad(str(exc)) from None
        count = info.get("partitions") if isinstance(info, dict) else None
        config = info.get("config", {}) if isinstance(info, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or not (
                0 < count <= MAX_PARTITIONS):
            raise bad(f"topic {name!r} has an invalid partition count {count!r}")
        if not isinstance(config, dict):
            raise bad(f"topic {name!r} has a config that is not an object")
        marked = info.get("dense", False)
        if not isinstance(marked, bool):
            raise bad(f"topic {name!r} has a dense flag that is not a boolean")
        if marked and dense is not None:
            dense.add(name)
        topic_id = info.get("id")
        if topic_id is not None and not _is_topic_id(topic_id):
            raise bad(f"topic {name!r} has an id that is not 32 lowercase hex digits")
        if topic_id is not None and ids is not None:
            ids[name] = topic_id
        try:
            out[name] = (count, TopicConfig.from_kafka(config))
        except (UsageError, OverflowError) as exc:
            raise bad(f"topic {name!r}: {exc}") from None
    return out


def _is_topic_id(value: object) -> bool:
    return (isinstance(value, str) and len(value) == 32
            and all(c in "0123456789abcdef" for c in value))


def _non_default(config: TopicConfig) -> dict[str, Any]:
    return config.overrides()
