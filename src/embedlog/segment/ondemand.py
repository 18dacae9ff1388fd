"""Segment files whose bytes arrive on demand: a ``.log`` kept locally as a sparse file at its
final size, filled by whoever registered it before any of its bytes are read.

A remote log's cache (:mod:`embedlog.remote`) and a tiered partition's read cache
(:mod:`embedlog.tiering.read_cache`) register each ``.log`` they make sparse with a
:class:`Filler` (:func:`register`, keyed by the file's ``(st_dev, st_ino, st_size)``: such a
file keeps the size it was made at); a :class:`~embedlog.segment.segment.Segment` opened on
that file finds it (:func:`filler_of`)
and calls :meth:`Filler.ensure` before every ``pread`` (:meth:`SegmentFiles.pread
<embedlog.segment.files.SegmentFiles.pread>`, the one place a segment's ``.log`` bytes are
read). So a read never sees the zeros of a hole: the bytes it reads are the remote's, or the
fill raises. A file is unregistered (:func:`forget`) before it is unlinked, so an inode number
reused by another file never finds a filler.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Filler", "filler_of", "forget", "register"]


class Filler(Protocol):
    """Makes bytes of one local file present."""

    def ensure(self, position: int, length: int) -> None:
        """Make ``[position, position + length)`` (clamped to the file) present, or raise."""


_fillers: dict[tuple[int, int, int], Filler] = {}
"""Registered files. No lock: one dict operation each (atomic under the GIL), so a ``fork()``
child never inherits a lock held by another thread."""


def register(identity: tuple[int, int, int], filler: Filler) -> None:
    """Reads of the file ``identity`` (``(st_dev, st_ino, st_size)``) go through
    ``filler``."""
    _fillers[identity] = filler


def forget(identity: tuple[int, int, int]) -> None:
    """The file ``identity`` is about to go: no filler for it any more."""
    _fillers.pop(identity, None)


def filler_of(identity: tuple[int, int, int] | None) -> Filler | None:
    """The filler of the file ``identity``, None for an ordinary file."""
    return None if identity is None else _fillers.get(identity)
