"""Opening a partition's folder: the writer's recovery and the read-only view.

The writer (:func:`recover`) follows Kafka's ``LogLoader`` passes:

1. **leftovers**: delete ``.deleted`` / ``.cleaned`` files and stray ``.tmp`` files; roll every
   ``.swap`` forward over the segments it replaces (:func:`complete_swaps`: an interrupted
   compaction swap, see :mod:`embedlog.compaction.swap` for the protocol);
2. **manifest**: compare sealed segments with ``embedlog.segments``
   (:func:`embedlog.manifest.check_sealed`);
3. **log start**: delete whole segments below the log start offset (an interrupted retention);
4. **recovery**: validate every batch after the recovery point when the last close was not clean
   (after a clean close only the active segment's state is loaded, and nothing is fsynced),
   cut a torn tail, drop the unflushed segments after a cut, rebuild indexes, seal every
   segment but the last and fsync the tail. A sealed segment is never cut. The ``.txnindex``
   of every validated segment is rebuilt from the markers (after a clean close: the active
   segment's, if it has no usable one; :func:`~embedlog.transactions.rebuild_txn_indexes`).

A read-only process's view is opened and refreshed by :mod:`embedlog.view_loader`, on this
module's listing (:func:`check_folder`, :func:`place`). Segments opened for an open that then
fails are closed again (:func:`opened`, :func:`close_all`): none is left holding descriptors.

This module imports no partition or compaction code; both build on it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from . import _io
from .errors import (
    CorruptCheckpointError,
    CorruptionError,
    PartitionQuarantinedError,
    StorageError,
)
from .manifest import check_sealed, read_manifest, write_manifest
from .naming import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    parse_segment_file,
    segment_bases,
    segment_path,
)
from .segment.rules import bounds_of, end_offset_of, stray_empty_tail
from .segment.segment import Segment, SegmentSettings
from .transactions import rebuild_txn_indexes

__all__ = [
    "INDEX_KINDS", "SEGMENT_KINDS", "Stamp", "check_folder", "close_all", "complete_swaps",
    "opened", "place", "quarantine", "quarantine_error", "recover", "recover_or_quarantine",
    "rename_kind", "roll_forward", "swap_bases",
]  # fmt: skip

log = logging.getLogger(__name__)

SEGMENT_KINDS: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
"""The files of one segment, by suffix."""
INDEX_KINDS: Final = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
"""A segment's files besides the ``.log`` (renamed before it in a swap)."""

Stamp = tuple[int, int, int] | None
"""A manifest's stamp as a view last checked it (:func:`embedlog.manifest.manifest_stamp`)."""


def check_folder(directory: str) -> list[str]:
    """The names in a partition folder; a planted symbolic link is never followed."""
    if os.path.islink(directory):
        raise StorageError(errno.ELOOP, "partition folder is a symbolic link", directory)
    return os.listdir(directory)


def place(segments: list[Segment], settings: SegmentSettings, *, active_tail: bool = True
          ) -> list[Segment]:
    """The one place a partition's ``segments`` (sorted) get their offset rules (recovery,
    quarantine, read-only views; :func:`~embedlog.segment.rules.bounds_of`); the last is dense
    only if it is the active segment (``active_tail``: not a sealed one left last). Returns them."""
    dense = settings.dense_tail and active_tail
    for seg, bounds in zip(segments, bounds_of(segments, dense_tail=dense), strict=True):
        seg.bounds = bounds
    return segments


def opened(bases: Iterable[int], segment: Callable[[int], Segment]) -> list[Segment]:
    """``[segment(b) for b in bases]``; when one of them raises, those already opened are
    closed again before the error goes on."""
    segments: list[Segment] = []
    try:
        for base in bases:
            segments.append(segment(base))
    except BaseException:
        close_all(segments)
        raise
    return segments


def close_all(segments: Iterable[Segment]) -> None:
    """Close ``segments`` that nothing else holds (an open that failed), each whatever the
    others raise."""
    for seg in segments:
        with contextlib.suppress(Exception):
            seg.close()


