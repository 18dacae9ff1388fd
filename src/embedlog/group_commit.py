"""Group commit: one fsync serves every writer of a partition waiting behind it.

A :class:`GroupCommit` keeps a partition's durability bookkeeping:

* ``written`` counts appends (bumped by the partition under its lock), ``synced`` the appends
  known to be on disk; :meth:`GroupCommit.sync` fsyncs the active segment once for every
  append counted so far. Its callers hand off too: one at a time fsyncs, the others wait on
  the hand-off condition (not on ``sync_lock``), so a caller whose append the fsync in flight
  covers returns when it ends instead of queueing behind the next one;
* ``durable_end``: every offset below it is on disk. :meth:`GroupCommit.sync_through` is the
  leader/follower hand-off of writers that leave their records in a reserved batch: one caller
  at a time (the leader) writes what was reserved -- every record gathered while the previous
  fsync ran -- with one write, then fsyncs; the others wait and find their offsets covered.

Lock order: the partition lock -> ``sync_lock``; the hand-off condition is never held with
either of them, so followers never wait on the partition lock to learn they are covered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import _io

__all__ = ["GroupCommit"]


class GroupCommit:
    """The durability state of one partition; ``flush`` fsyncs its active segment."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self.sync_lock = threading.Lock()
        self._handoff = threading.Condition(threading.Lock())
        self._leading = False
        self._syncing = False
        self.durable_end = 0
        self.written = 0
        self.synced = 0

    def sync(self, seq: int | None = None) -> None:
        """Make every append up to ``seq`` (default: all so far) durable."""
        target = self.written if seq is None else seq
        if self.synced >= target or not _io.SAFETY.fsync_before_ack:
            return
        with self._handoff:  # followers covered by the fsync in flight never queue behind
            while self.synced < target:  # the next one: they wake when it ends and return
                if not self._syncing:
                    self._syncing = True
                    break
                self._handoff.wait()
            else:
                return
        try:
            with self.sync_lock:
                if self.synced < target:
                    upto = self.written
                    self._flush()
                    self.synced = max(self.synced, upto)
        finally:
            with self._handoff:
                self._syncing = False
                self._handoff.notify_all()

    def sealed(self) -> None:
        """The active segment was fsynced whole (caller holds ``sync_lock``)."""
        self.synced = self.written

    def sync_through(
        self,
        offset: int,
        write: Callable[[], tuple[int, int]],
        gather: Callable[[], None] | None = None,
    ) -> bool:
        """Return once ``offset`` is on disk (see the module notes).

        The leader calls ``gather`` (a moment for records on their way into the reserved batch),
        then ``write``, which writes what is reserved and returns ``(end offset, written
        count)``, then fsyncs. Returns False if ``offset`` was never written (its batch failed;
        the writer has the error)."""
        with self._handoff:
            while self.durable_end <= offset:
                if not self._leading:
                    self._leading = True
                    break
                self._handoff.wait()
            else:
                return True
        covered = False
        end = 0
        try:
            if gather is not None:
                gather()
            end, seq = write()
            if end > offset:
                self.sync(seq)
                covered = True
        finally:
            with self._handoff:
                if covered:
                    self.durable_end = max(self.durable_end, end)
                self._leading = False
                self._handoff.notify_all()
        return covered
