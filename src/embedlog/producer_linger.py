"""The producer's background writer: writes each open batch ``linger_ms`` after it opened.

One daemon thread per producer, started when the first batch opens and gone after a second
with no open batch (started again by the next one). It sleeps until the oldest open batch is
due; a newly opened batch wakes it only when it is idle (every wake costs a switch of the
interpreter lock), otherwise it sees the batch at its next deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from typing import Final, Protocol

__all__ = ["Linger"]

MIN_LINGER_S: Final = 0.001
IDLE_EXIT_S: Final = 1.0


class Lingering(Protocol):
    """An open batch as the background writer sees it."""

    opened: float  # time.monotonic() when it opened

    def settle(self) -> None:
        """Write it now, if it is still open."""


class Linger:
    """The background writer of the batches in ``open`` (the producer's dict of its open
    batches, read without a lock: a snapshot of its keys is taken each round)."""

    def __init__(self, open_batches: Collection[Lingering], linger_ms: float) -> None:
        self._open = open_batches
        self._linger_s = max(linger_ms / 1000, MIN_LINGER_S)
        self._cv = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._idle = False
        self._stopping = False

    def wake(self) -> None:
        """A batch opened: make sure the background writer will look at it."""
        with self._cv:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(
                    target=self._loop, name="embedlog-producer-linger", daemon=True
                )
                self._thread.start()
            elif self._idle:
                self._cv.notify()

    def stop(self) -> None:
        """Stop the thread (for good) and wait for it, unless called from it."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        linger = self._linger_s
        while True:
            with self._cv:
                if self._stopping:
                    self._thread = None
                    return
                if not self._open:
                    self._idle = True
                    self._cv.wait(IDLE_EXIT_S)
                    self._idle = False
                    if not self._open:
                        self._thread = None
                        return
                    continue
            now = time.monotonic()
            wait = linger
            for slot in list(self._open):
                left = slot.opened + linger - now
                if left > 0:
                    wait = min(wait, left)
                    continue
                slot.settle()
            with self._cv:
                if not self._stopping:
                    self._cv.wait(wait)
