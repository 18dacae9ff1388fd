"""Group commit: one fsync serves every writer of a partition waiting behind it.

A :class:`GroupCommit` keeps a partition's durability bookkeeping:

* ``written`` counts appends (bumped by the partition under its lock), ``synced`` the appends
  known to be on disk; :meth:`GroupCommit.sync` fsyncs the active segment once for every
  append counted so far. Its callers hand off too: one at a time fsyncs, the others wait on
  the hand-off condition (not on ``sync_lock``), so a caller whose append the fsync in flight
  covers returns when it ends instead of queueing behind the next one;
* :meth:`GroupCommit.commit_queued` is the hand-off of writers that wait for their own batch
  (``Log.append`` in ``fsync`` mode): each queues its encoded batch; one caller at a time (the
  leader) appends everything queued, then fsyncs once, and every writer of that round returns
  with its own header (or error). Writers never append while an fsync runs, so a round holds
  what arrived during the previous fsync; a new leader first yields the GIL until as many
  batches are queued as the last round had (the writers it woke are on their way back);
* ``durable_end``: every offset below it is on disk. :meth:`GroupCommit.sync_through` is the
  leader/follower hand-off of writers that leave their records in a reserved batch: one caller
  at a time (the leader) writes what was reserved -- every record gathered while the previous
  fsync ran -- with one write, then fsyncs; the others wait and find their offsets covered.

Lock order: the partition lock -> ``sync_lock``; the hand-off condition is never held with
either of them, so followers never wait on the partition lock to learn they are covered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from . import _io

__all__ = ["GroupCommit", "Queued"]

_GATHER_ROUNDS = 50
"""GIL hand-offs (``sleep(0)``) a queue leader grants writers on their way: it starts its round
once as many batches are queued as the last round had, or after this many."""


class Queued:
    """One writer's batch in :meth:`GroupCommit.commit_queued`: the appender sets ``header`` or
    ``error``; ``done`` once its round's fsync ended (or failed)."""

    __slots__ = ("batch", "done", "error", "header")

    def __init__(self, batch: bytearray) -> None:
        self.batch = batch
        self.header: Any = None
        self.error: BaseException | None = None
        self.done = False

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.header


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
        self._queue: list[Queued] = []
        self._last_round = 0

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

    def commit_queued(self, batch: bytearray,
                      append_all: Callable[[list[Queued]], None]) -> Any:
        """Queue ``batch`` and return its header once it is on disk (see the module notes).

        The leader takes the whole queue, ``append_all`` appends it (setting each entry's
        ``header`` or ``error``), then fsyncs; an error of the append or the fsync is every
        taken entry's that has none of its own. Raises this batch's error."""
        mine = Queued(batch)
        with self._handoff:
            self._queue.append(mine)
            while not mine.done:
                if not self._leading:
                    self._leading = True
                    break
                self._handoff.wait()
            else:
                return mine.result()
        for _ in range(_GATHER_ROUNDS):  # writers of the last round on their way back
            if len(self._queue) >= self._last_round:
                break
            time.sleep(0)
        with self._handoff:
            taken, self._queue = self._queue, []
        self._last_round = len(taken)
        try:
            append_all(taken)
            self.sync()
        except BaseException as exc:
            for entry in taken:
                entry.error = entry.error or exc
            raise
        finally:
            with self._handoff:
                for entry in taken:
                    entry.done = True
                self._leading = False
                self._handoff.notify_all()
        return mine.result()

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
