"""CRC checks remembered per process for the batches of sealed segments.

A sealed segment no longer changes, so a batch whose CRC this process has checked once need not
be checked again on the next read. The memo is keyed by ``(file identity, position)``, the
identity being ``(device, inode, size, mtime_ns)`` of the open file. A file rewritten since
(another inode, or the same one with a new size or modification time) has another identity, so
its batches are checked again; a byte changed in place that keeps the size and the modification
time is not seen until the process restarts (the trust a page cache gives anyway). The active
segment and a read-only view's live tail are never remembered: every read checks them.
"""

from __future__ import annotations

import os

__all__ = ["Checked", "Identity", "identity"]

Identity = tuple[int, int, int, int]

_VERIFIED: set[tuple[Identity, int]] = set()
"""``(identity, position)`` of every batch checked so far; cleared at ``_VERIFIED_MAX``."""
_VERIFIED_MAX = 1 << 20


def identity(fd: int) -> Identity:
    """``(device, inode, size, mtime_ns)`` of the open file ``fd`` (one ``fstat``)."""
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Checked:
    """The CRC checks of one walk over a segment: every batch is checked unless the segment is
    sealed (``identity`` not None) and the batch at that position was checked before."""

    __slots__ = ("identity",)

    def __init__(self, identity: Identity | None) -> None:
        self.identity = identity

    def known(self, position: int) -> bool:
        return self.identity is not None and (self.identity, position) in _VERIFIED

    def remember(self, position: int) -> None:
        if self.identity is None:
            return
        if len(_VERIFIED) >= _VERIFIED_MAX:
            _VERIFIED.clear()
        _VERIFIED.add((self.identity, position))
