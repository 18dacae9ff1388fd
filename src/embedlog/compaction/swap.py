"""Putting cleaned segments in place: Kafka's ``.cleaned`` -> ``.swap`` -> final-name protocol.

A cleaning pass writes each group of old segments ``[X, Y1, Y2 ...]`` into one new segment
named after the group's first base offset ``X``: ``X.log.cleaned`` and its two indexes, fsynced.
Then, holding the partition lock only for these steps (:func:`install`):

1. **commit**: rename the indexes, then the log, from ``.cleaned`` to ``.swap`` and fsync the
   directory. From the moment ``X.log.swap`` exists, recovery rolls the swap forward; before
   it, recovery deletes the ``.cleaned`` files and the old segments stay (an index that did
   not reach ``.swap`` is simply rebuilt or scanned around);
2. write ``embedlog.segments`` (the sealed-segment manifest) for the new set;
3. **roll forward**: unlink the old segments' files (but not ``X.log``, which the rename below
   replaces atomically) and fsync the directory; rename ``X.log.swap`` to ``X.log``, then the
   index swaps, and fsync the directory;
4. swap the segment objects in the partition (``Partition.replace_segments``).

A crash leaves the old group or the new segment, never a mix: before step 1 completes the old
files are untouched; after it the loader's :func:`complete_swaps` (Kafka's ``LogLoader`` passes)
deletes every segment file whose base lies in ``[X, next offset of the swap)``, renames the
swap files into place and repairs the manifest. Old segments above the swap's last offset that a
crash left behind hold only records superseded by later ones, as after a partial cleaning.

Readers: in-process iterators keep the old segment objects they captured (descriptors survive
unlink and rename; an old segment never opens an index by a name that now belongs to another
file: ``Segment.is_current``). A read-only process that lists the directory while a swap is in
progress applies it the way recovery will (:func:`reader_view`), so it never sees the gap
between the old segments' removal and the new one's rename.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from .. import _io
from ..errors import StorageError
from ..naming import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    parse_segment_file,
    segment_path,
)
from ..partition import Partition, read_manifest, write_manifest
from ..segment.segment import Segment, SegmentSettings

__all__ = ["complete_swaps", "discard", "install", "reader_view"]

_SEGMENT_KINDS: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, ".txnindex")
_INDEX_KINDS: Final = (INDEX_SUFFIX, TIMEINDEX_SUFFIX)
_RELIST_ATTEMPTS: Final = 50


def discard(directory: str, base: int, suffix: str = CLEANED_SUFFIX) -> None:
    """Unlink a cleaned (or swap) segment's three files, where they exist."""
    for kind in (LOG_SUFFIX, *_INDEX_KINDS):
        path = segment_path(directory, base, kind) + suffix
        if os.path.lexists(path):
            _io.unlink(path)


def _rename_kind(directory: str, base: int, kind: str, old: str, new: str) -> None:
    path = segment_path(directory, base, kind)
    if os.path.exists(path + old):
        _io.rename(path + old, path + new)


def _roll_forward(directory: str, base: int, doomed: Iterable[tuple[int, str]]) -> None:
    """Step 3 of the protocol: unlink the ``(base offset, kind)`` files being replaced, then
    move the swap files of segment ``base`` into place."""
    for b, kind in doomed:
        path = segment_path(directory, b, kind)
        if (b, kind) != (base, LOG_SUFFIX) and os.path.lexists(path):
            _io.unlink(path)
    _io.fsync_dir(directory)
    _rename_kind(directory, base, LOG_SUFFIX, SWAP_SUFFIX, "")
    for kind in _INDEX_KINDS:
        _rename_kind(directory, base, kind, SWAP_SUFFIX, "")
    _io.fsync_dir(directory)


