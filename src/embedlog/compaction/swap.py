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
files are untouched; after it the loader's :func:`embedlog.loader.complete_swaps` (Kafka's
``LogLoader`` passes) deletes every segment file whose base lies in ``[X, next offset of the
swap)``, renames the swap files into place and repairs the manifest. Old segments above the
swap's last offset that a crash left behind hold only records superseded by later ones, as
after a partial cleaning.

Readers: in-process iterators keep the old segment objects they captured (descriptors survive
unlink and rename; an old segment never opens an index by a name that now belongs to another
file: ``Segment.is_current``). A read-only process that lists the directory while a swap is in
progress applies it the way recovery will (:func:`embedlog.view_loader.reader_view`), so it never
sees the gap between the old segments' removal and the new one's rename.

The renames and the roll-forward live in :mod:`embedlog.loader` (recovery completes them); this
module adds only what a running compaction does.
"""

from __future__ import annotations

import os

from .. import _io
from ..errors import StorageError
from ..loader import INDEX_KINDS, SEGMENT_KINDS, rename_kind, roll_forward
from ..manifest import write_manifest
from ..naming import (
    CLEANED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    segment_path,
)
from ..partition import Partition
from ..segment.segment import Segment

__all__ = ["discard", "install"]



def discard(directory: str, base: int, suffix: str = CLEANED_SUFFIX) -> None:
    """Unlink a cleaned (or swap) segment's files, where they exist."""
    for kind in (LOG_SUFFIX, *INDEX_KINDS):
        path = segment_path(directory, base, kind) + suffix
        if os.path.lexists(path):
            _io.unlink(path)


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
        for seg in old:
            seg.retire()  # readers of the old files keep them although the names change hands
        try:
            for kind in (*INDEX_KINDS, LOG_SUFFIX):  # the log last: it marks the commit
                rename_kind(directory, base, kind, CLEANED_SUFFIX, SWAP_SUFFIX)
            _io.fsync_dir(directory)
            _io.mark("compaction_swap", directory=directory, base=base)
            doomed = {id(s) for s in old}
            sealed = {s.base_offset: s.size for s in partition.segments[:-1]
                      if id(s) not in doomed}
            sealed[base] = size
            write_manifest(directory, sealed)
            roll_forward(directory, base,
                          ((s.base_offset, k) for s in old for k in SEGMENT_KINDS))
            new = Segment(directory, base, partition.settings, writable=False)
            partition.replace_segments(old, [new], manifest=False)
        except StorageError as exc:
            partition.poisoned = exc  # the directory is mid-swap: reopening rolls it forward
            raise
    return new
