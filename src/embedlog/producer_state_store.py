"""A partition's producer snapshots on disk: loading the producer state, writing and pruning
``<20-digit offset>.snapshot`` files (:data:`embedlog.naming.SNAPSHOT_SUFFIX`, the format of
:mod:`embedlog.producer_snapshot`).

A snapshot named ``N`` holds the state of every batch below offset ``N``. Rules:

* **load** (:func:`load_state`, the first time a writer needs the state after an open): the
  newest snapshot whose offset lies within ``[first segment's base, log end]``
  (:func:`snapshot_floor`) that reads and decodes is taken, and the batch headers at and after
  its offset are replayed (:meth:`~embedlog.producer_state.ProducerStateTable.replay`); one
  that is unreadable, corrupt (version, size, CRC, ranges), too large or not a regular file is
  passed over with a warning for the next older one, and without any the state is rebuilt
  from every batch header. A snapshot is never trusted beyond the log end, and never fatal;
* **write** (:func:`take_snapshot`): at a roll (offset = the new segment's base, once the old
  one is sealed and fsynced) and at a close (offset = the log end, once flushed), so a snapshot
  never covers offsets that are not durable. At a roll a partition whose state was never loaded
  loads it first (from the previous snapshot and the segment just sealed; a log without any
  snapshot is scanned once, at its first roll); at a close only a loaded state is written (an
  older snapshot stays good: the next open replays from it). Written through
  :func:`embedlog._io.write_atomic` (temporary file, fsync, rename, directory fsync); an I/O
  error reaches the caller like any other (at a roll it poisons the partition);
* **prune** (:func:`prune`, after each write and at the writer's open, after recovery): the
  snapshots above the log end (stale: recovery cut what they describe) or below the first
  segment's base are deleted, and all but the newest :data:`KEEP_SNAPSHOTS` of the rest.

A read-only open never writes nor prunes a snapshot, and loads none as producer state; its last
stable offset starts reading at the newest one (:func:`stable_seed`).

:func:`last_stable_offset` is a partition's last stable offset: its incremental
:class:`~embedlog.stable_offset.StableOffset`, told by the writer's producer state where an open
transaction began when its first batches were deleted (a read-only view, without that state,
stops at the log start for such a transaction, unless a snapshot after the deleted segments
says where it began).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Final, Protocol

from . import _io
from .errors import CorruptCheckpointError, CorruptionError, StorageError
from .naming import SNAPSHOT_SUFFIX, parse_segment_file, segment_path
from .producer_snapshot import (
    ENTRY_SIZE,
    HEADER_SIZE,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
)
from .producer_state import ProducerStateTable
from .segment.segment import Segment
from .stable_offset import StableOffset, StableSeed

__all__ = [
    "KEEP_SNAPSHOTS",
    "MAX_SNAPSHOT_BYTES",
    "StateOwner",
    "from_snapshots",
    "last_stable_offset",
    "load_state",
    "newest_snapshot",
    "prune",
    "read_snapshot",
    "snapshot_floor",
    "snapshot_offsets",
    "stable_seed",
    "take_snapshot",
]

log = logging.getLogger(__name__)

KEEP_SNAPSHOTS: Final = 2
"""Snapshots kept per partition (the newest ones)."""
MAX_SNAPSHOT_BYTES: Final = HEADER_SIZE + ENTRY_SIZE * (1 << 22)
"""The largest snapshot read (about 4 million producers, 193 MiB); a larger one is ignored."""


class StateOwner(Protocol):
    """What the store needs of a partition."""

    directory: str
    segments: list[Segment]
    start_offset: int
    producer_state: ProducerStateTable | None
    producer_id_expiration_ms: int

    @property
    def end_offset(self) -> int: ...


class StableOwner(Protocol):
    """What :func:`last_stable_offset` needs of a partition."""

    directory: str
    segments: list[Segment]
    start_offset: int
    writable: bool
    stable: StableOffset
    lock: threading.RLock

    @property
    def end_offset(self) -> int: ...

    def producer_states(self) -> ProducerStateTable: ...


def last_stable_offset(p: StableOwner) -> int:
    """``p``'s last stable offset (under its lock): where ``read_committed`` readers, the
    cleaner and tiering stop; at least the log start, and the log start while a transaction
    whose first batches were deleted is open (see :mod:`embedlog.transactions`). A read-only
    view starts its first reading at the newest producer snapshot (:func:`stable_seed`)."""
    known = (lambda: p.producer_states().txns.open) if p.writable else None
    seed = None if p.writable else (lambda: stable_seed(p))
    with p.lock:
        return p.stable.get(p.segments, p.end_offset, p.start_offset, known, seed)


def snapshot_offsets(directory: str, names: Sequence[str] | None = None) -> list[int]:
    """The offsets of the ``.snapshot`` files in ``directory`` (or among ``names``), sorted."""
    listed = os.listdir(directory) if names is None else names
    return sorted(p[0] for n in listed
                  if (p := parse_segment_file(n)) and p[1] == SNAPSHOT_SUFFIX and not p[2])


def read_snapshot(path: str) -> list[SnapshotEntry] | None:
    """The entries of the snapshot file at ``path``; ``None`` if it does not exist. Raises
    :class:`~embedlog.errors.CorruptCheckpointError` for a corrupt file, one larger than
    :data:`MAX_SNAPSHOT_BYTES` or one that is not a regular file, ``StorageError`` when it
    cannot be read."""
    data = _io.read_regular(path, MAX_SNAPSHOT_BYTES + 1, error=CorruptCheckpointError)
    if data is None:
        return None
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise CorruptCheckpointError(
            f"producer snapshot larger than {MAX_SNAPSHOT_BYTES} bytes", path=path)
    return decode_snapshot(data, path=path)


def load_state(owner: StateOwner) -> ProducerStateTable:
    """The producer state of ``owner``'s segments: the newest usable snapshot and the batches
    from its offset on (:func:`from_snapshots`), else every batch header."""
    table = from_snapshots(owner)
    if table is None:
        table = ProducerStateTable.scan(owner.segments, owner.producer_id_expiration_ms)
    return table


def from_snapshots(owner: StateOwner) -> ProducerStateTable | None:
    """The state from the newest usable snapshot and the batches from its offset on; ``None``
    when no snapshot is usable."""
    found = newest_snapshot(owner.directory, snapshot_floor(owner), owner.end_offset)
    if found is None:
        return None
    offset, entries = found
    table = ProducerStateTable.from_snapshot(entries, owner.producer_id_expiration_ms)
    table.replay(owner.segments, offset)
    return table


def snapshot_floor(owner: StateOwner | StableOwner) -> int:
    """The lowest offset a usable snapshot of ``owner`` may have: its first segment's base (a
    snapshot below the log start inside that segment still holds the producers whose batches
    went with the segments deleted before it; Kafka's log, too, keeps snapshots by segment base
    offsets, ``minSnapshotsOffsetToRetain``); the log start when it has no segment."""
    return owner.segments[0].base_offset if owner.segments else owner.start_offset


def newest_snapshot(directory: str, start: int, end: int, *, quiet: bool = False
                    ) -> tuple[int, list[SnapshotEntry]] | None:
    """The offset and entries of the newest snapshot of ``directory`` within ``[start, end]``
    that reads and decodes (one that does not is passed over, with a warning unless
    ``quiet``); ``None`` when there is none."""
    for offset in reversed(snapshot_offsets(directory)):
        if not start <= offset <= end:
            continue
        path = segment_path(directory, offset, SNAPSHOT_SUFFIX)
        try:
            entries = read_snapshot(path)
        except (CorruptionError, StorageError) as exc:
            if not quiet:
                log.warning("ignoring producer snapshot %s: %s", path, exc)
            continue
        if entries is not None:
            return offset, entries
    return None


def stable_seed(p: StableOwner) -> StableSeed | None:
    """Where a read-only view's :class:`~embedlog.stable_offset.StableOffset` may start instead
    of the first segment: the newest usable snapshot (see :func:`newest_snapshot`) from
    :func:`snapshot_floor` on, its producers and the first offsets of the transactions it has
    open. ``None`` without one, or when the folder cannot be listed (the view then reads every
    batch header)."""
    try:
        found = newest_snapshot(p.directory, snapshot_floor(p), p.end_offset, quiet=True)
    except OSError:
        return None
    if found is None:
        return None
    offset, entries = found
    return StableSeed(offset, frozenset(e.producer_id for e in entries),
                      {e.producer_id: e.current_txn_first_offset for e in entries
                       if e.current_txn_first_offset >= 0})


def take_snapshot(owner: StateOwner, offset: int, *, load: bool) -> None:
    """Write ``owner``'s producer state as the snapshot of ``offset`` (its log end: every batch
    below it is in the state and durable), then :func:`prune`. A state not loaded yet is loaded
    first when ``load`` (a roll), else nothing is written (a close). Nothing is written when a
    snapshot of ``offset`` exists already. I/O errors propagate (``StorageError``)."""
    table = owner.producer_state
    if table is None:
        if not load:
            return
        table = owner.producer_state = load_state(owner)
    if offset in snapshot_offsets(owner.directory):
        return
    _io.write_atomic(segment_path(owner.directory, offset, SNAPSHOT_SUFFIX),
                     encode_snapshot(table.snapshot_entries()))
    prune(owner.directory, snapshot_floor(owner), offset)


def prune(directory: str, start: int, end: int, keep: int = KEEP_SNAPSHOTS) -> None:
    """Delete the snapshots of ``directory`` above ``end`` or below ``start``, and all but the
    newest ``keep`` of the others; the directory is fsynced when one went (a stale snapshot
    must not come back after a crash, when the log may have grown past it again)."""
    offsets = snapshot_offsets(directory)
    kept = [o for o in offsets if start <= o <= end][-keep:] if keep else []
    doomed = [o for o in offsets if o not in kept]
    for offset in doomed:
        _io.unlink(segment_path(directory, offset, SNAPSHOT_SUFFIX))
    if doomed:
        _io.fsync_dir(directory)
