"""Group commit: one fsync serves every writer of a partition waiting behind it.

A :class:`GroupCommit` keeps a partition's durability bookkeeping:

* ``written`` counts appends (bumped by the partition under its lock), ``synced`` the appends
  known to be on disk; :meth:`GroupCommit.sync` fsyncs the active segment once for every
  append counted so far. One caller at a time fsyncs; the others park, and a caller whose
  append the fsync in flight covers returns when it ends instead of queueing behind the next
  one;
* *rounds*: the writers of :meth:`GroupCommit.sync_through` (the producer and ``Log.append``
  in ``fsync`` mode: each left its record in the partition's reserved batch and brings the
  record's offset) share one hand-off. One writer at a time is the *leader*: it calls the
  partition's ``write_round`` (which writes the reserved batch and returns the end offset and
  the append count), then fsyncs once. Every writer that round covers returns; the first
  writer still parked becomes the next leader. Writers never append while an fsync runs, so a
  round holds what arrived during the previous one;
* ``durable_end``: every offset below it is on disk (a round's end offset once its fsync
  returned).

Parking and waking: a parked writer blocks on a lock of its own (allocated locked, released
once by whoever wakes it). A finished round wakes the next leader and the first writer it
covered; each covered writer, once running, wakes the next one (a chain, so at most one woken
writer at a time waits for the interpreter lock, instead of a broadcast whose woken threads
preempt the running one and pass the interpreter lock around; a covered writer whose caller
was interrupted passes its turn on). A new leader first waits (parked, not spinning) until
as many writers are back as the last round had -- the writers it woke are on their way with
their next record -- or for at most :data:`GATHER_WAIT` seconds (then the next round expects
no more than came). The writer that completes the count leads the round in its place, and the
waiting leader becomes a parked writer of that round: no one wakes it before the round ends,
so a round starts without a wake-up. A leader interrupted while it waits gives the lead up.

Interrupts (a signal handler's exception lands between any two bytecodes of the main thread):
a writer interrupted while it holds a turn passes it on (:meth:`GroupCommit._abandon`), and
every turn is handed on under ``_mutex`` (``lead``, ``done``, taken off a queue) before the
lock that wakes its holder is released. What an interrupt can still cut short -- a wake-up
after its turn was handed on, a round's hand-off half done -- a parked writer finds at its
next recheck (every :data:`RECHECK` seconds): the lead given to it; its record below
``durable_end``; or a lead held by no one, or by a writer that left (``_leader``), which it
takes. So an interrupt delays the partition's other durable writers instead of leaving them
parked for good. ``sync`` takes the fsync role and hands it on inside one ``try``.

Lock order: the partition lock -> ``sync_lock``. ``_mutex`` guards the hand-off state only and
is never held while taking either of them, nor while blocking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from . import _io

__all__ = ["GATHER_WAIT", "RECHECK", "GroupCommit", "Queued"]

GATHER_WAIT = 0.001
"""Seconds a new leader waits for the writers of the last round to come back before it writes
what it has (a writer that left does not hold up every later round: the next round expects
only as many as came)."""

RECHECK = 0.05
"""Seconds between a parked writer's checks of whether it was given a turn whose wake-up was
lost (an interrupt between handing the turn on, under the mutex, and releasing its lock)."""

_new_lock = threading.Lock


def _parked() -> Any:
    """A fresh lock, held: its owner blocks on it until someone releases it once."""
    lock = _new_lock()
    lock.acquire()
    return lock


class Queued:
    """One writer of a round: its record is at ``offset`` in the reserved batch. ``done`` once
    a round covered it (its turn in the chain of covered writers may come); ``lead``: it holds
    the lead (from when it is given it until its round hands it on); ``gone``: its caller was
    interrupted (a turn it is given passes on); ``wake``: the lock it parks on."""

    __slots__ = ("done", "gone", "lead", "offset", "wake")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.done = False
        self.lead = False
        self.gone = False
        self.wake: Any = None


WriteRound = Callable[[], tuple[int, int]]


class GroupCommit:
    """The durability state of one partition; ``flush`` fsyncs its active segment,
    ``write_round()`` writes a round (see the module notes)."""

    def __init__(self, flush: Callable[[], None], write_round: WriteRound) -> None:
        self._flush = flush
        self._write_round = write_round
        self.sync_lock = threading.Lock()
        self._mutex = threading.Lock()
        self._syncing = False
        self._sync_parked: list[tuple[int, Any]] = []
        self._leading = False
        self._parked: list[Queued] = []  # writers waiting for a round, in arrival order
        self._chain: list[Queued] = []  # covered writers not woken yet, woken one by one
        self._gatherer: Queued | None = None  # a new leader while it waits for writers
        self._leader: Queued | None = None  # the writer holding the lead, while _leading
        self._expected = 1  # writers the last round covered
        self.durable_end = 0
        self.written = 0
        self.synced = 0

    @property
    def parked(self) -> int:
        """Writers parked in the round hand-off (waiting for a round or to lead one)."""
        return len(self._parked)

    # ------------------------------------------------------------------ sync

    def sync(self, seq: int | None = None) -> None:
        """Make every append up to ``seq`` (default: all so far) durable."""
        target = self.written if seq is None else seq
        if self.synced >= target or not _io.SAFETY.fsync_before_ack:
            return
        syncing = False  # (set with _syncing, under the mutex: the finally hands it on)
        try:
            while True:
                with self._mutex:
                    if self.synced >= target:
                        return
                    if not self._syncing:  # no fsync in flight: this caller runs the next
                        syncing = self._syncing = True
                        break
                    entry = (target, _parked())  # covered by the fsync in flight, or the
                    self._sync_parked.append(entry)  # first not covered: woken when it ends
                try:
                    self._sync_wait(entry)
                except BaseException:
                    self._sync_left(entry)
                    raise
            with self.sync_lock:
                if self.synced < target:
                    upto = self.written
                    self._flush()
                    self.synced = max(self.synced, upto)
        finally:
            if syncing:
                self._sync_wake(ended=True)

    def _sync_wait(self, entry: tuple[int, Any]) -> None:
        """A parked ``sync`` caller's wait: until woken, or until it finds itself taken off the
        queue (woken by a caller an interrupt stopped before it released the lock)."""
        while not entry[1].acquire(timeout=RECHECK):
            with self._mutex:
                if entry not in self._sync_parked:
                    return

    def _sync_wake(self, *, ended: bool) -> None:
        """Wake the parked ``sync`` callers the last fsync covered, and the first it did not
        (the next to fsync) when no fsync is running (``ended``: the caller's just did)."""
        woken = []
        with self._mutex:
            if ended:
                self._syncing = False
            parked, self._sync_parked = self._sync_parked, []
            lead = self._syncing
            for entry in parked:
                if entry[0] <= self.synced or not lead:
                    lead = lead or entry[0] > self.synced
                    woken.append(entry[1])
                else:
                    self._sync_parked.append(entry)
        for lock in woken:
            lock.release()

    def _sync_left(self, entry: tuple[int, Any]) -> None:
        """A parked ``sync`` caller was interrupted: if it was woken to fsync next, wake the
        next one instead."""
        with self._mutex:
            woken = entry not in self._sync_parked
            if not woken:
                self._sync_parked.remove(entry)
        if woken:
            self._sync_wake(ended=False)

    def sealed(self) -> None:
        """The active segment was fsynced whole (caller holds ``sync_lock``)."""
        self.synced = self.written

    # ------------------------------------------------------------------ rounds

    def sync_through(self, offset: int) -> bool:
        """Return once ``offset`` (in the reserved batch, or already appended) is on disk.
        False if ``offset`` was never written (its batch failed; the writer has the error)."""
        if self.durable_end > offset:
            return True
        mine = Queued(offset)
        try:
            if self._join(mine):
                return True
            self._lead(mine)
        except BaseException:  # (an interrupt may land between any two bytecodes)
            self._abandon(mine)
            raise
        return self.durable_end > offset

    def _join(self, mine: Queued) -> bool:
        """Lead (False) or park until a round covered ``mine`` (True) or it is to lead. The
        writer that completes a gathering leader's count leads in its place (False): the
        gatherer, woken by no one, is parked as the first of the round's writers."""
        with self._mutex:
            if self._lead_free():
                self._take_lead(mine)
                return False
            gatherer = self._gatherer
            if gatherer is not None and len(self._parked) + 2 >= self._expected:
                if gatherer not in self._parked:  # (an interrupt may have cut a hand-off short)
                    self._parked.insert(0, gatherer)
                gatherer.lead = False
                self._take_lead(mine)
                self._gatherer = None
                return False
            mine.wake = _parked()
            self._parked.append(mine)
        self._wait(mine)
        return self._woken(mine)

    def _wait(self, mine: Queued) -> None:
        """Block until ``mine`` is woken, or until a recheck finds that it holds a turn an
        interrupt cut off: the lead given to it, its record on disk (below ``durable_end``, as
        for every ``done`` writer: its turn in the chain may never come), or a lead no one
        holds (its holder left without handing it on)."""
        while not mine.wake.acquire(timeout=RECHECK):
            with self._mutex:
                if mine.lead:
                    return
                covered = self.durable_end > mine.offset  # (done implies it)
                if covered or self._lead_free():
                    if mine in self._parked:
                        self._parked.remove(mine)
                    if mine in self._chain:
                        self._chain.remove(mine)
                    if covered:
                        mine.done = True
                    else:
                        self._take_lead(mine)
                    return

    def _lead_free(self) -> bool:
        """No writer holds the lead, or its holder left (caller holds ``_mutex``)."""
        leader = self._leader
        return not self._leading or leader is None or leader.gone

    def _take_lead(self, mine: Queued) -> None:
        """``mine`` holds the lead from now (caller holds ``_mutex``)."""
        self._leading = mine.lead = True
        self._leader = mine

    def _woken(self, mine: Queued) -> bool:
        """``mine`` was woken: to lead (False), or covered (True: the next covered writer's
        turn)."""
        if mine.lead:
            return False
        if self._chain:
            with self._mutex:
                nxt = self._next_in_chain()
            if nxt is not None:
                nxt.release()
        return True

    def _next_in_chain(self) -> Any:
        """The lock of the next covered writer to wake, if any (caller holds ``_mutex``)."""
        chain = self._chain
        while chain:
            entry = chain.pop(0)
            if not entry.gone:
                return entry.wake
        return None

    def _next_leader(self) -> Any:
        """Hand the lead to the first parked writer (its lock to release), or give it up
        (caller holds ``_mutex``)."""
        if self._parked:
            nxt = self._parked.pop(0)
            self._take_lead(nxt)
            return nxt.wake
        self._leading = False
        self._leader = None
        return None

    def _abandon(self, mine: Queued) -> None:
        """A writer's caller was interrupted: it leaves the queue if no round took it yet, and
        passes on a turn it holds (the lead, or waking the next covered writer: a second wake
        of a covered writer is harmless)."""
        with self._mutex:
            mine.gone = True
            if self._gatherer is mine or mine.lead:  # (or a hand-off to mine cut short)
                self._gatherer = None
            if mine in self._parked:
                self._parked.remove(mine)
            if mine in self._chain:
                self._chain.remove(mine)
                nxt = None
            elif mine.lead:
                mine.lead = False
                nxt = self._next_leader()
            else:
                nxt = self._next_in_chain() if mine.done else None
        if nxt is not None:
            nxt.release()

    def _gather(self, mine: Queued) -> bool:
        """A new leader's wait for the writers of the last round (see the module notes): False
        to lead now; True once a round covered ``mine`` (the writer that completed the count
        took the lead, and ``mine`` waited as a parked writer)."""
        mutex = self._mutex
        with mutex:
            if len(self._parked) + 1 >= self._expected:
                return False
            self._gatherer = mine
            mine.wake = lock = _parked()
        if not lock.acquire(timeout=GATHER_WAIT):
            with mutex:
                if self._gatherer is mine:  # timed out: expect no more than came
                    self._gatherer = None
                    self._expected = len(self._parked) + 1
                    return False
            self._wait(mine)  # taken over as the wait ended: a parked writer of that round
        return self._woken(mine)

    def _lead(self, mine: Queued) -> None:
        """One round: write the reserved batch, fsync, wake the covered and hand the lead on.
        An error of the write or the fsync is raised (the writers it did not cover lead
        again, and meet it themselves)."""
        if self._expected > 1 and self._gather(mine):
            return
        parked: list[Queued] = []
        end = -1  # (a round that raised covered no one)
        try:
            with self._mutex:
                parked, self._parked = self._parked, []
            written_end, seq = self._write_round()
            self._sync_round(seq)
            end = written_end
        finally:
            self._finish(mine, parked, end)

    def _sync_round(self, seq: int) -> None:
        """A round's fsync: :meth:`sync` without its hand-off (rounds come one at a time; a
        ``sync`` caller meanwhile waits on ``sync_lock``, then finds itself covered)."""
        if self.synced >= seq or not _io.SAFETY.fsync_before_ack:
            return
        with self.sync_lock:
            if self.synced < seq:
                upto = self.written
                self._flush()
                self.synced = max(self.synced, upto)
        if self._sync_parked:
            self._sync_wake(ended=False)

    def _finish(self, mine: Queued, parked: list[Queued], end: int) -> None:
        """Wake the next leader and start the chain of the covered writers (all under the
        mutex, so that an interrupt cannot land between handing the turns on and waking)."""
        with self._mutex:
            if end > self.durable_end:
                self.durable_end = end
            mine.lead = False
            self._expected = len(parked) + 1
            uncovered = []
            for entry in parked:  # the writers it did not cover stay parked (not one gone)
                if entry.gone or entry is mine:  # (mine: a hand-off to it cut short)
                    continue
                if entry.offset >= end:
                    uncovered.append(entry)
                else:
                    entry.done = True
                    self._chain.append(entry)
            self._parked[:0] = uncovered
            leader = self._next_leader()
            first = self._next_in_chain() if self._chain else None
            if leader is not None:
                leader.release()
            if first is not None:
                first.release()

