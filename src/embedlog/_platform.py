"""Platform specifics: ``flock`` locks -- the writer lock and the consumer groups' locks.

A :class:`FileLock` is an ``flock`` held through its own open file description. ``flock`` (not
``fcntl``/``lockf``) because POSIX record locks are dropped when the process closes *any*
descriptor of the file; a ``flock`` belongs to the open file description, so two holders in one
process exclude each other as two processes do, and the kernel releases it when the holder dies
-- a killed writer never leaves a stale lock behind, and a killed group member's partitions
become free at once.

Users: :class:`WriterLock` (``<log dir>/.lock``, held for a writer's lifetime) and the group
files (``lock``, ``members/<id>``, ``leases/<topic>-<partition>``; see :mod:`embedlog.groups`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from . import _io
from .errors import WriterLockedError
from .naming import LOCK_FILE

__all__ = ["FileLock", "WriterLock", "is_locked"]


class FileLock:
    """An exclusive ``flock`` on ``path`` (created if missing); not re-entrant. An abandoned
    holder (garbage-collected without :meth:`release`) lets go, like a dead process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.owner_pid = 0
        """The process that took the lock: only it ever unlocks (a forked child shares the open
        file description, and ``LOCK_UN`` from the child would release the parent's lock)."""

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; ``False`` if ``blocking`` is off and someone else holds it."""
        if self.fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this holder")
        fd = _io.open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.owner_pid = os.getpid()
        return True

    def release(self) -> None:
        """Unlock and close. In a process that inherited the holder through ``fork()`` only the
        descriptor is closed: the lock stays with the process that took it."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                if self.owner_pid == os.getpid():
                    fcntl.flock(fd, fcntl.LOCK_UN)  # also for copies of the description
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        return self.fd is not None

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class WriterLock(FileLock):
    """The exclusive, non-blocking writer lock of one log directory (``<dir>/.lock``)."""

    def __init__(self, directory: str) -> None:
        super().__init__(os.path.join(directory, LOCK_FILE))

    def acquire(self, *, blocking: bool = False) -> bool:
        """Take the lock or raise :class:`~embedlog.errors.WriterLockedError`."""
        if not super().acquire(blocking=blocking):
            raise WriterLockedError(
                f"{os.path.dirname(self.path)} is open for writing by another process or handle; "
                "open it with read_only=True to read"
            )
        return True


def is_locked(path: str) -> bool:
    """Whether someone holds an ``flock`` on ``path`` (``False`` if it does not exist; a
    :class:`~embedlog.errors.CorruptionError` if it is not a regular file)."""
    try:
        fd = _io.open_regular(path)  # a FIFO would block, a symlink could point anywhere
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
