"""Platform specifics: the writer lock.

The lock is a ``flock`` on ``<log dir>/.lock``, held for the writer's lifetime. ``flock`` (not
``fcntl``/``lockf``) because POSIX record locks are dropped when the process closes *any*
descriptor of the file; a ``flock`` belongs to the open file description and is released by the
kernel when the holder dies, so a killed writer never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os

from . import _io
from .errors import WriterLockedError

__all__ = ["WriterLock"]


class WriterLock:
    """An exclusive, non-blocking writer lock on one log directory."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = _io.open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WriterLockedError(
                f"{os.path.dirname(self.path)} is open for writing by another process or handle; "
                "open it with read_only=True to read"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None