# ---------------------------------------------------------------------------- the writer


def recover(
    directory: str,
    settings: SegmentSettings,
    *,
    recovery_point: int | None,
    start_offset: int,
    clean: bool,
    start_from: tuple[str, int] | None = None,
) -> list[Segment]:
    """The writer's open: the passes of the module notes. Returns the segments, every one but
    the last sealed, the last open for appending (none for an empty folder).

    Damage raises :class:`~embedlog.errors.CorruptionError` (the caller quarantines the
    partition, :func:`quarantine`), with every segment closed again. Checkpoints are checked
    against the segments (``start_from``: the log start's checkpoint file and line, for the
    message): a log start beyond the log end is damage (Kafka deletes every segment instead,
    trusting its replicas); a recovery point beyond the end after an unclean shutdown is
    clamped with a warning, as Kafka does (it only decides where validation starts)."""
    names = _clean_leftovers(directory, check_folder(directory))
    bases = segment_bases(names)
    sealed = check_sealed(directory, bases, start_offset)
    segments = opened(bases, lambda b: Segment(directory, b, settings, writable=False))
    try:
        _drop_below_start(directory, segments, start_offset)
        revived = _drop_stray_empty_tail(directory, segments, sealed)
        place(segments, settings, active_tail=not revived)
        _recover_segments(directory, settings, segments, sealed, recovery_point, clean)
        _check_end(directory, segments, recovery_point, clean, start_offset, start_from)
    except BaseException:
        close_all(segments)
        raise
    return segments


def _check_end(
    directory: str,
    segments: list[Segment],
    recovery_point: int | None,
    clean: bool,
    start_offset: int,
    start_from: tuple[str, int] | None,
) -> None:
    """Cross-check the recovered log end with the checkpoints (see :func:`recover`)."""
    if not segments:
        return
    end = end_offset_of(segments)
    if clean and recovery_point is not None and end != recovery_point:
        # A clean close checkpoints the end offset: a log that now ends elsewhere lost
        # flushed records (a cut at a batch boundary, which CRCs cannot see) or has a
        # damaged base offset (outside the CRC too).
        raise CorruptionError(
            f"the log ends at offset {end}, but it was closed cleanly at "
            f"{recovery_point}: flushed records are missing or damaged",
            path=directory,
        )
    if start_offset > end:
        # The log start is checkpointed only up to records already on disk
        # (delete_records flushes first), so a start past the end means lost records or a
        # damaged checkpoint; accepting it would hide the segments' records and put the next
        # append past them.
        path, line = start_from or (directory, 0)
        raise CorruptCheckpointError(
            f"log start offset {start_offset} of {os.path.basename(directory)}"
            f"{f' (line {line})' if line else ''} is beyond its log end offset {end}",
            path=path,
        )
    if recovery_point is not None and recovery_point > end:
        log.warning("%s: recovery point %d is beyond the log end offset %d; using %d",
                    directory, recovery_point, end, end)


def recover_or_quarantine(directory: str, settings: SegmentSettings, **kw: Any
                          ) -> tuple[list[Segment], CorruptionError | None]:
    """:func:`recover` (keywords as there), or on damage the :func:`quarantine` view and the
    damage."""
    try:
        return recover(directory, settings, **kw), None
    except CorruptionError as exc:
        return quarantine(directory, settings, exc), exc


def quarantine(directory: str, settings: SegmentSettings, damage: CorruptionError
               ) -> list[Segment]:
    """The read-only segments of a partition whose writer open found ``damage``: every
    segment up to the damaged one (included when it exists: its records before the damage stay
    readable; a read reaching the damage raises), none after it. Nothing is modified."""
    listed = bases = segment_bases(check_folder(directory))
    parsed = parse_segment_file(os.path.basename(damage.path or ""))
    if parsed is not None and os.path.dirname(damage.path or "") == directory:
        present = os.path.exists(damage.path or "")
        bases = [b for b in bases if b < parsed[0] or (present and b == parsed[0])]
    log.error("%s is quarantined (appends refused, reads up to the damage): %s",
              directory, damage)
    segments = opened(bases, lambda b: Segment(directory, b, settings, writable=False))
    return place(segments, settings, active_tail=bases == listed)


