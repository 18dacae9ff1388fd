"""A read-only view's check of where a sealed segment ends, against ``embedlog.segments``.

A sealed segment cut at a batch boundary -- inside it, or to 0 bytes -- or missing entirely
passes every CRC: only the size :mod:`embedlog.manifest` recorded when it was sealed tells. A
writer open compares every sealed segment with it (:func:`embedlog.manifest.check_sealed`);
a view has no recovery, so its scan asks :func:`check_gap` wherever it leaves a sealed segment
with offsets of its read left below the next segment's base offset that it found no batch
for. Compaction leaves such gaps too (the cleaner drops superseded records), so the gap alone
is no damage; the manifest decides, as the writer open does:

* the segment's size differs from its manifest entry: it was cut (or extended) after it was
  sealed (:func:`embedlog.manifest.size_error`);
* the manifest names a sealed segment between it and the next one listed: that segment is
  missing (:func:`embedlog.manifest.missing_error`).

A read from the view's log start asks :func:`check_start` when its first segment lies above
the log start the writer checkpointed (a view's log start is otherwise its first segment's
base): a sealed segment the manifest names below it that the log start has not passed is
missing, never a later log start (retention checkpoints the log start before it unlinks a
segment; tiering's local retention rewrites the manifest first).

The writer changes the folder under the view -- rolls, retention deletes, compaction swaps --
and a view's listing, its open files and the manifest it reads are not taken at one instant:
a swap writes the manifest of its new segments before it renames them in, so a view can
compare an old segment with the new manifest. A discrepancy is therefore checked again
against a fresh listing and manifest taken in a *settled* folder (the same listing and
manifest stamp before and after the manifest is read, no ``.swap`` file in it, the segment's
name still holding the file the scan read -- every step of the writer changes one of these,
and between its steps the manifest and the files agree), and raised only if it stays there.
A view found stale on the way (the segment deleted or replaced, its size changed, another
segment listed between it and the next one) gets ``StorageError(ESTALE)``: the scan lists the
folder again and resumes (:func:`embedlog.partition_read.scan`), checking again from there.
A folder that does not settle within ``_SETTLE_ATTEMPTS`` pauses (about 1.6 s; a writer that
died half way through a swap leaves its ``.swap`` files until the next writer open, which
completes the swap and repairs the manifest) is not judged: the read goes on, with a warning.

The first look at a gap takes the manifest last parsed for the folder while its stamp (inode,
modification time, size: it is replaced whole on every change) has not moved, so a scan over
many gaps (a compacted topic) parses it once; a fresh look always reads it again.

Only views call these (a writer's segments were checked at its open and it alone changes them);
a Kafka folder has no manifest, so every gap passes.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .errors import CorruptionError, StorageError
from .manifest import manifest_stamp, missing_error, read_manifest, size_error
from .naming import LOG_SUFFIX, SWAP_SUFFIX, segment_bases, segment_path
from .segment.segment import Segment

__all__ = ["Sealed", "check_gap", "check_start", "damage_of", "missing_below"]

log = logging.getLogger(__name__)

Stamp = tuple[int, int, int] | None

_KNOWN: dict[str, tuple[Stamp, Sealed]] = {}
"""The manifest last read of each folder, by stamp (:func:`_known`)."""
_KNOWN_MAX: Final = 4096
_SETTLE_ATTEMPTS: Final = 40
_PAUSE: Final = 0.002
"""Seconds of the first pause while the folder settles; the n-th pause is n times as long."""


def check_gap(seg: Segment, ceiling: int) -> None:
    """Raise the writer open's :class:`~embedlog.errors.CorruptionError` when sealed segment
    ``seg`` of a view, whose batches end below ``ceiling`` (the base offset of the segment
    listed after it), is shorter or longer than the manifest says, or a sealed segment the
    manifest names lies between the two; return when the gap is the segment's own (see the
    module notes for the fresh check a first discrepancy gets)."""
    directory = seg.directory
    if damage_of(directory, seg.base_offset, seg.size, ceiling, _known(directory)) is None:
        return
    for attempt in range(_SETTLE_ATTEMPTS):
        fresh = _settled(seg, _unknown)
        if fresh is None:
            time.sleep(_PAUSE * (attempt + 1))
            continue
        if fresh.later != ceiling:
            raise _stale(seg, "another segment is listed after it now")
        damage = damage_of(directory, seg.base_offset, fresh.size, ceiling, fresh.manifest)
        if damage is not None:
            raise damage
        if fresh.size != seg.size:  # the file agrees with the manifest; the view's size was old
            seg.refresh()
            raise _stale(seg, "its size changed")
        return
    _unsettled(directory)


def check_start(seg: Segment, persisted: Callable[[], int | None]) -> None:
    """Raise the writer open's :class:`~embedlog.errors.CorruptionError` when the manifest
    names a sealed segment below ``seg``, a view's first segment, that the log start has not
    passed (``persisted()``: the writer's checkpointed log start; None: none checkpointed, so
    0): that segment is missing, by :func:`~embedlog.manifest.check_sealed`'s rule. A
    discrepancy is checked again in a settled folder (module notes); a view that turns out
    stale is left to its scan (the segment deleted or replaced: ESTALE there)."""
    directory = seg.directory
    if missing_below(directory, seg.base_offset, persisted() or 0, _known(directory)) is None:
        return
    for attempt in range(_SETTLE_ATTEMPTS):
        try:
            fresh = _settled(seg, persisted)
        except StorageError:
            return  # the writer moved on: the scan meets it and lists the folder again
        if fresh is None:
            time.sleep(_PAUSE * (attempt + 1))
            continue
        if fresh.first != seg.base_offset:
            return  # as above
        damage = missing_below(directory, seg.base_offset, fresh.start or 0, fresh.manifest)
        if damage is not None:
            raise damage
        return
    _unsettled(directory)


@dataclass(frozen=True, slots=True)
class Sealed:
    """A manifest's entries: ``sizes`` (``{base offset: size}``) and their ``bases`` sorted."""

    sizes: dict[int, int]
    bases: list[int]

    @classmethod
    def of(cls, sizes: dict[int, int]) -> Sealed:
        return cls(sizes, sorted(sizes))

    def after(self, base: int) -> int | None:
        """The first base offset above ``base`` (None: none)."""
        i = bisect.bisect_right(self.bases, base)
        return self.bases[i] if i < len(self.bases) else None


