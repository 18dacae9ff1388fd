"""CRC checks remembered for the batches of a segment file while it stays open.

A sealed segment no longer changes, and bytes once appended are never rewritten in place, so a
batch whose CRC was checked once need not be checked again on the next read. Each open
:class:`~embedlog.segment.segment.Segment` keeps a :class:`Memo` of ``(file identity,
position)`` pairs, the identity being ``(device, inode, size, mtime_ns)`` of its open descriptor
(so an inode number is never reused under it). A file rewritten in place since (a new size or
modification time) has another identity, so its batches are checked again; a byte changed in
place that keeps the size and the modification time is not seen until the segment is opened
again (the trust a page cache gives anyway). A read-only view's live tail is remembered the same
way (its writer only appends, and each append changes the identity); the writer's own active
segment never is: every read checks it.
"""

from __future__ import annotations

import os

from . import _native

__all__ = ["Checked", "Identity", "Memo", "identity"]

Identity = tuple[int, int, int, int]

MEMO_MAX = 1 << 16
"""Entries a memo holds before it starts over (a segment holds far fewer batches)."""


class Memo:
    """The checked batches of one open segment."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[tuple[Identity, int]] = set()

    def __len__(self) -> int:
        return len(self.seen)


def identity(fd: int) -> Identity:
    """``(device, inode, size, mtime_ns)`` of the open file ``fd`` (one ``fstat``; by the
    compiled core where it has ``file_identity``, the same four values without the whole
    ``os.stat_result``)."""
    core = _native.CORE
    found = None if core is None else core.file_identity(fd)
    if found is not None:
        return found
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Checked:
    """The CRC checks of one walk over a segment: every batch is checked unless ``memo`` is
    given (a sealed segment) and holds the batch at that position for ``identity``."""

    __slots__ = ("identity", "memo")

    def __init__(self, memo: Memo | None, identity: Identity | None) -> None:
        self.memo = None if identity is None else memo
        self.identity = identity

    def known(self, position: int) -> bool:
        return self.memo is not None and (self.identity, position) in self.memo.seen

    def remember(self, position: int) -> None:
        memo = self.memo
        if memo is None or self.identity is None:
            return
        if len(memo.seen) >= MEMO_MAX:
            memo.seen.clear()
        memo.seen.add((self.identity, position))