class _Named(Protocol):
    topic: str
    partition: int
    directory: str


def quarantine_error(part: _Named, damage: CorruptionError) -> PartitionQuarantinedError:
    """The error an append to a quarantined partition raises."""
    topic, partition, root = part.topic, part.partition, os.path.dirname(part.directory)
    return PartitionQuarantinedError(
        f"partition {topic}-{partition} is quarantined: {damage.reason}. Its records before "
        f"the damage can be read; appends are refused until it is salvaged with "
        f"`embedlog recover --truncate-damaged {root}` (which moves the damaged bytes aside "
        "and reports what was lost)",
        damage,
    )


def _clean_leftovers(directory: str, names: list[str]) -> list[str]:
    """Delete ``.deleted``/``.cleaned`` files and stray ``.tmp``; roll ``.swap`` files forward.
    Returns the names the folder then holds."""
    keep, swaps = [], []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
            _io.unlink(path)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(name)
        else:
            keep.append(name)
    if swaps:
        keep = complete_swaps(directory, keep, swaps)
    if len(keep) != len(names):
        _io.fsync_dir(directory)
    return keep


def _drop_below_start(directory: str, segments: list[Segment], start_offset: int) -> None:
    """Delete whole segments that lie below the log start offset (an interrupted retention)."""
    dropped = False
    while len(segments) > 1 and segments[1].base_offset <= start_offset:
        segments.pop(0).delete()
        dropped = True
    if dropped:
        _io.fsync_dir(directory)


def _drop_stray_empty_tail(directory: str, segments: list[Segment], sealed: dict[int, int]
                           ) -> bool:
    """Delete empty segment files after the writer's active segment (they hold no byte; see
    :func:`~embedlog.segment.rules.stray_empty_tail`); the last segment standing becomes the
    active one again, so it leaves the manifest of sealed sizes (returns whether it was in it)."""
    strays = stray_empty_tail(segments)
    if not strays:
        return False
    log.warning("%s: deleting %d empty segment file(s) after the data", directory, strays)
    for seg in segments[-strays:]:
        seg.delete()
    del segments[-strays:]
    _io.fsync_dir(directory)
    if revived := sealed.pop(segments[-1].base_offset, None) is not None:
        write_manifest(directory, sealed)
    return revived


def _recover_segments(
    directory: str,
    settings: SegmentSettings,
    segments: list[Segment],
    sealed: dict[int, int],
    recovery_point: int | None,
    clean: bool,
) -> None:
    """Reopen for writing and validate the segments from the recovery point on (in place)."""
    if not segments:
        return
    if clean:
        first = len(segments) - 1
    else:
        point = recovery_point if recovery_point is not None else 0
        first = max(0, sum(1 for s in segments if s.base_offset <= point) - 1)
    i = first
    while i < len(segments):
        last = len(segments) - 1
        old = segments[i]
        old.close()
        seg = segments[i] = Segment(directory, old.base_offset, settings, writable=True)
        seg.bounds = old.bounds
        seg.open_indexes_for_append()
        if clean and i == last:
            seg.load_active_state()
            break
        is_sealed = i < last and seg.base_offset in sealed
        result = seg.recover(truncate=not is_sealed)
        if is_sealed and result.truncated_bytes:
            # A sealed segment was fsynced whole: damage inside it is not a torn tail.
            raise CorruptionError(
                f"sealed segment is damaged: {result.error}",
                path=seg.log_path,
                position=result.valid_bytes,
            )
        if result.truncated_bytes and i < last:
            log.warning(
                "%s: dropping %d unflushed segment(s) after the truncated one", directory, last - i
            )
            for later in segments[i + 1 :]:
                later.delete()
            del segments[i + 1 :]
            _io.fsync_dir(directory)
            place(segments, settings, active_tail=not is_sealed)
        if i < len(segments) - 1:
            seg.seal()
        i += 1
    rebuild_txn_indexes(segments, min(first, len(segments) - 1), only_missing=clean)
    if not segments[-1].pristine:  # (else as the last clean close fsynced it)
        segments[-1].flush()


