"""Descriptors of deleted files, closed off the caller's thread.

The last close of an unlinked file frees its blocks and drops its cached pages: about 60 ms for
a 120 MiB segment on ext4, paid by whichever thread happens to drop the last reference (a
compaction or retention pass, a reader finishing its iterator). Kafka defers the deletion itself
(``file.delete.delay.ms``); here the file is unlinked at once (crash recovery never sees it) and
only the close of its descriptor is handed to one daemon thread per process.

Nothing reads through a descriptor once it is handed over. In a forked child the queue is
replaced and whatever the parent had queued is closed at once (the child's copies). At exit the
operating system closes what is left.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading

__all__ = ["close_later"]

_lock = threading.Lock()
_queue: queue.SimpleQueue[int] = queue.SimpleQueue()
_owner = 0  # pid whose thread serves _queue (0: none started)


def close_later(fd: int) -> None:
    """Close ``fd`` soon, on the closing thread (started on first use in each process)."""
    global _owner
    _queue.put(fd)
    if _owner != os.getpid():
        with _lock:
            if _owner != os.getpid():
                threading.Thread(target=_serve, args=(_queue,), name="embedlog-closer",
                                 daemon=True).start()
                _owner = os.getpid()


def _serve(fds: queue.SimpleQueue[int]) -> None:
    while True:
        fd = fds.get()
        with contextlib.suppress(OSError):
            os.close(fd)


def _in_child() -> None:
    global _queue, _owner, _lock
    inherited, _queue, _owner, _lock = _queue, queue.SimpleQueue(), 0, threading.Lock()
    with contextlib.suppress(queue.Empty, OSError):
        while True:
            os.close(inherited.get_nowait())


os.register_at_fork(after_in_child=_in_child)
