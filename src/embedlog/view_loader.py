"""A read-only process's segments of a partition: the view's open and its refreshes.

A read-only process never modifies a byte (:func:`open_view`, :func:`adopt`): while the writer
swaps compacted segments in (``.swap`` files present) it reads what recovery would produce
(:func:`reader_view`), so it never sees the gap between the old segments' removal and the new
one's rename.

Invariant: every segment these functions open is either handed to the caller or closed before
they return or raise. A refresh that meets damage (a sealed segment whose size is not the
manifest's) raises on every read that reaches it, so a segment it opened and dropped would hold
its descriptors, outside any partition's list, until the descriptor budget's LRU evicted it:
past the view's ``close()``, and on the files of a remote log's cache after they are deleted.

This module builds on :mod:`embedlog.loader` (the listing, ``place``, the swap roll-forward's
names) and imports no partition or compaction code.
"""

from __future__ import annotations

import os
from typing import Final

from ._handles import CACHE
from .loader import Stamp, check_folder, close_all, opened, place, swap_bases
from .manifest import manifest_stamp, view_damage
from .naming import LOG_SUFFIX, SWAP_SUFFIX, segment_bases
from .segment.segment import Segment, SegmentSettings

__all__ = ["adopt", "open_view", "reader_view"]

_RELIST_ATTEMPTS: Final = 50


def open_view(directory: str, settings: SegmentSettings) -> tuple[list[Segment], Stamp]:
    """A read-only process's open: the segments, and the manifest stamp they were checked
    against (None until the first :func:`adopt`; a swap in progress is adopted at once)."""
    names = check_folder(directory)
    bases = segment_bases(names)
    segments = opened(bases, lambda b: Segment(directory, b, settings, writable=False,
                                               live=b == bases[-1]))
    try:
        place(segments, settings)
        if any(n.endswith(SWAP_SUFFIX) for n in names):
            adopted = adopt(directory, settings, segments, names, None)
            if adopted is not None:
                return adopted
        damage = view_damage(directory, names, segments)
    except BaseException:
        close_all(segments)
        raise
    if damage is not None:  # only what precedes the damage: the first refresh raises it
        close_all(segments[damage[0] + 1:])
        segments = segments[:damage[0] + 1]
    return segments, None


def adopt(
    directory: str,
    settings: SegmentSettings,
    segments: list[Segment],
    names: list[str],
    seen: Stamp,
) -> tuple[list[Segment], Stamp] | None:
    """Read-only view: the segments ``names`` (a listing) holds, keeping those of ``segments``
    still open that still are what their name says; None when nothing changed. ``seen`` is the
    manifest stamp of the last call: when it moved, open segments are checked again. When it
    raises, the segments it opened are closed and ``segments`` stay the view's."""
    bases = segment_bases(names)
    swapping = any(n.endswith(LOG_SUFFIX + SWAP_SUFFIX) for n in names)
    stamp = manifest_stamp(directory)
    recheck = stamp != seen
    if bases == [s.base_offset for s in segments] and not swapping and not recheck:
        return None
    view: dict[int, Segment | None] = dict.fromkeys(bases)
    if swapping:
        view = reader_view(directory, settings)
    old = {s.base_offset: s for s in segments}
    made = [s for s in view.values() if s is not None]  # (reader_view's swap segments)
    segs: list[Segment] = []
    try:
        for b, seg in view.items():
            if seg is None:
                seg = old.get(b)
                if seg is None or seg.suffix or (recheck and not seg.is_current()):
                    seg = Segment(directory, b, settings, writable=False, live=True)
                    made.append(seg)
            segs.append(seg)
        for seg in segs[:-1]:
            if seg.live:
                seg.refresh()
                seg.live = False
        damage = view_damage(directory, names, segs) if recheck else None
        if damage is not None:
            raise damage[1]
    except BaseException:
        close_all(made)
        raise
    # Segments the writer removed or replaced are dropped, not closed: a concurrent
    # iterator may still be reading them. Their descriptors leave the budget's LRU now unless
    # in use (a later read reopens by name and meets ESTALE, as after any eviction), so a
    # closed view holds none of them.
    kept = {id(s) for s in segs}
    for seg in segments:
        if id(seg) not in kept:
            CACHE.evict(seg)
    return place(segs, settings), stamp


def reader_view(directory: str, settings: SegmentSettings) -> dict[int, Segment | None]:
    """What a read-only process should read while a swap may be in progress: ``{base offset:
    segment}`` where a segment is given (opened on its ``.swap`` files) for each swap and
    ``None`` stands for the plain ``.log`` of that base. The old segments a swap replaces are
    left out, as recovery will delete them. The directory is listed again if a swap completes
    while it is examined."""
    names: list[str] = []
    for _ in range(_RELIST_ATTEMPTS):
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return {}
        view = _view_of(directory, names, settings)
        if view is not None:
            return view
    return dict.fromkeys(segment_bases(names))


def _view_of(
    directory: str, names: list[str], settings: SegmentSettings
) -> dict[int, Segment | None] | None:
    swaps = opened(swap_bases(names), lambda b: Segment(directory, b, settings,
                                                        writable=False, suffix=SWAP_SUFFIX))
    try:
        if any(s.size == 0 and not os.path.exists(s.log_path) for s in swaps):
            close_all(swaps)  # renamed into place meanwhile: list again
            return None
        ranges = [(s.base_offset, max(s.next_offset, s.base_offset + 1)) for s in swaps]
    except BaseException:
        close_all(swaps)
        raise
    view: dict[int, Segment | None] = {s.base_offset: s for s in swaps}
    for base in segment_bases(names):
        if not any(lo <= base < hi for lo, hi in ranges):
            view[base] = None
    return dict(sorted(view.items()))