# ---------------------------------------------------------------------------- swaps


def rename_kind(directory: str, base: int, kind: str, old: str, new: str) -> None:
    """Rename segment ``base``'s ``kind`` file from suffix ``old`` to ``new``, if it exists."""
    path = segment_path(directory, base, kind)
    if os.path.exists(path + old):
        _io.rename(path + old, path + new)


def roll_forward(directory: str, base: int, doomed: Iterable[tuple[int, str]]) -> None:
    """Unlink the ``(base offset, kind)`` files being replaced (never ``base``'s own ``.log``,
    which the rename replaces atomically), then move the swap files of segment ``base`` into
    place, fsyncing the directory after each step."""
    for b, kind in doomed:
        path = segment_path(directory, b, kind)
        if (b, kind) != (base, LOG_SUFFIX) and os.path.lexists(path):
            _io.unlink(path)
    _io.fsync_dir(directory)
    rename_kind(directory, base, LOG_SUFFIX, SWAP_SUFFIX, "")
    for kind in INDEX_KINDS:
        rename_kind(directory, base, kind, SWAP_SUFFIX, "")
    _io.fsync_dir(directory)


def _swap_range(directory: str, base: int) -> tuple[int, int] | None:
    """``[base, next offset)`` the swap segment ``base`` replaces (at least ``base`` itself);
    None if its log file is gone (renamed into place meanwhile)."""
    seg = Segment(directory, base, SegmentSettings(), writable=False, suffix=SWAP_SUFFIX)
    try:
        if seg.size == 0 and not os.path.exists(seg.log_path):
            return None
        return base, max(seg.next_offset, base + 1)
    finally:
        seg.close()


def swap_bases(names: Iterable[str]) -> list[int]:
    return sorted(
        p[0]
        for n in names
        if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and p[2] == SWAP_SUFFIX
    )


def complete_swaps(directory: str, keep_names: list[str], swap_names: list[str]) -> list[str]:
    """Finish interrupted swaps at open (``.cleaned`` files are already deleted): for every
    ``X.log.swap``, delete the segment files whose base lies in the offset range it covers,
    rename its files into place and repair the manifest; index ``.swap`` files without a log
    swap are deleted (their log was already renamed, or never was). Returns the names the
    directory then holds, in place of ``keep_names``."""
    logs = swap_bases(swap_names)
    ranges = [r for b in logs if (r := _swap_range(directory, b)) is not None]
    manifest = read_manifest(directory)
    if manifest:
        for lo, hi in ranges:
            for b in [b for b in manifest if lo <= b < hi]:
                del manifest[b]
            manifest[lo] = os.lstat(segment_path(directory, lo, LOG_SUFFIX) + SWAP_SUFFIX).st_size
        write_manifest(directory, manifest)
    for name in swap_names:
        p = parse_segment_file(name)
        if p is None or p[0] not in logs or p[1] not in (LOG_SUFFIX, *INDEX_KINDS):
            _io.unlink(os.path.join(directory, name))
    for lo, hi in ranges:
        doomed = [
            (p[0], p[1])
            for name in keep_names
            if (p := parse_segment_file(name)) and not p[2] and p[1] in SEGMENT_KINDS
            and lo <= p[0] < hi
        ]  # fmt: skip
        roll_forward(directory, lo, doomed)
    present = set(os.listdir(directory))
    return [n for n in keep_names if n in present] + sorted(
        n for n in present - set(keep_names) if not n.endswith(SWAP_SUFFIX)
    )