def install(partition: Partition, old: list[Segment], cleaned: Segment) -> Segment | None:
    """Swap the sealed ``cleaned`` segment (``.cleaned`` files) in for the group ``old``.

    Returns the new segment, or None (the cleaned files deleted) when the partition changed
    meanwhile (retention removed one of the old segments, or the partition was closed)."""
    directory = partition.directory
    base = cleaned.base_offset
    with partition.lock:
        current = {id(s) for s in partition.segments}
        if (
            partition.poisoned is not None
            or not all(id(s) in current for s in old)
            or old[0].base_offset != base
        ):
            cleaned.close()
            discard(directory, base)
            return None
        size = cleaned.size
        cleaned.close()
        try:
            for kind in (*_INDEX_KINDS, LOG_SUFFIX):  # the log last: it marks the commit
                _rename_kind(directory, base, kind, CLEANED_SUFFIX, SWAP_SUFFIX)
            _io.fsync_dir(directory)
            _io.mark("compaction_swap", directory=directory, base=base)
            doomed = {id(s) for s in old}
            sealed = {s.base_offset: s.size for s in partition.segments[:-1]
                      if id(s) not in doomed}
            sealed[base] = size
            write_manifest(directory, sealed)
            _roll_forward(directory, base,
                          ((s.base_offset, k) for s in old for k in _SEGMENT_KINDS))
            new = Segment(directory, base, partition.settings, writable=False)
            partition.replace_segments(old, [new], manifest=False)
        except StorageError as exc:
            partition.poisoned = exc  # the directory is mid-swap: reopening rolls it forward
            raise
    return new


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


def complete_swaps(directory: str, keep_names: list[str], swap_names: list[str]) -> list[str]:
    """Finish interrupted swaps at open (the writer's loader; ``.cleaned`` files are already
    deleted): for every ``X.log.swap``, delete the segment files whose base lies in the offset
    range it covers, rename its files into place and repair the manifest; index ``.swap``
    files without a log swap are deleted (their log was already renamed, or never was).
    Returns the names the directory then holds, in place of ``keep_names``."""
    logs = sorted(
        p[0]
        for n in swap_names
        if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and p[2] == SWAP_SUFFIX
    )
    ranges = [r for b in logs if (r := _swap_range(directory, b)) is not None]
    manifest = read_manifest(directory)
    if manifest:
        for lo, hi in ranges:
            for b in [b for b in manifest if lo <= b < hi]:
                del manifest[b]
            manifest[lo] = os.path.getsize(segment_path(directory, lo, LOG_SUFFIX) + SWAP_SUFFIX)
        write_manifest(directory, manifest)
    for name in swap_names:
        p = parse_segment_file(name)
        if p is None or p[0] not in logs or p[1] not in (LOG_SUFFIX, *_INDEX_KINDS):
            _io.unlink(os.path.join(directory, name))
    for lo, hi in ranges:
        doomed = [
            (p[0], p[1])
            for name in keep_names
            if (p := parse_segment_file(name)) and not p[2] and p[1] in _SEGMENT_KINDS
            and lo <= p[0] < hi
        ]  # fmt: skip
        _roll_forward(directory, lo, doomed)
    present = set(os.listdir(directory))
    return [n for n in keep_names if n in present] + sorted(
        n for n in present - set(keep_names) if not n.endswith(SWAP_SUFFIX)
    )


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
    return dict.fromkeys(_plain_bases(names))


def _plain_bases(names: Iterable[str]) -> list[int]:
    return sorted(
        p[0] for n in names if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and not p[2]
    )


def _view_of(
    directory: str, names: list[str], settings: SegmentSettings
) -> dict[int, Segment | None] | None:
    swaps = sorted(
        p[0]
        for n in names
        if (p := parse_segment_file(n)) and p[1] == LOG_SUFFIX and p[2] == SWAP_SUFFIX
    )
    view: dict[int, Segment | None] = {}
    ranges = []
    for base in swaps:
        seg = Segment(directory, base, settings, writable=False, suffix=SWAP_SUFFIX)
        if seg.size == 0 and not os.path.exists(seg.log_path):
            seg.close()
            for opened in view.values():
                if opened is not None:
                    opened.close()
            return None
        view[base] = seg
        ranges.append((base, max(seg.next_offset, base + 1)))
    for base in _plain_bases(names):
        if not any(lo <= base < hi for lo, hi in ranges):
            view[base] = None
    return dict(sorted(view.items()))
