"""File primitives of the group directory: ``flock`` locks and directory creation.

A :class:`FileLock` holds an ``flock`` through its own open file description. Two holders in
one process therefore exclude each other like two processes do, and the kernel drops the lock
when its holder dies -- which is how a killed member's partitions become free at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from .. import _io
from ..errors import StorageError

__all__ = ["FileLock", "ensure_dir", "is_locked"]


class FileLock:
    """An exclusive ``flock`` on ``path`` (created if missing); not re-entrant."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

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
        return True

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # closing the description drops the flock

    @property
    def held(self) -> bool:
        return self.fd is not None

    def __del__(self) -> None:  # an abandoned holder lets go, like a dead process
        with contextlib.suppress(OSError):
            self.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(path: str) -> bool:
    """Whether someone holds an ``flock`` on ``path`` (``False`` if it does not exist)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def ensure_dir(path: str) -> None:
    """Create ``path`` (and its parents up to an existing one) durably; racing creators are
    fine."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    ensure_dir(parent)
    try:
        _io.mkdir(path)
    except StorageError as exc:
        if exc.errno != errno.EEXIST:
            raise
        return
    _io.fsync_dir(parent)