def damage_of(directory: str, base: int, size: int, ceiling: int | None, sealed: Sealed
              ) -> CorruptionError | None:
    """The damage the manifest ``sealed`` sees in segment ``base`` of ``directory`` being
    ``size`` bytes and followed by the segment at ``ceiling`` (None: none follows), or None."""
    expected = sealed.sizes.get(base)
    if expected is not None and expected != size:
        return size_error(segment_path(directory, base, LOG_SUFFIX), size, expected)
    between = sealed.after(base)
    if between is not None and (ceiling is None or between < ceiling):
        return missing_error(segment_path(directory, between, LOG_SUFFIX), between)
    return None


def missing_below(directory: str, first: int, start: int, sealed: Sealed
                  ) -> CorruptionError | None:
    """The damage of a sealed segment the manifest ``sealed`` names below ``first`` (the first
    segment listed) holding offsets at or above ``start`` (the log start: it ends at the next
    base known), or None."""
    below = sealed.bases[: bisect.bisect_left(sealed.bases, first)]
    for base, after in itertools.pairwise([*below, first]):
        if after > start:
            return missing_error(segment_path(directory, base, LOG_SUFFIX), base)
    return None


def _known(directory: str) -> Sealed:
    """The manifest of ``directory``, parsed again only when its stamp moved (a read is kept
    only when the stamp is the same before and after it)."""
    stamp = manifest_stamp(directory)
    known = _KNOWN.get(directory)
    if known is not None and known[0] == stamp:
        return known[1]
    sealed = Sealed.of(read_manifest(directory))
    if manifest_stamp(directory) == stamp:
        _remember(directory, stamp, sealed)
    return sealed


def _remember(directory: str, stamp: Stamp, sealed: Sealed) -> None:
    if len(_KNOWN) >= _KNOWN_MAX and directory not in _KNOWN:
        del _KNOWN[next(iter(_KNOWN))]
    _KNOWN[directory] = stamp, sealed


@dataclass(frozen=True, slots=True)
class _Fresh:
    """What a settled folder says about a view's segment (:func:`_settled`)."""

    size: int
    """The size of the segment's file."""
    first: int
    """The first segment's base offset."""
    later: int | None
    """The base offset of the segment after it (None: none)."""
    start: int | None
    """The log start checkpointed (read after the first listing)."""
    manifest: Sealed


def _settled(seg: Segment, persisted: Callable[[], int | None]) -> _Fresh | None:
    """What a settled folder (module notes) says about ``seg``, or None while the writer is
    changing it. Raises ``StorageError(ESTALE)`` when ``seg``'s name no longer holds the file
    the scan read."""
    directory = seg.directory
    stamp = manifest_stamp(directory)
    names = _listing(directory)
    if any(n.endswith(SWAP_SUFFIX) for n in names):
        return None
    start = persisted()  # checkpointed before any segment below it is unlinked
    manifest = Sealed.of(read_manifest(directory))
    if manifest_stamp(directory) != stamp or _listing(directory) != names:
        return None
    _remember(directory, stamp, manifest)
    # Checked last: a name that holds the file now held it through the listings (a file
    # renamed away never comes back under it).
    if seg.suffix or not seg.is_current():
        raise _stale(seg, "it was deleted or replaced")
    try:
        size = os.lstat(seg.log_path).st_size
    except FileNotFoundError:
        raise _stale(seg, "it was deleted") from None
    bases = segment_bases(names)
    later = [b for b in bases if b > seg.base_offset]
    return _Fresh(size, bases[0], min(later, default=None), start, manifest)


def _unknown() -> int | None:
    return None


def _unsettled(directory: str) -> None:
    log.warning("%s: the folder did not settle (a compaction swap left half way?); a sealed "
                "segment's end is not checked against the manifest", directory)


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def _stale(seg: Segment, why: str) -> StorageError:
    return StorageError(errno.ESTALE, f"the view of this segment is out of date: {why}",
                        seg.log_path)
