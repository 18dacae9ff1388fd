"""The optional background cleaner: a daemon thread running compaction rounds.

Every ``interval_s`` seconds (the first round starts at once) it runs
:meth:`~embedlog.compaction.manager.Compactor.clean_round` over the compacted partitions of the
log: one pass over each partition whose dirty ratio exceeds ``min.cleanable.dirty.ratio`` or
whose oldest dirty record is older than ``max.compaction.lag.ms``. A failure is logged and the
round goes on with the next partition. :meth:`CleanerThread.stop` interrupts a pass between two
batches and waits for the thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from ..partition import Partition
from .manager import Compactor

__all__ = ["CleanerThread"]

log = logging.getLogger(__name__)


class CleanerThread(threading.Thread):
    def __init__(
        self,
        compactor: Compactor,
        partitions: Callable[[], Iterable[Partition]],
        interval_s: float,
    ) -> None:
        super().__init__(name="embedlog-cleaner", daemon=True)
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self.compactor = compactor
        self.partitions = partitions
        self.interval_s = interval_s
        self.rounds = 0
        """Completed rounds (tests wait on :attr:`round_done` for it to grow)."""
        self.round_done = threading.Condition()
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.compactor.clean_round(self.partitions(), self._stopping.is_set)
            except Exception:
                log.exception("compaction round failed")
            with self.round_done:
                self.rounds += 1
                self.round_done.notify_all()
            self._stopping.wait(self.interval_s)

    def wait_rounds(self, rounds: int, timeout: float) -> bool:
        """Block until at least ``rounds`` rounds have completed; False on timeout."""
        with self.round_done:
            return self.round_done.wait_for(lambda: self.rounds >= rounds, timeout)

    def stop(self) -> None:
        """Interrupt the current pass (between two batches) and wait for the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join()
